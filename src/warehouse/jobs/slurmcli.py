"""Slurm's own commands as the Slurm executor uses them (``slurmexec``):
run one, and read its nodes, its queue and what it remembers of ended jobs.

Every command is run with a timeout and fails as a ``UsageError`` naming
it: a Slurm that does not answer is reported, never waited for.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import subprocess
from collections.abc import Container

from warehouse.errors import UsageError
from warehouse.jobs.executors import read_log

__all__ = [
    "ENDED",
    "EndedStates",
    "idle_cpus",
    "jobcomp_path",
    "our_jobs",
    "owner_tag",
    "read_nodes",
    "read_step_log",
    "run_slurm",
]

_COMMAND_TIMEOUT = 60.0
# Slurm states after which a job runs nothing any more.
ENDED = {
    "BOOT_FAIL",
    "CANCELLED",
    "COMPLETED",
    "DEADLINE",
    "FAILED",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "REVOKED",
    "SPECIAL_EXIT",
    "TIMEOUT",
}


def owner_tag(place: str, partition: str | None = None) -> str:
    """The ``--comment`` marking the Slurm jobs of an installation's manager
    (from its work directory) for one partition: managers of ``slurm`` and
    ``slurm:PARTITION`` run side by side, and neither may take the other's
    jobs for orphans."""
    key = place if not partition else f"{place}\0{partition}"
    return "wh:" + hashlib.sha256(key.encode()).hexdigest()[:16]


def run_slurm(argv: list[str], stdin: str | None = None) -> str:
    try:
        proc = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=_COMMAND_TIMEOUT,
            check=False,
        )
    except FileNotFoundError:
        raise UsageError(f"{argv[0]} is not installed here: the Slurm executor needs it") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"{argv[0]} did not answer in {_COMMAND_TIMEOUT:.0f}s") from None
    if proc.returncode != 0:
        message = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise UsageError(f"{argv[0]} failed: {message[-1] if message else proc.returncode}")
    return proc.stdout


def read_nodes(partition_args: list[str]) -> tuple[list[tuple[int, int]], str]:
    """(CPUs, memory in bytes) of each node that takes jobs, and which nodes
    were left out, in what state (for a message when none is left)."""
    out = run_slurm(["sinfo", "-h", "-N", "-o", "%N|%c|%m|%t", *partition_args])
    nodes: dict[str, tuple[int, int]] = {}
    unusable: dict[str, str] = {}
    for line in out.splitlines():
        name, cpus, mem, state = ([*line.split("|"), "", "", "", ""])[:4]
        if state.startswith(("down", "drain", "fail")) or not cpus.isdigit():
            unusable[name] = state
            continue
        memory = int(mem) * 2**20 if mem.isdigit() else 2**62
        nodes[name] = (int(cpus), memory)
    left_out = ", ".join(f"{n}: {st}" for n, st in sorted(unusable.items())[:5])
    return list(nodes.values()), left_out


def idle_cpus(partition_args: list[str]) -> dict[str, int]:
    """Idle CPUs of each node that takes jobs, now (one ``sinfo``)."""
    out = run_slurm(["sinfo", "-h", "-N", "-o", "%N|%t|%C", *partition_args])
    idle: dict[str, int] = {}
    for line in out.splitlines():
        name, state, cpus = ([*line.split("|"), "", ""])[:3]
        counts = cpus.split("/")  # allocated/idle/other/total
        # Exactly idle or mixed: a suffix (not responding, powering, draining...)
        # makes the node one not to wait for.
        if state in ("idle", "mix") and len(counts) == 4:
            idle[name] = int(counts[1]) if counts[1].isdigit() else 0
    return idle


def jobcomp_path() -> str | None:
    """The job-completion log's file, where Slurm keeps one as text."""
    with contextlib.suppress(UsageError):
        out = run_slurm(["scontrol", "show", "config"])
        kind = re.search(r"^JobCompType\s*=\s*(\S+)", out, re.M)
        where = re.search(r"^JobCompLoc\s*=\s*(\S+)", out, re.M)
        if kind and where and kind.group(1) == "jobcomp/filetxt":
            return where.group(1)
    return None


def our_jobs(comment: str) -> list[str]:
    """The ids of this user's Slurm jobs that carry ``comment`` (ours)."""
    out = run_slurm(["squeue", "-h", "--me", "-o", "%i|%j|%k"])
    return [
        jid
        for jid, name, comment_seen in (
            ([*line.split("|", 2), "", ""])[:3] for line in out.splitlines()
        )
        if name.startswith("wh-") and comment_seen == comment
    ]


class EndedStates:
    """The states of jobs squeue no longer lists: the job-completion log
    (read from where it ended when we started, a piece more at each look),
    else ``sacct``."""

    def __init__(self) -> None:
        self.jobcomp = jobcomp_path()
        self._offset = _size(self.jobcomp)  # our jobs come later
        self._states: dict[str, str] = {}

    def states(self, jids: list[str], ours: Container[str]) -> dict[str, str]:
        """The states of ``jids``; ``ours``: the jobs worth noting as the
        log is read (the log's lines are read once)."""
        wanted = set(jids)
        found: dict[str, str] = {}
        if self.jobcomp is not None:
            try:
                with open(self.jobcomp, "rb") as f:
                    f.seek(self._offset)
                    data = f.read()
            except OSError:
                data = b""
            end = data.rfind(b"\n") + 1
            self._offset += end
            for line in data[:end].decode("utf-8", "replace").splitlines():
                job_m = re.search(r"\bJobId=(\d+)", line)
                state_m = re.search(r"\bJobState=(\S+)", line)
                if job_m and state_m and job_m.group(1) in ours:
                    self._states[job_m.group(1)] = state_m.group(1)
            found = {j: self._states.pop(j) for j in wanted if j in self._states}
            return found
        with contextlib.suppress(UsageError):
            out = run_slurm(["sacct", "-n", "-X", "-P", "-o", "JobID,State", "-j", ",".join(jids)])
            for line in out.splitlines():
                number, _, state = line.partition("|")
                if number in wanted:
                    found[number] = state
        return found


def read_step_log(path: str) -> bytes:
    # Never through a link: a step could point its log at a file of ours.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return read_log(fd)
    finally:
        os.close(fd)


def _size(path: str | None) -> int:
    try:
        return os.stat(path).st_size if path else 0
    except OSError:
        return 0
