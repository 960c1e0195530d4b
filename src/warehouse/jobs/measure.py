"""What a step's process used, read as it is reaped (docs/usage.md).

A step's end is where the kernel holds its account: ``wait4`` gives the CPU
time and largest resident set of the process and of every descendant it
waited for, and ``/proc/PID/io`` of the zombie (read before the reaping)
the bytes it and those descendants passed through read and write calls.
Every executor reaps its steps with ``reap``: the local one, the fork
server, a Dask worker; a Slurm batch script runs each step under
``python -m warehouse.jobs.measure`` (``main``), which reports the same.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = [
    "Measured",
    "add_attempt",
    "io_counters",
    "measured_argv",
    "parse_measured",
    "read_measured",
    "reap",
    "wait_measured",
]

# (cpu seconds, peak memory bytes, bytes read, bytes written)
Measured = tuple[float, int, int, int]


def io_counters(pid: int) -> tuple[int, int]:
    """(rchar, wchar) of ``pid`` and the children it reaped; (0, 0) where
    the kernel keeps no such account or will not show it."""
    found = {"rchar": 0, "wchar": 0}
    with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/io", "rb") as f:
        for line in f.read().decode().splitlines():
            name, _, value = line.partition(":")
            if name in found:
                found[name] = int(value)
    return found["rchar"], found["wchar"]


def wait_measured(pid: int) -> tuple[int, Measured]:
    """Wait for ``pid`` to end, measure it and reap it: (wait status, usage).

    ``/proc/PID/io`` is read between, while the zombie holds it."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    io = io_counters(pid)
    _, status, ru = os.wait4(pid, 0)
    return status, _measured(ru, io)


def _measured(ru: resource.struct_rusage, io: tuple[int, int]) -> Measured:
    # ru_maxrss is in KiB on Linux.
    return (ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024, io[0], io[1])


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
    """``argv`` run under ``main`` (this file by path, with no site packages
    and no environment read: it needs the standard library only), its usage
    written to ``out``."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), out, "--", *argv]


def read_measured(path: str) -> Measured | None:
    """What ``main`` wrote to ``path``; None if it wrote nothing usable."""
    try:
        with open(path, "rb") as f:
            return parse_measured(f.read(4096))
    except OSError:
        return None


def parse_measured(data: bytes) -> Measured | None:
    """What ``main`` wrote; None if it is not that (nothing, or cut short)."""
    try:
        cpu, peak, read, written = json.loads(data)
        return (float(cpu), int(peak), int(read), int(written))
    except (ValueError, TypeError):
        return None


def main() -> None:
    """``python -I -S -m warehouse.jobs.measure FILE -- PROGRAM ARG…``: run
    PROGRAM (its output is ours), then write its usage to FILE as JSON and
    exit as it did (128+N for a signal, as a shell says)."""
    out, argv = sys.argv[1], sys.argv[3:]
    if out.startswith("/dev/fd/"):
        # A pipe from the executor: the step must not inherit it (it could
        # write figures of its own there first).
        os.set_inheritable(int(out[len("/dev/fd/") :]), False)
    try:
        pid = os.posix_spawnp(argv[0], argv, os.environ)
    except OSError as e:
        print(f"wh: the step could not be started: {e}", file=sys.stderr)
        sys.exit(127 if isinstance(e, FileNotFoundError) else 126)
    # Signals a batch script's step gets (scancel) are the step's to end with.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda n, _f: os.kill(pid, n))
    status, measured = wait_measured(pid)
    with open(out, "w") as f:
        json.dump(measured, f)
    code = os.waitstatus_to_exitcode(status)
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
