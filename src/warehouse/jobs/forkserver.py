"""A warm Python that forks the local executor's Python steps.

Starting a Python step costs an interpreter start and its imports (the
warehouse's step modules, DuckDB): a few tenths of a second on an idle
machine, seconds under load, which is most of a short query's time. The
fork server is one Python process per manager process with those modules
imported (``PRELOAD``); each Python step (``python -P FILE``) is a child
forked from it, set up as a fresh process would be:

- its own session and process group (the whole group is killed on cancel);
- the working directory, and the environment replaced wholesale by the
  step's own;
- stdin ``/dev/null``, stdout and stderr the step's log;
- ``sys.argv`` ``[FILE]``, the file run as ``__main__`` (``-P``: its
  directory is not put on ``sys.path``);
- the exit status as the interpreter gives it (``SystemExit``, a traceback
  and 1, or the signal that killed it), reported to the executor.

It is started once a Python step started the plain way has ended (so a
process that runs one step, such as ``wh query`` with its own manager,
never pays for a second interpreter's imports beside that step's), and
used once it has its modules imported; until then steps start the plain
way. Only a step whose environment equals the server's apart from the step
protocol's variables is forked (Python reads the rest at start-up: ``PYTHON*``,
the locale, ``HOME``...); any other step, and every step run in a sandbox,
is started the plain way. A preloaded module must not read the environment
at import (the warehouse's read it when called).

Wire: the executor's process holds one control socket to the server and
passes it one ``SOCK_SEQPACKET`` channel per executor (``send_fds``). On a
channel, JSON messages: ``start`` (id, argv, env, cwd; the log descriptor
alongside) and ``kill`` (id) go to the server; ``started`` (id, pid) and
``exited`` (id, status, usage) come back. The server kills a process group only
while its leader is not yet reaped, so a reused pid is never hit. When a
channel closes (its executor closed, or the executor's process died, however)
the server kills the steps of that channel still running: no step outlives
its manager; and each forked step is killed by the kernel if the server
itself dies (``PR_SET_PDEATHSIG``; not set on the server, which any thread
of the executor's process may start: the kernel would kill it with that
thread). When the control socket closes (the process exits, or lets the
server go because its environment changed since the server started: steps
would never be forked from it again, so another server is started) the
server serves the channels it has until the last closes, and exits.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import gc
import importlib
import importlib.machinery
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from warehouse.jobs.lifeline import on_parent_death
from warehouse.jobs.measure import Measured, wait_measured
from warehouse.jobs.protocol import ENV_VARS, process_environment

__all__ = ["PRELOAD", "Channel", "forkable", "ready", "server_channel", "warm"]

# Imported once by the server: what the built-in Python steps import.
PRELOAD = (
    "warehouse.step",
    "warehouse.query.steps",
    "warehouse.mapreduce.run",
    "duckdb",
)
MAX_MESSAGE = 1 << 18  # bytes; a larger start request is started the plain way
_RECV = 1 << 20


# -- the executor's side --------------------------------------------------------


class _Server:
    """The server process and the control socket of this process to it."""

    def __init__(self, base_env: dict[str, str]) -> None:
        self.base = _startup_part(base_env)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        code = "from warehouse.jobs.forkserver import main; main()"
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-c", code, str(theirs.fileno())],
            env=base_env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # a step's stdout starts empty: nothing buffered
            pass_fds=[theirs.fileno()],
            start_new_session=True,  # not interrupted with the terminal's process group
        )
        theirs.close()
        self.control = ours
        self.lock = threading.Lock()
        self._ready = False

    def ready(self) -> bool:
        """Whether it has imported ``PRELOAD`` (it says so once, on the control socket)."""
        if not self._ready:
            with self.lock, contextlib.suppress(OSError):
                self._ready = self.control.recv(16, socket.MSG_DONTWAIT) == b"ready"
        return self._ready

    def channel(self) -> Channel | None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with self.lock:
                socket.send_fds(self.control, [b"channel"], [theirs.fileno()])
        except OSError:  # the server is gone
            ours.close()
            return None
        finally:
            theirs.close()
        return Channel(ours, self.base, self.ready)

    def close(self) -> None:
        """Let it go: it serves the channels it has until each closes (an
        executor closing, or this process ending however it ends), killing the
        steps of that channel still running, and then exits. Still importing,
        it has forked nothing: it is killed."""
        serving = self.ready()
        self.control.close()
        if not serving:
            self.proc.kill()
            self.proc.wait()


_server: list[_Server] = []
_server_lock = threading.Lock()
_let_go: list[_Server] = []  # servers closed while in use, reaped once they end


@atexit.register
def _stop_server() -> None:
    with _server_lock:
        for server in _server:
            server.close()
        _let_go.extend(_server)
        _server.clear()
        for server in _let_go:
            # Ends at once unless an executor left open still has steps with it
            # (they end with this process): then it is not waited for.
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.proc.wait(2)


def _running(base_env: dict[str, str], start: bool = True) -> _Server | None:
    """This process's server; ``start``: started if none runs, or another one
    started instead of one whose start-up environment is not this process's
    any more (steps would never be forked from it)."""
    with _server_lock:
        _let_go[:] = [s for s in _let_go if s.proc.poll() is None]
        if _server and _server[0].proc.poll() is not None:  # it died: start another
            _server.pop().control.close()
        if _server and _server[0].base != _startup_part(base_env):
            if not start:
                return None
            server = _server.pop()
            server.close()  # its executors' steps go on being served by it
            _let_go.append(server)
        if not _server and start:
            try:
                _server.append(_Server(base_env))
            except OSError:
                return None
        return _server[0] if _server else None


def ready() -> bool:
    """Whether this process's fork server runs and has imported ``PRELOAD``."""
    with _server_lock:
        server = _server[0] if _server else None
    return server is not None and server.proc.poll() is None and server.ready()


def warm() -> None:
    """Start this process's fork server now (else the local executor starts
    it once a Python step it started the plain way has ended)."""
    _running(process_environment({}))


def server_channel(base_env: dict[str, str], *, start: bool = True) -> Channel | None:
    """A channel to this process's fork server, started now with ``base_env``
    as its environment if none runs (and ``start``); None if there is none."""
    server = _running(base_env, start)
    return None if server is None else server.channel()


def _startup_part(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in ENV_VARS}


def forkable(argv: tuple[str, ...] | list[str]) -> bool:
    """Whether the command is a Python step this server can run: ``python -P FILE``."""
    return len(argv) == 3 and argv[0] == sys.executable and argv[1] == "-P"


class Channel:
    """One executor's channel to the server: start and kill steps, learn their ends."""

    def __init__(
        self, sock: socket.socket, base: dict[str, str], ready: Callable[[], bool]
    ) -> None:
        self.sock = sock
        self.base = base
        self.ready = ready
        self._next = 0
        self.pids: dict[int, int] = {}  # id -> pid, once the server said

    def fileno(self) -> int:
        return self.sock.fileno()

    def start(
        self, argv: tuple[str, ...], env: dict[str, str], cwd: str, log_fd: int
    ) -> int | None:
        """Ask for the step to be forked; its id, or None if it must be started
        the plain way (other start-up environment, too big, server gone, or
        still importing: a fresh process imports the step's own modules
        first and DuckDB beside its checks, so it starts no later)."""
        if not forkable(argv) or not self.ready() or _startup_part(env) != self.base:
            return None
        self._next += 1
        message = {"op": "start", "id": self._next, "argv": list(argv), "env": env, "cwd": cwd}
        data = json.dumps(message).encode()
        if len(data) > MAX_MESSAGE:
            return None
        try:  # never waiting: the server may be waiting for us to read
            socket.send_fds(self.sock, [data], [log_fd], socket.MSG_DONTWAIT)
        except OSError:
            return None
        return self._next

    def kill(self, ident: int) -> None:
        with contextlib.suppress(OSError):
            self.sock.send(json.dumps({"op": "kill", "id": ident}).encode())

    def receive(self) -> list[tuple[int, int, Measured | None]] | None:
        """(id, exit status, usage) of the steps that ended, from what is
        waiting; None if the server is gone."""
        ended: list[tuple[int, int, Measured | None]] = []
        while True:
            try:
                data = self.sock.recv(_RECV, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return ended
            except OSError:
                return None
            if not data:
                return None
            message = json.loads(data)
            if message["op"] == "started":
                self.pids[message["id"]] = message["pid"]
            else:
                self.pids.pop(message["id"], None)
                usage = message.get("usage")
                ended.append((message["id"], message["status"], tuple(usage) if usage else None))

    def close(self) -> None:
        self.sock.close()


# -- the server -------------------------------------------------------------------


@dataclass
class _Step:
    argv: list[str]
    env: dict[str, str]
    cwd: str
    log_fd: int


def _preload() -> None:
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    # What is loaded now lives as long as a step: its collector then never
    # walks (and so never copies) those pages, and the exit does not either.
    gc.freeze()


def _serve(control: socket.socket) -> _Step | None:
    """Serve until the control socket closes (None); in a forked child, the
    step it is to run. No ``finally`` or ``with`` here: the child returns
    through this frame."""
    sel = selectors.DefaultSelector()
    sel.register(control, selectors.EVENT_READ, None)
    channels: list[socket.socket] = []
    # pidfd -> (channel, id, pid) of each child not yet reaped
    children: dict[int, tuple[socket.socket, int, int]] = {}
    alive: dict[tuple[socket.socket, int], int] = {}  # (channel, id) -> pid, until reaped
    control_open = True
    while True:
        for key, _ in sel.select():
            if key.data is None:  # control: a new channel, or the end
                try:
                    _, fds, _, _ = socket.recv_fds(control, 64, 1)
                except OSError:  # reset: that process ended with our "ready" unread
                    fds = []
                if not fds:
                    # Let go, or the process that started us is gone: serve the
                    # channels there are, and end with the last.
                    if not channels:
                        return None
                    sel.unregister(control)
                    control_open = False
                    continue
                channel = socket.socket(fileno=fds[0])
                channels.append(channel)
                sel.register(channel, selectors.EVENT_READ, "channel")
            elif key.data == "channel":
                channel = key.fileobj  # type: ignore[assignment]
                try:
                    data, fds, _, _ = socket.recv_fds(channel, _RECV, 1)
                except OSError:
                    data, fds = b"", []
                if not data:
                    # That executor closed (having killed its steps), or its process
                    # is gone however it died: what it had us fork ends with it, as
                    # its subprocess steps do (its lifeline).
                    for (owner, _), left in alive.items():
                        if owner is channel:  # not reaped: the group is still its own
                            with contextlib.suppress(ProcessLookupError):
                                os.killpg(left, signal.SIGKILL)
                    sel.unregister(channel)
                    channels.remove(channel)
                    channel.close()
                    for fd in fds:
                        os.close(fd)
                    if not control_open and not channels:
                        return None
                    continue
                message = json.loads(data)
                if message["op"] == "kill":
                    pid = alive.get((channel, message["id"]))
                    if pid is not None:  # not reaped: the pid is still its own
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(pid, signal.SIGKILL)
                    continue
                (log_fd,) = fds
                step = _Step(message["argv"], message["env"], message["cwd"], log_fd)
                die_with_server = on_parent_death(signal.SIGKILL)  # made here, not in the child
                try:
                    pid = os.fork()
                except OSError as e:  # out of processes or memory: a failed attempt
                    with contextlib.suppress(OSError):
                        os.write(log_fd, f"wh: the step could not be forked: {e}\n".encode())
                    os.close(log_fd)
                    _send(channel, {"op": "exited", "id": message["id"], "status": 1})
                    continue
                if pid == 0:
                    # Killed by the kernel if this server dies (it has one
                    # thread, so its death is this thread's).
                    die_with_server()
                    sel.close()
                    for fd in children:
                        os.close(fd)
                    for sock in (control, *channels):
                        sock.close()
                    return step
                os.close(log_fd)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (channel, message["id"], pid)
                alive[(channel, message["id"])] = pid
                sel.register(pidfd, selectors.EVENT_READ, "child")
                _send(channel, {"op": "started", "id": message["id"], "pid": pid})
            else:  # a child ended
                pidfd = key.fd
                sel.unregister(pidfd)
                os.close(pidfd)
                channel, ident, pid = children.pop(pidfd)
                # What it left running in its group is killed with it (before
                # the reaping, while the group id is surely its own): it would
                # write into the next step's log and scratch directory.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)
                status, usage = wait_measured(pid)
                code = os.waitstatus_to_exitcode(status)
                if alive.pop((channel, ident), None) is not None:
                    _send(channel, {"op": "exited", "id": ident, "status": code, "usage": usage})


def _send(channel: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # its executor is gone
        channel.send(json.dumps(message).encode())


def _become(step: _Step) -> str:
    """Make this forked child what ``python -P FILE`` would be; the file."""
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(step.log_fd, 1)
    os.dup2(step.log_fd, 2)
    os.close(step.log_fd)
    os.environ.clear()
    os.environ.update(step.env)
    os.chdir(step.cwd)
    import tempfile
    import time

    tempfile.tempdir = None  # computed again from this TMPDIR
    time.tzset()
    atexit._clear()  # the server's exit handlers are not the step's
    entry = step.argv[2]
    sys.argv = [entry]
    sys.orig_argv = list(step.argv)
    return entry


def _run(entry: str) -> int:
    """Run ``entry`` as ``__main__``; the status of an uncaught exception (a
    ``SystemExit`` goes up to the interpreter, which exits as it says)."""
    main = types.ModuleType("__main__")
    main.__file__ = entry
    main.__cached__ = None  # type: ignore[attr-defined]
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", entry)
    sys.modules["__main__"] = main
    try:
        with open(entry, "rb") as f:
            source = f.read()
    except OSError as e:  # as the interpreter says it
        why = f"[Errno {e.errno}] {e.strerror}"
        print(f"{sys.orig_argv[0]}: can't open file {entry!r}: {why}", file=sys.stderr)
        return 2
    try:
        code = compile(source, entry, "exec", dont_inherit=True)
        exec(code, main.__dict__)
    except SystemExit:
        raise
    except BaseException as e:  # as the interpreter reports it: from the file's frames
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != entry:
            tb = tb.tb_next
        e.with_traceback(tb)  # none for a syntax error: the hook prints where it is
        sys.excepthook(type(e), e, e.__traceback__)
        if isinstance(e, KeyboardInterrupt):
            # As the interpreter ends on one: threads joined, exit handlers
            # run, output flushed, then killed by SIGINT.
            threading._shutdown()  # type: ignore[attr-defined]
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        return 1
    return 0


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    _preload()
    with contextlib.suppress(OSError):
        control.send(b"ready")
    step = _serve(control)
    if step is None:
        return
    # The child: from here on the step's process, ending as the interpreter does
    # (threads joined, exit handlers run, files flushed).
    sys.exit(_run(_become(step)))
