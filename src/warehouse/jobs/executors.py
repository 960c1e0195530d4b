"""Executors decide *where* a step runs; the local one runs subprocesses here.

A step run is described by a picklable ``Launch`` and ends in a ``Finished``
carrying its exit status, its log (stdout and stderr together) and the text
of its result file, so an executor on another machine sends back everything
the manager needs. ``run_step`` is the whole run, blocking (the Dask executor
calls it inside a task); ``LocalExecutor`` does the same without blocking,
waking on process exits through pidfds.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from warehouse.jobs.model import Resources

__all__ = [
    "Executor",
    "Finished",
    "Launch",
    "LocalExecutor",
    "local_capacity",
    "run_step",
]


@dataclass(frozen=True, slots=True)
class Launch:
    job: int
    step: int
    attempt: int
    argv: tuple[str, ...]
    env: dict[str, str]
    scratch_root: str
    request: Resources


@dataclass(frozen=True, slots=True)
class Finished:
    job: int
    step: int
    attempt: int
    exit_status: int  # negative: killed by that signal
    host: str
    started_at: float
    finished_at: float
    log: bytes
    result: str


class Executor(Protocol):
    capacity: Resources  # what the manager may have running at once
    largest: Resources  # the most one step may ask for

    def start(self, launch: Launch) -> None: ...

    def poll(self, timeout: float) -> list[Finished]: ...

    def kill(self, job: int, step: int) -> None: ...

    def running(self) -> int: ...

    def close(self) -> None: ...


def local_capacity(cpus: int | None = None, memory: int | None = None) -> Resources:
    """One slot per core and all the memory, unless told otherwise."""
    cores = len(os.sched_getaffinity(0))
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return Resources(cpus or cores, memory or total)


def _new_workdir(root: Path, prefix: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    # Unique: an orphan of a killed manager may still use its old one.
    work = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    (work / "tmp").mkdir()
    return work


def _step_env(launch: Launch, work: Path) -> dict[str, str]:
    scratch = work / "tmp"
    return {
        **launch.env,
        "WH_SCRATCH": str(scratch),
        "TMPDIR": str(scratch),
        "WH_RESULT": str(work / "result"),
    }


def _reset(work: Path) -> None:
    """Make a used work directory as good as new (cheap when the step left nothing)."""
    for name in ("log", "result"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(work / name)
    with os.scandir(work / "tmp") as it:
        dirty = next(it, None) is not None
    if dirty:
        shutil.rmtree(work / "tmp", ignore_errors=True)
        (work / "tmp").mkdir()


def _spawn(launch: Launch, work: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(work / "log", "wb") as log:
        return subprocess.Popen(
            launch.argv,
            env=env,
            cwd=work / "tmp",
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, killed as a whole
        )


def _collect(launch: Launch, work: Path, status: int, host: str, started: float) -> Finished:
    log = _read(work / "log")
    result = _read(work / "result").decode("utf-8", "replace") if status == 0 else ""
    return Finished(
        launch.job, launch.step, launch.attempt, status, host, started, time.time(), log, result
    )


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def run_step(launch: Launch) -> Finished:
    """Run one step to its end, here and now."""
    work = _new_workdir(Path(launch.scratch_root), f"{launch.job}-{launch.step}-")
    try:
        started = time.time()
        proc = _spawn(launch, work, _step_env(launch, work))
        status = proc.wait()
        return _collect(launch, work, status, socket.gethostname(), started)
    finally:
        shutil.rmtree(work, ignore_errors=True)


class LocalExecutor:
    """Subprocesses on this machine; ``capacity`` defaults to one slot per core."""

    def __init__(self, capacity: Resources | None = None) -> None:
        self.capacity = capacity or local_capacity()
        self.largest = self.capacity
        self._selector = selectors.DefaultSelector()
        self._procs: dict[tuple[int, int], tuple[Launch, subprocess.Popen[bytes], Path, float]] = {}
        self._host = socket.gethostname()
        # Work directories are reused, one per slot, so a step costs no mkdir/rmdir.
        self._free: list[Path] = []
        self._roots: set[Path] = set()

    def start(self, launch: Launch) -> None:
        if self._free:
            work = self._free.pop()
        else:
            work = _new_workdir(Path(launch.scratch_root), f"local-{os.getpid()}-")
            self._roots.add(work)
        started = time.time()
        proc = _spawn(launch, work, _step_env(launch, work))
        fd = os.pidfd_open(proc.pid)
        self._selector.register(fd, selectors.EVENT_READ, (launch.job, launch.step))
        self._procs[(launch.job, launch.step)] = (launch, proc, work, started)

    def poll(self, timeout: float) -> list[Finished]:
        if not self._procs:
            time.sleep(timeout)
            return []
        done = []
        for key, _ in self._selector.select(timeout):
            fd = key.fd
            self._selector.unregister(fd)
            os.close(fd)
            launch, proc, work, started = self._procs.pop(key.data)
            status = proc.wait()
            done.append(_collect(launch, work, status, self._host, started))
            _reset(work)
            self._free.append(work)
        return done

    def kill(self, job: int, step: int) -> None:
        entry = self._procs.get((job, step))
        if entry is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(entry[1].pid, signal.SIGKILL)

    def running(self) -> int:
        return len(self._procs)

    def close(self) -> None:
        for job, step in list(self._procs):
            self.kill(job, step)
        while self._procs:
            self.poll(1.0)
        self._selector.close()
        for work in self._roots:
            shutil.rmtree(work, ignore_errors=True)
