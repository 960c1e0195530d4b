"""What steps used, and its sums (peak memory is a maximum, not a sum)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["COLUMNS", "Usage", "total"]

# The per-step catalog columns, as the steps table names them.
COLUMNS = (
    "cpu_seconds",
    "wall_seconds",
    "peak_memory",
    "read_bytes",
    "written_bytes",
    "input_bytes",
)


@dataclass(frozen=True, slots=True)
class Usage:
    """What one or more measured step attempts used.

    ``cpu_seconds``: user + system time of the step's process and every
    descendant it waited for. ``reserved_seconds``: wall seconds times the
    cpus the job asked for (what a node was held for, priced by ``prices``).
    ``peak_memory``: the largest resident set of any one of those processes
    (bytes). ``read_bytes``/``written_bytes``: bytes through read and write
    calls (files, pipes and sockets alike) of the step and those descendants.
    ``input_bytes``: bytes of warehouse files the step read through its
    readers (as it reported them: the size of what it read of its input).
    """

    steps: int = 0
    attempts: int = 0
    cpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    reserved_seconds: float = 0.0
    peak_memory: int = 0
    read_bytes: int = 0
    written_bytes: int = 0
    input_bytes: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.steps + other.steps,
            self.attempts + other.attempts,
            self.cpu_seconds + other.cpu_seconds,
            self.wall_seconds + other.wall_seconds,
            self.reserved_seconds + other.reserved_seconds,
            max(self.peak_memory, other.peak_memory),
            self.read_bytes + other.read_bytes,
            self.written_bytes + other.written_bytes,
            self.input_bytes + other.input_bytes,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> Usage:
        """From ``as_dict`` output; keys it does not know are left out (a newer
        controller may send more)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})

    @classmethod
    def of_step(cls, row: Mapping[str, Any], cpus: int) -> Usage:
        """A step row's usage (its attempts summed, as the manager records
        them); a step never measured (finished before usage was recorded,
        or never run) counts as nothing."""
        if row.get("wall_seconds") is None:
            return cls()
        wall = float(row["wall_seconds"])
        return cls(
            steps=1,
            attempts=int(row.get("attempts") or 0),
            cpu_seconds=float(row.get("cpu_seconds") or 0.0),
            wall_seconds=wall,
            reserved_seconds=wall * cpus,
            peak_memory=int(row.get("peak_memory") or 0),
            read_bytes=int(row.get("read_bytes") or 0),
            written_bytes=int(row.get("written_bytes") or 0),
            input_bytes=int(row.get("input_bytes") or 0),
        )


def total(usages: Iterable[Usage]) -> Usage:
    out = Usage()
    for u in usages:
        out = out + u
    return out
