"""Holding a step to its limits: set as it starts, watched while it runs.

The executor makes one ``Limiter`` and, for each step, a ``Guard``: its
``hook`` runs in the step's process between fork and exec (joins the
step's control group, or sets resource limits), ``check`` is called every
second or so while it runs (a reason: stop it), and ``finish`` once it has
ended (a reason: it failed by a limit). What the kernel enforces (memory,
processes, cpus in a control group) is read from the group; the scratch
directory and the wall time are watched here.

Without a control group (``rlimit``): memory is the step's data segment
(``RLIMIT_DATA``, per process: an allocation past it fails, which the
step's log then says); the process count is watched by counting the step's
descendants, and, when steps run as a user of their own, also capped by
``RLIMIT_NPROC`` at the limit times the executor's slots (the kernel counts
a user's processes, not a step's); cpus are not held beyond the slots.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Callable

from warehouse.limits.cgroups import Host, StepGroup, detect, release, sweep, usable
from warehouse.limits.policy import Policy, Seen, StepLimits, decide, verdict

__all__ = ["Guard", "Limiter"]

# A step's log saying an allocation or a fork failed (no control group to say so).
_OUT_OF_MEMORY = (b"MemoryError", b"Cannot allocate memory", b"std::bad_alloc", b"out of memory")
_NO_FORK = (b"Cannot fork", b"fork: retry", b"fork: Resource temporarily unavailable")


class Limiter:
    """The limits of one executor's steps on this host."""

    def __init__(
        self,
        machine_cpus: int,
        machine_memory: int,
        policy: Policy | None = None,
        host: Host | None = None,
        *,
        own_user: bool = False,
    ) -> None:
        self.policy = policy or Policy()
        self.host = usable(host or detect())
        self.machine = (machine_cpus, machine_memory)
        self.own_user = own_user  # steps run as a user of their own (RLIMIT_NPROC counts it)
        if self.host.kind != "rlimit":
            sweep(self.host)  # a killed manager's steps, should any be left

    def close(self) -> None:
        """Remove this manager's own parent groups (its steps' are removed as they end)."""
        release(self.host)

    def guard(self, cpus: int, memory: int, scratch: str, started: float) -> Guard:
        limits = decide(cpus, memory, *self.machine, self.policy)
        group = StepGroup(self.host, limits) if self.host.kind != "rlimit" else None
        slots = self.machine[0]
        return Guard(limits, scratch, started, group, self.own_user, slots)


class Guard:
    def __init__(
        self,
        limits: StepLimits,
        scratch: str,
        started: float,
        group: StepGroup | None,
        own_user: bool,
        slots: int,
    ) -> None:
        self.limits = limits
        self.scratch = scratch
        self.started_at = started
        self.group = group
        self.pid = 0
        self.reason: str | None = None  # why it was stopped, once it was
        self._nproc = limits.processes * slots if own_user else 0

    def hook(self) -> Callable[[], None]:
        """For the child between fork and exec: no lock, no import."""
        group, memory, nproc = self.group, self.limits.memory, self._nproc
        setrlimit, data, procs = resource.setrlimit, resource.RLIMIT_DATA, resource.RLIMIT_NPROC

        def hook() -> None:
            if group is not None:
                group.join()
                return
            setrlimit(data, (memory, memory))
            if nproc:
                setrlimit(procs, (nproc, nproc))

        return hook

    def group_files(self) -> list[str] | None:
        """The ``cgroup.procs`` files the step's process joins by writing
        "0" to each (what ``hook`` does), or None where its hook sets
        resource limits instead."""
        return None if self.group is None else self.group.procs_files()

    def running(self, pid: int) -> None:
        self.pid = pid
        if self.group is not None:
            self.group.started()

    def _seen(self, now: float) -> Seen:
        if self.group is not None:
            oom, hits, count = self.group.oom_kills(), self.group.process_limit_hits(), 0
        else:
            oom, hits, count = 0, 0, _descendants(self.pid)
        return Seen(
            oom_kills=oom,
            process_limit_hits=hits,
            processes=count,
            scratch=_usage(self.scratch),
            elapsed=now - self.started_at,
        )

    def check(self, now: float) -> str | None:
        """While it runs: why it must be stopped now, or None."""
        if self.reason is None:
            self.reason = verdict(self._seen(now), self.limits)
        return self.reason

    def finish(self, status: int, log_tail: bytes, now: float) -> str | None:
        """Once it ended: the limit it failed by, or None. A step that ended
        well but hit a limit on its way (a fork refused, a child killed out
        of memory, its scratch overfull) still fails by it: what it made may
        not be all it meant to make."""
        if self.reason is not None:
            return self.reason
        seen = self._seen(now)
        if self.group is None:  # its processes are gone: what its log says
            seen = Seen(
                out_of_memory=status != 0 and any(w in log_tail for w in _OUT_OF_MEMORY),
                process_limit_hits=int(bool(self._nproc) and any(w in log_tail for w in _NO_FORK)),
                scratch=seen.scratch,
                elapsed=seen.elapsed,
            )
        self.reason = verdict(seen, self.limits)
        return self.reason

    def kill(self) -> None:
        if self.group is not None:
            self.group.kill()

    def close(self) -> None:
        if self.group is not None:
            self.group.remove()


def _usage(root: str) -> int:
    """Bytes the files under ``root`` take on disk (links not followed)."""
    total = 0
    stack = [root]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as it:
            for entry in it:
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
    return total


def _descendants(pid: int) -> int:
    """How many processes descend from ``pid`` (itself included)."""
    if not pid:
        return 0
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        parent = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(name))
    count, stack = 0, [pid]
    while stack:
        count += 1
        stack.extend(children.get(stack.pop(), []))
    return count
