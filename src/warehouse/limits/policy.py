"""What a step may use, and why it was stopped: pure decisions, no I/O.

A step asks for cpus and memory (``--cpus``, ``--memory``; a workflow's
``resources``); the installation sets the rest (``Policy``). ``decide``
turns both into a step's ``StepLimits``; ``verdict`` turns what was seen
of a step into the reason it was stopped, worded for `wh job show`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "GIB",
    "MIB",
    "Policy",
    "Seen",
    "StepLimits",
    "decide",
    "size_text",
    "slurm_reason",
    "verdict",
]

MIB = 1024 * 1024
GIB = 1024 * MIB

# A step asking for no memory gets a share of the machine by its cpus; and at
# least this much, so that an interpreter starts at all.
_FLOOR = 32 * MIB


@dataclass(frozen=True, slots=True)
class Policy:
    """The installation's limits on every step (docs/jobs.md, "Limits").

    ``wall``: seconds; 7 days by default, as long as a job's token lives."""

    processes: int = 1024
    scratch: int = 32 * GIB
    wall: float = 7 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class StepLimits:
    cpus: int
    memory: int  # bytes
    asked_memory: bool  # False: the share given to a step that asked none
    processes: int
    scratch: int  # bytes
    wall: float  # seconds


def decide(
    cpus: int, memory: int, machine_cpus: int, machine_memory: int, policy: Policy
) -> StepLimits:
    """A step's limits: what it asked for, never more than the machine has;
    a step that asked no memory gets the machine's memory shared by cpus."""
    cpus = max(1, min(cpus, machine_cpus))
    asked = memory > 0
    if not asked:
        memory = machine_memory * cpus // max(machine_cpus, 1)
    memory = max(_FLOOR, min(memory, machine_memory))
    return StepLimits(cpus, memory, asked, policy.processes, policy.scratch, policy.wall)


def size_text(n: int) -> str:
    """Bytes as a person reads them: ``100 MB`` for what ``--memory 100M`` asked."""
    for unit, size in (("TB", 1 << 40), ("GB", GIB), ("MB", MIB), ("KB", 1024)):
        if n >= size:
            value = n / size
            return (
                f"{value:.0f} {unit}"
                if value == int(value) or value >= 10
                else f"{value:.1f} {unit}"
            )
    return f"{n} bytes"


@dataclass(frozen=True, slots=True)
class Seen:
    """What the executor saw of a step, from the kernel or its own watch."""

    oom_kills: int = 0  # processes the kernel killed at the memory limit
    out_of_memory: bool = False  # no cgroup: the step's log says an allocation failed
    process_limit_hits: int = 0  # forks refused at the process limit
    processes: int = 0  # processes counted (no cgroup: its descendants)
    scratch: int = 0  # bytes its scratch directory holds
    elapsed: float = 0.0  # seconds since it started


def verdict(seen: Seen, limits: StepLimits) -> str | None:
    """Why the step is (or was) stopped, or None: it keeps within its limits.

    Memory first: a step out of memory may hit others on its way down."""
    if seen.oom_kills or seen.out_of_memory:
        asked = "asked" if limits.asked_memory else "its share (it asked none)"
        return f"memory limit: {asked} {size_text(limits.memory)}"
    if seen.process_limit_hits or seen.processes >= limits.processes:
        return f"process limit: {limits.processes} processes"
    if seen.scratch > limits.scratch:
        return f"scratch limit: {size_text(limits.scratch)} (it wrote {size_text(seen.scratch)})"
    if seen.elapsed > limits.wall:
        return f"wall-time limit: {limits.wall:g} s"
    return None


def slurm_reason(state: str, memory: int, wall: float) -> str | None:
    """The limit a Slurm job's end state names (Slurm enforced it), or None."""
    if state.startswith("OUT_OF_MEMORY"):
        return f"memory limit: asked {size_text(memory)}" if memory else "memory limit"
    if state.startswith("TIMEOUT"):
        return f"wall-time limit: {wall:g} s" if wall else "wall-time limit"
    return None
