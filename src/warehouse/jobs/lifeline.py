"""How no step of the local executor outlives the process running its manager.

Two lines (docs/jobs.md, "Steps die with their manager"):

- the kernel: each step's process is started with ``PR_SET_PDEATHSIG``
  (``on_parent_death``), so the instant the thread that started it ends it
  is stopped (a subprocess step: then killed whole by the lifeline) or
  killed (a step forked by the fork server), with no process of ours having
  to run first, however busy the machine; a bubblewrap sandbox does the same
  (``--die-with-parent``), its PID namespace taking every process of the
  step with it;
- the *lifeline*: one small process per executor that kills the process
  group of every step still running once the manager's process is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

__all__ = ["Lifeline", "on_parent_death"]

_PR_SET_PDEATHSIG = 1
_prctl: list[Callable[..., int]] = []  # libc's prctl, found once, in the parent


def on_parent_death(sig: signal.Signals) -> Callable[[], None]:
    """A hook for a child between fork and exec: be sent ``sig`` when the
    thread that forked it ends, or take it now if this process is gone.

    The kernel ties this to the parent *thread*: a step must be started by
    the thread that lives as long as its executor (the manager's loop), as
    every executor here does. libc is looked up here, in the parent: the
    hook runs in a child forked from a process with other threads, so it
    takes no lock, imports nothing and allocates next to nothing."""
    if not _prctl and sys.platform.startswith("linux"):
        import ctypes  # here: most commands start no step

        _prctl.append(ctypes.CDLL(None, use_errno=True).prctl)
    prctl = _prctl[0] if _prctl else None
    parent, number = os.getpid(), int(sig)

    def hook() -> None:
        if prctl is None or prctl(_PR_SET_PDEATHSIG, number, 0, 0, 0) != 0:
            return  # then the lifeline alone ends it
        if os.getppid() != parent:  # it died before the request took
            os.kill(os.getpid(), number)

    return hook


# The lifeline: a small process, one per local executor, told the pid of each
# step started as a subprocess ("+PID") and of each about to be reaped
# ("-PID"). When its input ends (the executor closed, or its process died,
# however: a kill -9 too) it kills the process group of every step still told
# of, so no step outlives its manager. It reads a batch at most every 0.2 s,
# so a step costs the manager two small writes and the lifeline no wakeup of
# its own; while it holds steps it also looks every 0.2 s whether the
# manager lives (a poll of the pipe: no wakeup of the manager's).
#
# A group id is a pid: it may be given to a new process (and so name a
# stranger's group) only once no process has it as its pid, group or session.
# Until the manager dies, each step it has not let go of is its unreaped
# child, whose pid names the step's group; so is it at each moment the
# manager is known alive: when it wrote a line (it writes its clock with each
# "+"), or when the lifeline saw the pipe's writer still open. After that,
# another reaper (an init, a subreaper) may reap a step at once, so at the
# end a group is killed only through a process pinned by a pidfd that is
# surely in it: the leader, by a pidfd taken while the manager was seen
# alive; else a process of the step's group and session (found in /proc)
# that started in a clock tick before a moment the manager was known alive
# (a new session's members all start after its leader, which starts after
# the old session is empty, after the manager died), or whose pid is the
# leader's and which started no later than the tick its "+" line was written
# (a stranger can have that pid only after the manager died, so only if that
# died in the same tick and a whole pid cycle passed: the one case left open).
# The pinned process is stopped through its pidfd (the send fails if it was
# reaped): stopped and unreaped, it ends only by another's SIGKILL, and until
# it is reaped the id cannot be reused, so killpg reaches the step's group and
# no other. An empty group, or one no such process proves ours, is left
# alone: nothing of ours is in it, or nothing safely known to be. So what is
# not killed is the group of a step reaped by another whose every process
# left started after the lifeline last saw the manager alive (within about
# 0.2 s of its death, unless the lifeline was starved of CPU).
#
# The kernel stops each step the instant its manager's thread ends
# (PR_SET_PDEATHSIG with SIGSTOP): it works no more, however busy the
# machine, and, stopped and unreaped, it keeps its group's id its own until
# the lifeline kills the group. (Killed there, it would be reaped at once by
# another, and what it left could be proved ours only by its start time.)
# The lifeline runs at its manager's priority: at the lowest (nice 19) a
# busy machine starved it for minutes, exactly when a killed manager's steps
# matter. Its start (about 11 ms of CPU) is not waited for: the pids wait in
# the pipe (made 1 MiB where the system allows, room for tens of thousands
# of steps), and a pipe whose writer died still gives them, then its end.
# A step's own process also tells its pid ("+PID CLOCK ?"), between fork and
# exec (``Lifeline.teller``): on a busy machine the manager's thread may not
# run again between a step's start and its own "+" before it is killed,
# while the step runs, and stopped by the kernel, unknown to the lifeline, it
# would stay so. Such a line is unsure until the manager's "+" confirms it;
# a start that failed after the fork is reported by "?", which voids them.
_LIFELINE = """
import os, select, signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
hup = select.poll()
hup.register(0, 0)  # a hang-up is always reported: the writer has closed
tick = os.sysconf("SC_CLK_TCK")
held, told, unsure, rest, alive_at = {}, {}, set(), b"", 0.0
while True:
    data = b""
    if select.select([0], [], [], 0.2 if held else None)[0]:
        data = os.read(0, 1 << 20)
        if not data:
            break
    *lines, rest = (rest + data).split(b"\\n")
    for line in lines:
        if line == b"?":  # a start failed: what its child told is void
            for pid in unsure:
                told.pop(pid, None)
                fd = held.pop(pid, None)
                if fd is not None:
                    os.close(fd)
            unsure.clear()
            continue
        words = line[1:].split()
        pid = int(words[0])
        if line[:1] == b"+":
            (unsure.add if len(words) > 2 else unsure.discard)(pid)
            held.setdefault(pid, None)
            told[pid] = max(told.get(pid, 0.0), float(words[1]))
            alive_at = max(alive_at, told[pid])
        else:
            unsure.discard(pid)
            told.pop(pid, None)
            fd = held.pop(pid, None)
            if fd is not None:
                os.close(fd)
    now = time.clock_gettime(time.CLOCK_BOOTTIME)
    fresh = []
    for pid, fd in held.items():
        if fd is None:
            try:  # else reaped: its "-" is on its way, or its group is found at the end
                held[pid] = os.pidfd_open(pid)
                fresh.append(pid)
            except OSError:
                pass
    if not hup.poll(0):
        alive_at = max(alive_at, now)
    else:  # perhaps taken after the manager died: not trusted
        for pid in fresh:
            os.close(held[pid])
            held[pid] = None
    if data:
        time.sleep(0.2)


def ours(pid, group, session, start):
    if session != group or group not in told:
        return False
    if start < int(alive_at * tick):
        return True
    return pid == group and start <= int(told[group] * tick)


def members(groups):
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = os.pidfd_open(int(name))
        except OSError:
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read()
            fields = stat[stat.rindex(b")") + 2 :].split()
            group, session, start = int(fields[2]), int(fields[3]), int(fields[19])
            signal.pidfd_send_signal(fd, 0)  # the stat read was this process's
        except (OSError, ValueError):
            os.close(fd)
            continue
        if group in groups and ours(int(name), group, session, start):
            found.setdefault(group, []).append(fd)
        else:
            os.close(fd)
    return found


def kill_through(group, pins):
    for pin in pins:
        try:
            signal.pidfd_send_signal(pin, signal.SIGSTOP)
        except OSError:
            continue
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
        return True
    return False


lost = [pid for pid, fd in held.items() if fd is None or not kill_through(pid, [fd])]
for group, pins in (members(set(lost)) if lost else {}).items():
    kill_through(group, pins)
"""


_LIFELINE_PIPE = 1 << 20  # bytes: the most an unprivileged process may ask, by default


class Lifeline:
    """The executor's end of the lifeline (started with its first subprocess step)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._broken = False

    def start(self) -> None:
        """Started before the first step is: a step that runs is always told of
        (but for the instant between its start and the telling)."""
        if self._proc is None and not self._broken:
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", _LIFELINE],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    cwd="/",
                    start_new_session=True,  # not stopped with the terminal's group
                )
            except OSError:  # only a safety net: the steps run without it
                self._broken = True
                return
            assert self._proc.stdin is not None
            with contextlib.suppress(OSError):  # 64 KiB then
                fcntl.fcntl(self._proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, _LIFELINE_PIPE)

    def hold(self, pid: int) -> None:
        # With a moment this process lived, the step still its child (above).
        self._say(b"+%d %.6f\n" % (pid, time.clock_gettime(time.CLOCK_BOOTTIME)))

    def let_go(self, pid: int) -> None:
        self._say(b"-%d\n" % pid)

    def teller(self) -> Callable[[], None] | None:
        """A hook for a step's process between fork and exec: it tells the
        lifeline its own pid, with a moment its manager was seen alive."""
        if self._proc is None or self._proc.stdin is None:
            return None
        fd, parent = self._proc.stdin.fileno(), os.getpid()

        def tell() -> None:
            at = time.clock_gettime(time.CLOCK_BOOTTIME)
            if os.getppid() == parent:  # so the manager lived at ``at``
                with contextlib.suppress(OSError):
                    os.write(fd, b"+%d %.6f ?\n" % (os.getpid(), at))

        return tell

    def teller_args(self) -> tuple[int, int] | None:
        """(this process's pid, its end of the pipe) for a teller that is
        not a Python hook (``warehouse.jobs.prelude``), or None."""
        if self._proc is None or self._proc.stdin is None:
            return None
        return os.getpid(), self._proc.stdin.fileno()

    def not_started(self) -> None:
        """A start failed after its fork: its child's word is void."""
        self._say(b"?\n")

    def _say(self, line: bytes) -> None:
        if self._proc is None or self._proc.stdin is None:
            return
        try:
            os.write(self._proc.stdin.fileno(), line)  # short: one atomic pipe write
        except OSError:  # it is gone: the steps run without it
            self.close()
            self._broken = True

    def close(self) -> None:
        """Called once the executor has killed and reaped its steps: nothing is
        left for the lifeline to do, and it is not waited for (it may sleep)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.kill()
            proc.wait()
