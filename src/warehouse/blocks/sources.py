"""Blocks this process was given, and their bytes, by where each came from
(docs/usage.md): a step reports them as it exits.

Counted once per block read, by the layer that produced its bytes: a RAM or
node cache hit is ``cache`` (the node's disk cache and a shared memcached
alike), a read of a local volume ``local``, of an S3 volume ``s3``, a keep
server of this installation's ``keep``, another cluster's keep server
``cluster``. Each thread adds to cells of its own (no lock on a read: a
step reads blocks on several threads at once, and a shared cell would lose
counts); ``totals`` adds the threads' cells up.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["CACHE", "CLUSTER", "KEEP", "LOCAL", "S3", "SOURCES", "count", "counting", "totals"]

SOURCES = ("cache", "local", "s3", "keep", "cluster")
CACHE, LOCAL, S3, KEEP, CLUSTER = range(len(SOURCES))
_N = len(SOURCES)

_T = TypeVar("_T")

_mine = threading.local()
# Every thread's cells ([blocks per source..., bytes per source...]); a
# thread that ended leaves its counts here.
_cells: list[list[int]] = []
_lock = threading.Lock()  # taken once per thread, to add its cells


def _new_cells() -> list[int]:
    cells = [0] * (2 * _N)
    with _lock:
        _cells.append(cells)
    _mine.cells = cells
    return cells


def count(source: int, size: int) -> None:
    """One block of ``size`` bytes read from ``source`` (``CACHE``…)."""
    try:
        cells: list[int] = _mine.cells
    except AttributeError:
        cells = _new_cells()
    cells[source] += 1
    cells[_N + source] += size


def counting(call: Callable[[], _T], source: int, size: int) -> Callable[[], _T]:
    """``call``, counting its block when it gives it (a block checked ahead
    of use is counted when used, not when checked)."""

    def counted() -> _T:
        data = call()
        count(source, size)
        return data

    return counted


def totals() -> tuple[dict[str, int], dict[str, int]]:
    """(blocks, bytes) per source read by this process so far."""
    with _lock:
        every = list(_cells)
    sums = [sum(c[i] for c in every) for i in range(2 * _N)]
    return dict(zip(SOURCES, sums[:_N], strict=True)), dict(zip(SOURCES, sums[_N:], strict=True))


def _after_fork() -> None:
    # A thread that held the lock at a fork does not exist in the child.
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)
