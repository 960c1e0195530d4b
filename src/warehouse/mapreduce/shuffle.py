"""Sorting and merging ``key<TAB>value`` lines within a memory budget.

Lines are compared by their key's bytes only, and every sort and merge here
is stable, so the values of one key keep the order they were made in (map
outputs in step order): the same input gives the same bytes on any executor.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

__all__ = [
    "MAX_FAN_IN",
    "MapSorter",
    "group_by_key",
    "key_of",
    "merge_sorted",
    "partition_of",
    "split_lines",
]

MAX_FAN_IN = 64  # sorted runs merged at once; more are merged in passes
_OVERHEAD = 64  # bytes a buffered line costs beyond its own (list slot, object header)


def partition_of(key: bytes, partitions: int) -> int:
    """A stable hash of the key's bytes (the same on every machine and run)."""
    return int(hashlib.md5(key).hexdigest()[:8], 16) % partitions


def key_of(line: bytes) -> bytes:
    return line[: line.index(b"\t")]


def group_by_key(lines: Iterable[bytes]) -> Iterator[tuple[bytes, Iterator[bytes]]]:
    """(key, its lines) for sorted lines, streaming: a key's values are never all held."""
    return itertools.groupby(lines, key=key_of)


def _file_lines(path: Path, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    with open(path, "rb", buffering=1 << 16) as f:
        f.seek(start)
        left = (end if end is not None else os.fstat(f.fileno()).st_size) - start
        while left > 0:
            line = f.readline()
            if not line:
                return
            left -= len(line)
            yield line


def _write_run(lines: Iterable[bytes], out: BinaryIO) -> int:
    n = 0
    for line in lines:
        out.write(line)
        n += len(line)
    return n


class _Runs:
    """Sorted runs on scratch files, merged in passes of at most MAX_FAN_IN."""

    def __init__(self, scratch: Path, prefix: str) -> None:
        self.scratch = scratch
        self.prefix = prefix
        self.count = 0
        self.bytes = 0

    def new_path(self) -> Path:
        self.count += 1
        return self.scratch / f"{self.prefix}-{self.count:06d}"

    def write(self, lines: Iterable[bytes]) -> Path:
        path = self.new_path()
        with open(path, "wb", buffering=1 << 16) as f:
            self.bytes += _write_run(lines, f)
        return path

    def merged(self, paths: list[Path]) -> Iterable[bytes]:
        while len(paths) > MAX_FAN_IN:
            # Merge the oldest runs first into one, keeping run order (stability).
            first, paths = paths[:MAX_FAN_IN], paths[MAX_FAN_IN:]
            merged = self.write(merge_sorted([_file_lines(p) for p in first]))
            for p in first:
                p.unlink()
            paths = [merged, *paths]
        return merge_sorted([_file_lines(p) for p in paths])


def split_lines(data: bytes) -> list[bytes]:
    """``data``'s lines, each with its newline (only ``\\n`` ends a line)."""
    parts = data.split(b"\n")
    last = parts.pop()
    lines = [line + b"\n" for line in parts]
    if last:
        lines.append(last + b"\n")
    return lines


def merge_sorted(runs: Sequence[Iterable[bytes]]) -> Iterable[bytes]:
    """Sorted runs merged by key; on equal keys, earlier runs first (one run: itself)."""
    if len(runs) == 1:
        return runs[0]
    return heapq.merge(*runs, key=key_of)


def merge_within(
    sources: list[tuple[int, Iterable[bytes]]], memory: int, scratch: Path
) -> tuple[Iterable[bytes], int, int]:
    """Merge sorted sources of known sizes: in memory if their bytes fit in
    ``memory``, else each copied to a scratch run first and merged from disk.

    Returns (merged lines, runs spilled, bytes spilled)."""
    total = sum(size for size, _ in sources)
    if total <= memory:
        # Laid end to end and sorted stably: the sort finds the runs and merges
        # them in C, earlier runs first on equal keys (as a merge would).
        held: list[bytes] = []
        for _, chunks in sources:
            held += split_lines(b"".join(chunks))
        held.sort(key=key_of)
        return held, 0, 0
    runs = _Runs(scratch, "reduce-run")
    paths = []
    for _, chunks in sources:
        path = runs.new_path()
        with open(path, "wb", buffering=1 << 16) as f:
            for chunk in chunks:
                f.write(chunk)
                runs.bytes += len(chunk)
        paths.append(path)
    return runs.merged(paths), runs.count, runs.bytes


class MapSorter:
    """A map step's output: lines by partition, sorted by key, spilled beyond ``memory``."""

    def __init__(self, partitions: int, memory: int, scratch: Path) -> None:
        self.partitions = partitions
        self.memory = memory
        self._buffers: list[list[bytes]] = [[] for _ in range(partitions)]
        self._held = 0
        self._runs = _Runs(scratch, "map-run")
        # Per spill: its file and where each partition's lines start in it.
        self._spills: list[tuple[Path, list[int]]] = []

    @property
    def spilled_runs(self) -> int:
        return self._runs.count

    @property
    def spilled_bytes(self) -> int:
        return self._runs.bytes

    def add(self, partition: int, line: bytes) -> None:
        self.add_batch([line], [partition])

    def add_batch(self, lines: list[bytes], partitions: list[int]) -> None:
        """Add ``lines[i]`` to partition ``partitions[i]``, for every i."""
        buffers = self._buffers
        if self.partitions == 1:
            buffers[0] += lines
        else:
            for p, line in zip(partitions, lines, strict=True):
                buffers[p].append(line)
        self._held += sum(map(len, lines)) + _OVERHEAD * len(lines)
        if self._held > self.memory:
            self._spill()

    def _spill(self) -> None:
        path = self._runs.new_path()
        offsets = []
        with open(path, "wb", buffering=1 << 16) as f:
            for buf in self._buffers:
                offsets.append(f.tell())
                buf.sort(key=key_of)
                self._runs.bytes += _write_run(buf, f)
                buf.clear()
            offsets.append(f.tell())
        self._spills.append((path, offsets))
        self._held = 0

    def partition(self, p: int) -> Iterable[bytes]:
        """Partition ``p``'s lines sorted by key (call once per partition, in order)."""
        buf = self._buffers[p]
        buf.sort(key=key_of)
        if not self._spills:
            return buf
        runs: list[Iterable[bytes]] = [
            _file_lines(path, offsets[p], offsets[p + 1]) for path, offsets in self._spills
        ]
        runs.append(buf)
        return merge_sorted(runs)
