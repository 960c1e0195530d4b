"""The keep server's volumes as one store: blocking calls, run off the event loop.

A new block goes to the volume with the most free space; reads look in every
volume and skip a corrupt copy for a good one (counting and logging the bad
one). Every method here may block on the disk; the app calls them in threads.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from warehouse.blocks.locator import Locator
from warehouse.blocks.volume import BlockStat
from warehouse.errors import CorruptDataError, NotFoundError
from warehouse.server.keepd.metrics import Metrics, VolumeGauge
from warehouse.server.keepd.rules import Refused, TrashItem, choose_volume
from warehouse.volumes.base import BlockWrite, Volume

__all__ = ["VolumeSet"]

log = logging.getLogger("warehouse.keepd")


class VolumeSet:
    def __init__(self, volumes: Sequence[Volume], metrics: Metrics, reserve: int = 0) -> None:
        self.volumes = list(volumes)
        self.metrics = metrics
        self.reserve = reserve
        self._turns = itertools.count()
        # Volume name -> (blocks, bytes) as of its last whole index.
        self._stored: dict[str, tuple[int, int]] = {}
        self._stored_lock = threading.Lock()
        # Volume name -> bytes held, for volume_usage: the last whole index
        # (GC's, or a walk at the first report) plus the bytes gained since.
        self._held: dict[str, int] = {}

    def _copies(self, md5: str) -> list[tuple[Volume, BlockStat]]:
        out = []
        for v in self.volumes:
            st = v.stat(md5)
            if st is not None:
                out.append((v, st))
        return out

    def stat(self, loc: Locator) -> BlockStat | None:
        """A good copy's stat (what HEAD answers): a copy changed since it was
        last known good is read and verified first, and moved aside if corrupt."""
        for v, st in self._copies(loc.md5):
            if st.size == loc.size and v.check(loc.md5, loc.size):
                return st
        return None

    def read(
        self, loc: Locator, *, mapped: bool = False, buf: bytearray | None = None
    ) -> memoryview:
        """The block's verified bytes from the first good copy: ``mapped`` if
        the system can map safely, else in ``buf`` if given (it must hold any
        block), else in a new buffer.

        OSError if no copy is corrupt but some could not be read.
        """
        corrupt = []
        unreadable: OSError | None = None
        for v, _ in self._copies(loc.md5):
            try:
                data = self._read_copy(v, loc.md5, mapped, buf)
            except CorruptDataError:
                corrupt.append(v)
                self.metrics.add(corrupt_reads=1)
                log.error("corrupt copy of block %s on volume %s", loc.md5, v.name)
                continue
            except NotFoundError:
                continue  # trashed since we looked
            except OSError as e:  # e.g. a bad sector: another copy may do
                log.error("cannot read block %s on volume %s: %s", loc.md5, v.name, e)
                unreadable = e
                continue
            if len(data) == loc.size:
                return data
            # A good block of another length: the locator is wrong, not the copy.
        if corrupt:
            raise CorruptDataError(f"every stored copy of block {loc.md5} is corrupt")
        if unreadable is not None:
            raise unreadable
        raise NotFoundError(f"block {loc.key} is not here")

    @staticmethod
    def _read_copy(v: Volume, md5: str, mapped: bool, buf: bytearray | None) -> memoryview:
        if mapped and (pages := v.get_mapped(md5)) is not None:
            return pages
        return memoryview(v.get(md5)) if buf is None else v.get_into(md5, buf)

    def open_write(self, md5: str, size: int) -> BlockWrite:
        """A writer on the volume that has this block already, else on the roomiest one."""
        for v, st in self._copies(md5):
            if st.size == size:
                return v.open_write(md5, size)
        free = [v.space().free_bytes for v in self.volumes]
        i = choose_volume(free, size, self.reserve, next(self._turns))
        if i is None:
            raise Refused(507, "every volume is full")
        return self.volumes[i].open_write(md5, size)

    def store(self, data: bytes) -> bool:
        """Store whole verified bytes (a pulled block); True if written anew."""
        loc = Locator.for_data(data)
        w = self.open_write(loc.md5, loc.size)
        try:
            w.write(data)
            new = w.commit()
        finally:
            w.abort()
        if new:
            self.metrics.add(blocks_stored=1)
        return new

    def index(self, prefix: str) -> str:
        """``md5+size mtime_ns`` for each copy on each volume, in hash order, then ``\\n``."""
        listings = [v.index(prefix) if prefix else self._counted(v) for v in self.volumes]
        merged = heapq.merge(*listings, key=lambda s: s.md5)
        lines = [f"{s.md5}+{s.size} {s.mtime_ns}\n" for s in merged]
        return "".join(lines) + "\n"

    def _counted(self, v: Volume) -> Iterator[BlockStat]:
        """A whole index of ``v``, its blocks and bytes noted once it is done
        (the per-volume stored bytes of /metrics, refreshed by each GC)."""
        blocks = size = 0
        for st in v.index():
            blocks += 1
            size += st.size
            yield st
        with self._stored_lock:
            self._stored[v.name] = (blocks, size)
            self._held[v.name] = size
            v.counts.take_bytes()  # gained before the listing ended: in it already

    def trash(self, item: TrashItem) -> int:
        """Trash each copy whose mtime is still the one GC saw; return how many."""
        trashed = 0
        for v, st in self._copies(item.locator.md5):
            if st.size == item.locator.size and v.trash(st.md5, if_mtime_ns=item.block_mtime):
                trashed += 1
        return trashed

    def untrash(self, md5: str) -> bool:
        found = False
        for v in self.volumes:
            found = v.untrash(md5) or found
        return found

    def gauges(self) -> list[VolumeGauge]:
        out = []
        for v in self.volumes:
            space = v.space()
            with self._stored_lock:
                blocks, stored = self._stored.get(v.name, (None, None))
            # Only an S3 volume counts its requests (what a store bills by).
            asked = getattr(v, "requests", None)
            requests = tuple(sorted(asked().items())) if callable(asked) else ()
            out.append(
                VolumeGauge(
                    v.name,
                    space.free_bytes,
                    space.total_bytes,
                    v.device(),
                    blocks,
                    stored,
                    requests,
                )
            )
        return out

    def usage_rows(self) -> list[dict[str, Any]]:
        """Each volume's requests since the last call, by billed kind, and
        the bytes it holds (docs/usage.md, "Per volume"): rows for the
        controller's volume_usage. A volume not yet indexed is walked once."""
        rows = []
        for v in self.volumes:
            with self._stored_lock:
                known = v.name in self._held
            if not known:
                held = sum(st.size for st in v.index())
                with self._stored_lock:
                    self._held.setdefault(v.name, held)
                    v.counts.take_bytes()  # the walk counted what was gained meanwhile
            taken = v.counts.take()
            with self._stored_lock:
                self._held[v.name] = max(0, self._held[v.name] + taken.added_bytes)
                stored = self._held[v.name]
            rows.append(
                {
                    "volume": v.name,
                    "at": time.time(),
                    "stored_bytes": stored,
                    "gets": taken.gets,
                    "puts": taken.puts,
                    "lists": taken.lists,
                    "deletes": taken.deletes,
                }
            )
        return rows

    def clean(self, stale_temporary_age: float) -> None:
        """Empty trash past its lifetime and temporaries a crash left behind."""
        for v in self.volumes:
            removed = v.empty_trash()
            stale = v.remove_stale_temporaries(stale_temporary_age)
            if removed or stale:
                log.info("volume %s: removed %d trashed, %d stale", v.name, removed, stale)
