"""An in-process RAM cache of verified blocks, bounded by a byte budget (LRU)."""

from __future__ import annotations

import threading
from collections import OrderedDict

__all__ = ["DEFAULT_CACHE_BYTES", "BlockCache"]

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024


class BlockCache:
    """Least-recently-used blocks up to ``budget`` bytes. Thread-safe.

    Only verified data goes in, so a hit needs no second check.
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._used = 0
        self._blocks: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def used(self) -> int:
        return self._used

    def __len__(self) -> int:
        return len(self._blocks)

    def get(self, key: str) -> bytes | None:
        with self._lock:
            data = self._blocks.get(key)
            if data is None:
                self.misses += 1
                return None
            self._blocks.move_to_end(key)
            self.hits += 1
            return data

    def put(self, key: str, data: bytes) -> None:
        if len(data) > self.budget:
            return
        with self._lock:
            old = self._blocks.pop(key, None)
            if old is not None:
                self._used -= len(old)
            self._blocks[key] = data
            self._used += len(data)
            while self._used > self.budget:
                _, evicted = self._blocks.popitem(last=False)
                self._used -= len(evicted)
