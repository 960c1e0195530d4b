"""What steps used, and its sums (peak memory is a maximum, not a sum)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["BLOCK_COLUMNS", "BLOCK_SOURCES", "COLUMNS", "Usage", "block_columns", "total"]

# Where a step's blocks came from, as ``warehouse.blocks.sources`` names them
# (a test keeps the two equal: this layer is below that one).
BLOCK_SOURCES = ("cache", "local", "s3", "keep", "cluster")
# Blocks read per source, then their bytes: blocks_cache … block_bytes_cluster.
BLOCK_COLUMNS = tuple(f"blocks_{s}" for s in BLOCK_SOURCES) + tuple(
    f"block_bytes_{s}" for s in BLOCK_SOURCES
)

# The per-step catalog columns, as the steps table names them.
COLUMNS = (
    "cpu_seconds",
    "wall_seconds",
    "peak_memory",
    "read_bytes",
    "written_bytes",
    "input_bytes",
    *BLOCK_COLUMNS,
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
    ``blocks_SOURCE``/``block_bytes_SOURCE``: the blocks (and their bytes)
    the step's process was given from each source of ``BLOCK_SOURCES`` (a
    cache, a local volume, an S3 volume, a keep server, another cluster),
    as it reported them.
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
    blocks_cache: int = 0
    blocks_local: int = 0
    blocks_s3: int = 0
    blocks_keep: int = 0
    blocks_cluster: int = 0
    block_bytes_cache: int = 0
    block_bytes_local: int = 0
    block_bytes_s3: int = 0
    block_bytes_keep: int = 0
    block_bytes_cluster: int = 0

    def __add__(self, other: Usage) -> Usage:
        # Every figure adds up but the peak, which is the larger.
        summed = {f: getattr(self, f) + getattr(other, f) for f in _SUMMED}
        return Usage(**summed, peak_memory=max(self.peak_memory, other.peak_memory))

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
            **{c: int(row.get(c) or 0) for c in BLOCK_COLUMNS},
        )


def block_columns(
    blocks: Mapping[str, int] | None, sizes: Mapping[str, int] | None
) -> dict[str, int | None]:
    """A step's block columns from its report's ``blocks`` and ``block_bytes``
    (a source it did not name: 0); all None when it reported none."""
    out: dict[str, int | None] = {}
    for source in BLOCK_SOURCES:
        out[f"blocks_{source}"] = None if blocks is None else blocks.get(source, 0)
    for source in BLOCK_SOURCES:
        out[f"block_bytes_{source}"] = None if blocks is None else (sizes or {}).get(source, 0)
    return out


_SUMMED = tuple(f.name for f in fields(Usage) if f.name != "peak_memory")


def total(usages: Iterable[Usage]) -> Usage:
    out = Usage()
    for u in usages:
        out = out + u
    return out
