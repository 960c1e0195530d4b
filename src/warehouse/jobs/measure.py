"""What a step's process used, read as it is reaped (docs/usage.md).

A step's end is where the kernel holds its account: ``wait4`` gives the CPU
time and largest resident set of the process and of every descendant it
waited for, and ``/proc/PID/io`` of the zombie (read before the reaping)
the bytes it and those descendants passed through read and write calls.
Every executor reaps its steps with ``reap``: the local one, the fork
server, a Dask worker; a sandboxed step and a Slurm batch script's step
run under ``warehouse.jobs.measurer``, which reports the same from inside.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from typing import Any, Protocol

from warehouse.jobs import measurer
from warehouse.jobs.measurer import Measured, wait_measured

__all__ = [
    "Measured",
    "add_attempt",
    "measured_argv",
    "parse_measured",
    "read_measured",
    "reap",
    "wait_measured",
]


def reap(proc: subprocess.Popen[bytes]) -> tuple[int, Measured]:
    """Wait for a step's process to end, kill what it left running in its
    process group, and then reap it, measured: (exit status, usage).

    A step's background children must not outlive it: they would write into
    the next step's log and scratch directory (the work directory is reused).
    Killed before the reaping: while its zombie holds the pid, the group id
    cannot name anyone else's processes."""
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    status, measured = wait_measured(proc.pid)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, measured


class _Attempt(Protocol):
    """A finished attempt (``executors.Finished``, which imports this module)."""

    @property
    def started_at(self) -> float: ...
    @property
    def finished_at(self) -> float: ...
    @property
    def usage(self) -> Measured | None: ...


def add_attempt(before: Mapping[str, Any] | None, attempt: _Attempt) -> dict[str, Any]:
    """A step's usage columns with one more attempt: times and bytes add up,
    peak memory is the largest. An attempt not measured (lost with its
    worker, stopped before it began) adds its wall time only."""
    cpu, peak, read, written = attempt.usage or (0.0, 0, 0, 0)
    wall = max(0.0, attempt.finished_at - attempt.started_at)
    old = before or {}
    return {
        "cpu_seconds": (old.get("cpu_seconds") or 0.0) + cpu,
        "wall_seconds": (old.get("wall_seconds") or 0.0) + wall,
        "peak_memory": max(old.get("peak_memory") or 0, peak),
        "read_bytes": (old.get("read_bytes") or 0) + read,
        "written_bytes": (old.get("written_bytes") or 0) + written,
    }


def measured_argv(argv: tuple[str, ...] | list[str], out: str) -> list[str]:
    """``argv`` run under ``measurer`` (by path, with no site packages
    and no environment read: it needs the standard library only), its usage
    written to ``out``."""
    return [sys.executable, "-I", "-S", os.path.abspath(measurer.__file__), out, "--", *argv]


def read_measured(path: str) -> Measured | None:
    """What ``measurer`` wrote to ``path``; None if it wrote nothing usable."""
    try:
        with open(path, "rb") as f:
            return parse_measured(f.read(4096))
    except OSError:
        return None


def parse_measured(data: bytes) -> Measured | None:
    """What ``measurer`` wrote; None if it is not that (nothing, or cut short)."""
    try:
        cpu, peak, read, written = json.loads(data)
        return (float(cpu), int(peak), int(read), int(written))
    except (ValueError, TypeError):
        return None
