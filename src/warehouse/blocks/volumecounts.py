"""What a volume was asked, by kind, and the bytes it gained: kept in memory
by the volume, taken (and reset) by whoever records them (docs/usage.md,
"Per volume").

Four kinds, as an object store bills: ``get`` (a block read; an S3 HEAD
too, billed at the GET rate), ``put`` (a block written, or an S3 COPY,
billed at the PUT rate), ``list`` (a listing: one per page of an S3
listing) and ``delete``. One lock, held for an addition: a block read or
written costs far more than that.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

__all__ = ["DELETE", "GET", "KINDS", "LIST", "PUT", "Taken", "VolumeCounts"]

KINDS = ("get", "put", "list", "delete")
GET, PUT, LIST, DELETE = range(4)


@dataclass(frozen=True, slots=True)
class Taken:
    """Counts since the previous ``take``."""

    gets: int = 0
    puts: int = 0
    lists: int = 0
    deletes: int = 0
    # Bytes of blocks stored anew minus bytes of blocks trashed.
    added_bytes: int = 0

    def __bool__(self) -> bool:
        return any((self.gets, self.puts, self.lists, self.deletes, self.added_bytes))


class VolumeCounts:
    __slots__ = ("_added", "_counts", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = [0, 0, 0, 0]
        self._added = 0

    def count(self, kind: int, n: int = 1) -> None:
        """``n`` more requests of ``KINDS[kind]``."""
        with self._lock:
            self._counts[kind] += n

    def add_bytes(self, n: int) -> None:
        with self._lock:
            self._added += n

    def take(self) -> Taken:
        """The counts so far, and start again from zero."""
        with self._lock:
            counts, self._counts = self._counts, [0, 0, 0, 0]
            added, self._added = self._added, 0
        gets, puts, lists, deletes = counts
        return Taken(gets, puts, lists, deletes, added)

    def take_bytes(self) -> int:
        """The bytes gained so far, and start them again from zero (the
        requests are left)."""
        with self._lock:
            added, self._added = self._added, 0
        return added

    def give_back(self, taken: Taken) -> None:
        """Add counts taken and not recorded (the record failed) back."""
        with self._lock:
            for i, n in enumerate((taken.gets, taken.puts, taken.lists, taken.deletes)):
                self._counts[i] += n
            self._added += taken.added_bytes
