"""Executors decide *where* a step runs; the local one runs subprocesses here.

A step run is described by a picklable ``Launch`` and ends in a ``Finished``
carrying its exit status, its log (stdout and stderr together) and the text
of its result file, so an executor on another machine sends back everything
the manager needs. ``run_step`` is the whole run, blocking (the Dask executor
calls it inside a task); ``LocalExecutor`` does the same without blocking,
waking on process exits through pidfds.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import selectors
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from warehouse.jobs.forkserver import Channel, forkable, server_channel
from warehouse.jobs.fullness import disk_full
from warehouse.jobs.lifeline import Lifeline
from warehouse.jobs.measure import Measured, reap
from warehouse.jobs.model import Resources
from warehouse.jobs.prelude import before_exec
from warehouse.jobs.protocol import process_environment
from warehouse.jobs.sandbox import Sandbox
from warehouse.limits import Guard, Limiter

__all__ = [
    "MAX_LOG",
    "MAX_RESULT",
    "Executor",
    "Finished",
    "Launch",
    "LocalExecutor",
    "ResultTooLong",
    "RunKey",
    "local_capacity",
    "read_log",
    "read_result",
    "run_step",
    "stop_steps",
]


# How often running steps are held to their limits (scratch, processes, time).
_LIMITS_EVERY = 1.0

# What the manager takes of a step's log and result file is read into its
# memory: a step (anyone's program) must not make it read gigabytes. A longer
# log keeps its first and last halves of this; a longer result fails the step.
MAX_LOG = 64 * 1024 * 1024
MAX_RESULT = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Launch:
    job: int
    step: int
    attempt: int
    argv: tuple[str, ...]
    env: dict[str, str]
    scratch_root: str
    request: Resources
    priority: int = 0  # the job's (an executor with its own queue may use it)
    # Placement: the step's input bytes on each host label (docs/clusters.md).
    held: tuple[tuple[str, int], ...] = ()


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
    worker: str = ""  # the Dask worker that ran it (its address), for placement
    limit: str = ""  # the limit it failed by ("memory limit: asked 100 MB"), if any
    usage: Measured | None = None  # what it used, if measured (warehouse.jobs.measure)


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


class _Workdir:
    """A step's working directory: ``tmp/`` (its scratch and cwd), its result
    file, and its log, kept open so a reused directory costs no file opens.

    Plain strings and ``os`` calls: this runs once per step, thousands of
    times a second.
    """

    def __init__(self, root: Path, prefix: str, sandbox: Sandbox | None = None) -> None:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.sandbox = sandbox
        # Unique: an orphan of a killed manager may still use its old one.
        self.path = tempfile.mkdtemp(prefix=prefix, dir=root)
        self.tmp = self.path + "/tmp"
        self.result = self.path + "/result"
        os.mkdir(self.tmp)
        flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        self.log_fd = os.open(self.path + "/log", flags, 0o600)

    def env(self, launch: Launch) -> dict[str, str]:
        env = process_environment(launch.env)
        if self.sandbox is not None:
            env = self.sandbox.environment(env)
        return {**env, "WH_SCRATCH": self.tmp, "TMPDIR": self.tmp, "WH_RESULT": self.result}

    def spawn(
        self,
        launch: Launch,
        guard: Guard | None = None,
        lifeline: bool = True,
        tell: Lifeline | None = None,
    ) -> subprocess.Popen[bytes]:
        """``lifeline``: its executor has one (else the step is killed, not
        stopped, with the thread starting it: nothing would kill it later),
        and ``tell``: the lifeline the step's process tells its pid before exec."""
        argv: tuple[str, ...] | list[str] = launch.argv
        if self.sandbox is not None:
            self.sandbox.prepare_scratch(self.tmp, self.result)
            function_dir = launch.env.get("WH_FUNCTION_DIR", self.tmp)
            argv = self.sandbox.wrap(
                argv, function_dir=function_dir, scratch=self.tmp, result=self.result
            )
        return self._popen(argv, launch, guard, lifeline, tell)

    def _popen(
        self,
        argv: tuple[str, ...] | list[str],
        launch: Launch,
        guard: Guard | None,
        lifeline: bool,
        tell: Lifeline | None,
    ) -> subprocess.Popen[bytes]:
        env = self.env(launch)
        argv, hook = before_exec(
            argv,
            program=launch.argv[0],
            env=env,
            cwd=self.tmp,
            sandboxed=self.sandbox is not None,
            guard=guard,
            lifeline=lifeline,
            tell=tell,
        )
        return subprocess.Popen(
            argv,
            env=env,
            cwd=self.tmp,
            stdin=subprocess.DEVNULL,
            stdout=self.log_fd,  # shares our offset: the log is what it wrote
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, killed as a whole
            preexec_fn=hook,
        )

    def collect(
        self,
        launch: Launch,
        status: int,
        host: str,
        started: float,
        guard: Guard | None = None,
        usage: Measured | None = None,
    ) -> Finished:
        log = read_log(self.log_fd)
        limit = guard.finish(status, log[-4096:], time.time()) if guard is not None else None
        # Asked before the scratch is emptied: a full disk may have cut its writes short.
        limit = limit or disk_full(self.path)
        if limit is not None:
            log += f"\nwh: {limit}\n".encode()
            status = status or 1  # over its scratch, or its disk full, though it ended well
        result = ""
        if status == 0:
            try:
                result = read_result(self.result)
            except ResultTooLong as e:
                log += f"\nwh: {e}\n".encode()
                status = 1
        ids = (launch.job, launch.step, launch.attempt)
        end, limit = time.time(), limit or ""
        return Finished(*ids, status, host, started, end, log, result, limit=limit, usage=usage)

    def not_started(self, launch: Launch, error: OSError, host: str, started: float) -> Finished:
        """The failed run of a step whose program could not be started (not
        executable, no such interpreter): a failed attempt, as a shell says
        (126, or 127 for a file not found), not an error of the manager's."""
        os.write(self.log_fd, f"wh: the step could not be started: {error}\n".encode())
        status = 127 if isinstance(error, FileNotFoundError) else 126
        done = self.collect(launch, status, host, started)
        self.reset()
        return done

    def reset(self) -> None:
        """As good as new for the next step (cheap when the step left nothing)."""
        if os.lseek(self.log_fd, 0, os.SEEK_END):
            os.ftruncate(self.log_fd, 0)
            os.lseek(self.log_fd, 0, os.SEEK_SET)
        try:
            os.unlink(self.result)
        except FileNotFoundError:
            pass
        except OSError:  # the step made a directory there
            _clear(self.result, self.path)
        try:
            # Not through a link: a step may put one to any directory in its
            # scratch's place; emptying that is not ours to do.
            if os.path.islink(self.tmp):
                raise NotADirectoryError(self.tmp)
            with os.scandir(self.tmp) as it:
                dirty = next(it, None) is not None
        except OSError:  # the step took its permissions away, or removed it
            dirty = True
        if dirty:
            _clear(self.tmp, self.path)
            os.mkdir(self.tmp)

    def remove(self) -> None:
        os.close(self.log_fd)
        shutil.rmtree(self.path, ignore_errors=True)


def _clear(tree: str, aside: str) -> None:
    """Remove a step's scratch ``tree``, whatever the step did to it.

    A step running as our own user (not root) can take its own permissions
    away from directories it made, and rmtree then leaves them: give them
    back and try again; what still stays is moved into ``aside`` (the work
    directory, which no step sees) so the next step, perhaps another user's,
    starts empty."""
    if os.path.islink(tree) or not os.path.isdir(tree):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tree)  # the link, never what it names
        return
    shutil.rmtree(tree, ignore_errors=True)
    if not os.path.lexists(tree):
        return
    with contextlib.suppress(OSError):
        os.chmod(tree, 0o700)
    # Top down: each directory is opened up before the walk goes into it.
    for root, dirs, _ in os.walk(tree):
        for name in dirs:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                with contextlib.suppress(OSError):
                    os.chmod(path, 0o700)
    shutil.rmtree(tree, ignore_errors=True)
    if os.path.lexists(tree):
        os.rename(tree, tempfile.mkdtemp(prefix="left-", dir=aside) + "/tmp")


class ResultTooLong(Exception):
    """A step's result file refused: over ``MAX_RESULT`` bytes, or no regular
    file (the name is kept: other executors catch it)."""


def read_log(fd: int) -> bytes:
    """The log written to ``fd``; over ``MAX_LOG`` bytes, its two ends."""
    size = os.lseek(fd, 0, os.SEEK_END)
    if size <= MAX_LOG:
        return os.pread(fd, size, 0) if size else b""
    half = MAX_LOG // 2
    cut = f"\nwh: {size - 2 * half} bytes of the log left out (a log keeps {MAX_LOG} bytes)\n"
    return os.pread(fd, half, 0) + cut.encode() + os.pread(fd, half, size - half)


def read_result(path: str) -> str:
    # Never through a link: a step could point its result at a file of ours.
    # Nor blocking on a FIFO the step made there (no writer: forever).
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:  # none written, or a link
        return ""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ResultTooLong("the step's result file is not a regular file: refused")
    with open(fd, "rb") as f:
        data = f.read(MAX_RESULT + 1)
    if len(data) > MAX_RESULT:
        raise ResultTooLong(f"the step's result file is over {MAX_RESULT} bytes: refused")
    return data.decode("utf-8", "replace")


# Work directories of this process kept for the next step (a Dask worker runs
# thousands of steps), removed when the process exits.
_spare: dict[str, list[_Workdir]] = {}
_spare_lock = threading.Lock()


@atexit.register
def _remove_spares() -> None:
    for works in _spare.values():
        for work in works:
            work.remove()


# Step runs this process runs through run_step, and those told to stop, so
# that stop_steps (called here by an executor's control message, e.g. Dask's
# client.run) can kill one that runs and skip one not yet begun. A run is
# (the sending executor's id, job, step, attempt): job numbers are only
# unique within one catalog, and a later attempt must not be stopped.
RunKey = tuple[str, int, int, int]
_running: dict[RunKey, subprocess.Popen[bytes]] = {}
_stopping: dict[RunKey, float] = {}  # -> when asked, forgotten after an hour
_STOP_MEMORY = 3600.0


def stop_steps(keys: list[RunKey]) -> int:
    """Kill these runs if they run in this process, and skip them if they
    start later; the number killed."""
    now = time.time()
    killed = 0
    with _spare_lock:
        for key in [k for k, at in _stopping.items() if now - at > _STOP_MEMORY]:
            del _stopping[key]
        for sender, job, step, attempt in keys:  # lists, when they came over the wire
            key = (sender, job, step, attempt)
            _stopping[key] = now
            proc = _running.get(key)
            if proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                killed += 1
    return killed


def run_step(launch: Launch, sender: str = "") -> Finished:
    """Run one step to its end, here and now, unless ``sender`` (the executor
    that sent it) told this process to stop it."""
    key = (sender, launch.job, launch.step, launch.attempt)
    with _spare_lock:
        free = _spare.setdefault(launch.scratch_root, [])
        work = free.pop() if free else None
    if work is None:
        work = _Workdir(Path(launch.scratch_root), f"worker-{os.getpid()}-")
    try:
        started = time.time()
        # Checked and registered at once: a stop comes before or finds it.
        unstartable = None
        with _spare_lock:
            try:
                proc = None if _stopping.pop(key, None) else work.spawn(launch, lifeline=False)
            except OSError as e:
                proc, unstartable = None, e
            if proc is not None:
                _running[key] = proc
        if unstartable is not None:
            done = work.not_started(launch, unstartable, socket.gethostname(), started)
        elif proc is None:
            log = b"wh: the step was stopped before it started\n"
            host = socket.gethostname()
            done = Finished(*key[1:], -signal.SIGKILL, host, started, started, log, "")
        else:
            try:
                status, usage = reap(proc)
            finally:
                with _spare_lock:
                    _running.pop(key, None)
                    _stopping.pop(key, None)
            done = work.collect(launch, status, socket.gethostname(), started, usage=usage)
            work.reset()
    except BaseException:
        work.remove()
        raise
    with _spare_lock:
        _spare[launch.scratch_root].append(work)
    return done


_Ended = tuple[tuple[int, int], int, Measured | None]  # (job, step), status, usage


@dataclass(slots=True)
class _Running:
    launch: Launch
    work: _Workdir
    started: float
    proc: subprocess.Popen[bytes] | None = None  # started the plain way
    served: int = 0  # else: its id on the fork server's channel
    guard: Guard | None = None  # its limits, when the executor has a Limiter


class LocalExecutor:
    """Subprocesses on this machine; ``capacity`` defaults to one slot per core.

    With a ``sandbox`` (a controller's steps) each step runs inside it.
    With a ``limiter`` each step is held to its limits (``warehouse.limits``)
    and none is forked. Without a sandbox, Python steps are forked from this
    process's fork server (``warehouse.jobs.forkserver``, unless
    ``fork_server`` is False), once it runs and is ready; any other step is
    started as a subprocess.
    """

    def __init__(
        self,
        capacity: Resources | None = None,
        sandbox: Sandbox | None = None,
        *,
        fork_server: bool = True,
        limiter: Limiter | None = None,
    ) -> None:
        self.capacity = capacity or local_capacity()
        self.limiter = limiter
        self._next_check = 0.0  # when running steps are next held to their limits
        self.sandbox = sandbox
        self._prepared: set[str] = set()
        self.largest = self.capacity
        self._selector = selectors.DefaultSelector()
        self._procs: dict[tuple[int, int], _Running] = {}
        self._served: dict[int, tuple[int, int]] = {}  # server id -> (job, step)
        self._unstarted: list[Finished] = []  # runs that failed to start, for the next poll
        self._host = socket.gethostname()
        # Work directories are reused, one per slot, so a step costs no mkdir/rmdir.
        self._free: list[_Workdir] = []
        self._all: list[_Workdir] = []
        self._fork = sandbox is None and fork_server and limiter is None
        self._channel: Channel | None = None
        self._lifeline = Lifeline()
        if self._fork:
            self._connect(start=False)  # to a server this process runs already

    def _connect(self, *, start: bool) -> None:
        self._channel = server_channel(process_environment({}), start=start)
        if self._channel is not None:
            self._selector.register(self._channel, selectors.EVENT_READ, None)

    def start(self, launch: Launch) -> None:
        if self._free:
            work = self._free.pop()
        else:
            work = _Workdir(Path(launch.scratch_root), f"local-{os.getpid()}-", self.sandbox)
            self._all.append(work)
        function_dir = launch.env.get("WH_FUNCTION_DIR")
        if self.sandbox is not None and function_dir and function_dir not in self._prepared:
            self.sandbox.prepare_function(Path(function_dir))
            self._prepared.add(function_dir)
        started = time.time()
        key = (launch.job, launch.step)
        served = None
        if self._channel is not None:
            served = self._channel.start(launch.argv, work.env(launch), work.tmp, work.log_fd)
        if served is not None:
            self._served[served] = key
            self._procs[key] = _Running(launch, work, started, served=served)
            return
        self._lifeline.start()
        guard = None
        try:  # a step whose limits cannot be set is not run without them
            if self.limiter is not None:
                request = launch.request
                guard = self.limiter.guard(request.cpus, request.memory, work.tmp, started)
            proc = work.spawn(launch, guard, tell=self._lifeline)
        except OSError as e:
            self._lifeline.not_started()
            if guard is not None:
                guard.close()
            self._unstarted.append(work.not_started(launch, e, self._host, started))
            self._free.append(work)
            return
        self._lifeline.hold(proc.pid)
        if guard is not None:
            guard.running(proc.pid)
        fd = os.pidfd_open(proc.pid)
        self._selector.register(fd, selectors.EVENT_READ, key)
        self._procs[key] = _Running(launch, work, started, proc, guard=guard)

    def poll(self, timeout: float) -> list[Finished]:
        if self._unstarted:
            unstarted, self._unstarted = self._unstarted, []
            return unstarted
        if not self._procs:
            time.sleep(timeout)
            return []
        ended: list[_Ended] = []
        if self.limiter is not None:
            timeout = min(timeout, self._hold())
        for key, _ in self._selector.select(timeout):
            if key.data is None:  # the fork server's channel
                ended += self._served_ended()
                continue
            fd = key.fd
            self._selector.unregister(fd)
            os.close(fd)
            run = self._procs[key.data]
            assert run.proc is not None
            self._lifeline.let_go(run.proc.pid)  # before the reaping frees its pid
            ended.append((key.data, *reap(run.proc)))
        done = []
        for step_key, status, usage in ended:
            run = self._procs.pop(step_key)
            args = (run.launch, status, self._host, run.started, run.guard, usage)
            done.append(run.work.collect(*args))
            if run.guard is not None:
                run.guard.close()  # what left its process group is killed too
            run.work.reset()
            self._free.append(run.work)
            if self._fork and self._channel is None and forkable(run.launch.argv):
                # Started only now, not beside that step: a process that runs one
                # Python step never pays for a second interpreter's imports.
                self._connect(start=True)
        return done

    def _hold(self) -> float:
        """Stop each step over a limit (its reason kept for its end); the
        seconds until the next look."""
        now = time.time()
        if now >= self._next_check:
            self._next_check = now + _LIMITS_EVERY
            for run in self._procs.values():
                if run.guard is not None and run.proc is not None and run.guard.check(now):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(run.proc.pid, signal.SIGKILL)
                    run.guard.kill()
        return max(0.0, self._next_check - now)

    def _served_ended(self) -> list[_Ended]:
        assert self._channel is not None
        found = self._channel.receive()
        if found is not None:
            return [(self._served.pop(i), status, usage) for i, status, usage in found]
        # The server is gone: its steps are killed and fail (they are retried),
        # and this executor's next steps start the plain way.
        channel, self._channel = self._channel, None
        self._fork = False
        self._selector.unregister(channel)
        for pid in channel.pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        channel.close()
        lost: list[_Ended] = []
        for key in self._served.values():
            os.write(self._procs[key].work.log_fd, b"\nwh: the fork server exited\n")
            lost.append((key, -signal.SIGKILL, None))
        self._served.clear()
        return lost

    def kill(self, job: int, step: int) -> None:
        run = self._procs.get((job, step))
        if run is None:
            return
        if run.proc is None:
            if self._channel is not None:
                self._channel.kill(run.served)  # the server kills its process group
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.proc.pid, signal.SIGKILL)

    def running(self) -> int:
        return len(self._procs)

    def close(self) -> None:
        for job, step in list(self._procs):
            self.kill(job, step)
        while self._procs:
            self.poll(1.0)
        self._selector.close()
        self._lifeline.close()
        if self.limiter is not None:
            self.limiter.close()
        if self._channel is not None:
            self._channel.close()
        for work in self._all:
            work.remove()
