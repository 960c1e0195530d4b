"""Control groups: what this host offers for step limits, and one step's group.

Three ways, the first the host offers (``detect``):

- ``cgroup2``: the unified hierarchy with the ``memory`` and ``pids``
  controllers (``cpu`` too, when there); the manager's own group must be
  one it may write (root, or delegated to it). Its controllers can be
  given to children only by a group with no process of its own, so the
  manager's process moves into a leaf of its group (``wh-manager-PID``)
  first, as a delegated service does;
- ``cgroup1``: the legacy hierarchies, one per controller (``memory``,
  ``pids``, ``cpu`` when mounted), as on hosts that mount both kinds with
  the controllers on the legacy side;
- ``rlimit``: no writable control group: resource limits only (see
  ``warehouse.limits.guard``).

A step's group is made under the manager's own (``wh-steps-PID/sN``), so
any limit the manager itself runs under holds for its steps too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from warehouse.limits.policy import StepLimits

__all__ = ["Host", "StepGroup", "detect", "release", "sweep", "usable"]

_NEEDED = ("memory", "pids")
_PERIOD = 100_000  # µs: the cpu controller's accounting period
_SWEEP_PATIENCE = 30.0  # s a dead manager's step group is waited for


@dataclass(frozen=True)
class Host:
    kind: str  # "cgroup2", "cgroup1" or "rlimit"
    # cgroup2: {"": directory}; cgroup1: controller -> this process's directory
    dirs: dict[str, str] = field(default_factory=dict)


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, type, super options) of each control group mount."""
    found = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rest = left.split(), right.split()
            if len(fields) > 4 and len(rest) > 2 and rest[0] in ("cgroup", "cgroup2"):
                found.append((fields[4], rest[0], set(rest[2].split(","))))
    return found


def _own() -> dict[str, str]:
    """This process's group in each hierarchy: controller (or "" for cgroup2) -> path."""
    own: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                own[name] = path
    return own


def _writable(path: str) -> bool:
    return os.path.isdir(path) and os.access(path, os.W_OK)


def detect(*, unified: bool = True) -> Host:
    """What this host offers, the best first (``unified``: cgroup v2 too)."""
    mounts, own = _mounts(), _own()
    for point, kind, _ in mounts:
        if unified and kind == "cgroup2" and "" in own:
            mine = os.path.normpath(point + own[""])
            try:
                controllers = Path(mine, "cgroup.controllers").read_text().split()
            except OSError:
                continue
            if all(c in controllers for c in _NEEDED) and _writable(mine):
                return Host("cgroup2", {"": mine})
    dirs: dict[str, str] = {}
    for point, kind, options in mounts:
        if kind != "cgroup":
            continue
        for name in ("memory", "pids", "cpu"):
            if name in options and name in own and _writable(point + own[name]):
                dirs[name] = os.path.normpath(point + own[name])
    if all(c in dirs for c in _NEEDED):
        return Host("cgroup1", dirs)
    return Host("rlimit")


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _enable_v2(mine: str) -> str:
    """The directory step groups go in, with the controllers given to them."""
    steps = f"{mine}/wh-steps-{os.getpid()}"
    wanted = [
        c
        for c in ("memory", "pids", "cpu")
        if c in Path(mine, "cgroup.controllers").read_text().split()
    ]
    enable = " ".join("+" + c for c in wanted)
    try:
        _write(f"{mine}/cgroup.subtree_control", enable)
    except OSError:
        # A group with processes of its own gives no controller to children:
        # this process moves into a leaf of its group first.
        leaf = f"{mine}/wh-manager-{os.getpid()}"
        os.makedirs(leaf, exist_ok=True)
        _write(f"{leaf}/cgroup.procs", "0")
        _write(f"{mine}/cgroup.subtree_control", enable)
    os.makedirs(steps, exist_ok=True)
    _write(f"{steps}/cgroup.subtree_control", enable)
    return steps


def usable(host: Host) -> Host:
    """``host``, ready for step groups; for cgroup v2 its controllers handed
    down (which a group with processes not ours refuses: then the legacy
    hierarchies, or resource limits)."""
    if host.kind != "cgroup2":
        return host
    mine = host.dirs[""]
    try:
        _parents[mine] = _enable_v2(mine)
    except OSError:
        return detect(unified=False)
    return host


class StepGroup:
    """One step's control group(s), limits set, joined by the step as it starts."""

    _count = 0

    def __init__(self, host: Host, limits: StepLimits) -> None:
        StepGroup._count += 1
        self.kind = host.kind
        self.dirs: dict[str, str] = {}
        self.fds: list[int] = []
        try:
            self._make(host, limits, f"s{StepGroup._count}")
        except OSError:
            self.remove()  # what was made of it
            raise

    def _make(self, host: Host, limits: StepLimits, name: str) -> None:
        if host.kind == "cgroup2":
            parent = _parents.get(host.dirs[""]) or _enable_v2(host.dirs[""])
            _parents[host.dirs[""]] = parent
            path = f"{parent}/{name}"
            os.makedirs(path)
            self.dirs[""] = path
            _write(f"{path}/memory.max", str(limits.memory))
            with contextlib.suppress(OSError):  # no swap accounting: nothing to cap
                _write(f"{path}/memory.swap.max", "0")
            _write(f"{path}/pids.max", str(limits.processes))
            with contextlib.suppress(OSError):  # no cpu controller here
                _write(f"{path}/cpu.max", f"{limits.cpus * _PERIOD} {_PERIOD}")
        else:
            for controller, mine in host.dirs.items():
                path = f"{mine}/wh-steps-{os.getpid()}/{name}"
                os.makedirs(path)
                self.dirs[controller] = path
            _write(f"{self.dirs['memory']}/memory.limit_in_bytes", str(limits.memory))
            with contextlib.suppress(OSError):  # no swap accounting: nothing to cap
                _write(f"{self.dirs['memory']}/memory.memsw.limit_in_bytes", str(limits.memory))
            _write(f"{self.dirs['pids']}/pids.max", str(limits.processes))
            if "cpu" in self.dirs:
                _write(f"{self.dirs['cpu']}/cpu.cfs_period_us", str(_PERIOD))
                _write(f"{self.dirs['cpu']}/cpu.cfs_quota_us", str(limits.cpus * _PERIOD))
        for d in self.dirs.values():
            self.fds.append(os.open(f"{d}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC))

    @classmethod
    def left(cls, kind: str, path: str) -> StepGroup:
        """A step group a dead manager left, to be killed and removed."""
        group = cls.__new__(cls)
        group.kind, group.dirs, group.fds = kind, {"" if kind == "cgroup2" else "any": path}, []
        return group

    def join(self) -> None:
        """In the child, between fork and exec: into the group ("0": the writer)."""
        for fd in self.fds:
            os.write(fd, b"0")

    def procs_files(self) -> list[str]:
        """What ``join`` writes to, by path: for a process that joins by
        itself (a shell, writing "0")."""
        return [f"{d}/cgroup.procs" for d in self.dirs.values()]

    def started(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def _counter(self, filename: str, key: str) -> int:
        directory = self.dirs.get("") or self.dirs.get(filename.split(".")[0], "")
        try:
            text = Path(directory, filename).read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            words = line.split()
            if len(words) == 2 and words[0] == key:
                return int(words[1])
        return 0

    def oom_kills(self) -> int:
        if self.kind == "cgroup2":
            return self._counter("memory.events", "oom_kill")
        return self._counter("memory.oom_control", "oom_kill")

    def process_limit_hits(self) -> int:
        return self._counter("pids.events", "max")

    def pids(self) -> list[int]:
        directory = next(iter(self.dirs.values()))  # each holds the same processes
        try:
            return [int(p) for p in Path(directory, "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill(self) -> None:
        """Every process in it, however it left the step's process group."""
        kill_file = Path(self.dirs.get("", "/nonexistent"), "cgroup.kill")
        if kill_file.exists():
            with contextlib.suppress(OSError):
                _write(str(kill_file), "1")
                return
        for _ in range(100):  # a process forking meanwhile is caught next round
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self, patience: float = 1.0) -> None:
        """Kill what is in it and remove it, waiting up to ``patience``
        seconds for the killed processes to leave (as they are reaped)."""
        self.started()
        self.kill()
        deadline = time.monotonic() + patience
        for path in self.dirs.values():
            while True:
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.02)


_parents: dict[str, str] = {}  # cgroup2: the manager's group -> its steps' parent


def release(host: Host) -> None:
    """Remove this process's parent of step groups, once its steps are gone."""
    for top in host.dirs.values():
        with contextlib.suppress(OSError):
            os.rmdir(f"{top}/wh-steps-{os.getpid()}")
            _parents.pop(top, None)


def sweep(host: Host) -> int:
    """Kill what is left in the step groups of managers that are gone (a
    manager killed with its steps running), and remove those groups; the
    number of processes killed. A ``wh-steps-PID`` whose PID runs no more
    is a dead manager's."""
    killed = 0
    for top in host.dirs.values():
        with contextlib.suppress(OSError):
            for entry in os.scandir(top):
                pid = entry.name.removeprefix("wh-steps-").removeprefix("wh-manager-")
                if entry.name == pid or not pid.isdigit() or os.path.exists(f"/proc/{pid}"):
                    continue
                if entry.name.startswith("wh-manager-"):  # cgroup v2: its leaf, empty now
                    with contextlib.suppress(OSError):
                        os.rmdir(entry.path)
                    continue
                for step in os.scandir(entry.path):
                    if step.is_dir():
                        group = StepGroup.left(host.kind, step.path)
                        killed += len(group.pids())
                        # A sandbox's processes may take seconds to end on a
                        # busy machine (its namespaces torn down with the
                        # last): this sweep is the only one to remove it.
                        group.remove(patience=_SWEEP_PATIENCE)
                with contextlib.suppress(OSError):
                    os.rmdir(entry.path)
    return killed
