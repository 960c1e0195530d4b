"""The embedded warehouse's block store on any volume (an S3 volume).

``LocalBlockStore`` stays the store of a local directory: it overlaps fsyncs,
maps big blocks and checks them side by side, all of which need files. This
one asks only the ``Volume`` interface: a put is durable when the volume's
``put`` returns (one PUT for an S3 volume), and every read is verified by
the volume.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from warehouse.blocks.cache import BlockCache
from warehouse.blocks.locator import EMPTY_MD5, MAX_BLOCK_SIZE, Locator
from warehouse.blocks.nodecache import CachedReads, NodeCaches
from warehouse.blocks.sources import CACHE, LOCAL, S3, count
from warehouse.blocks.store import StoredBlock, put_range
from warehouse.blocks.volume import LocalVolume
from warehouse.errors import CorruptDataError, UsageError, os_error
from warehouse.volumes.base import Volume

__all__ = ["VolumeBlockStore"]

Buffer = bytes | bytearray | memoryview


class VolumeBlockStore:
    """A block store on one volume, with a RAM cache and the node's disk
    cache in front (each read of an S3 volume is a GET, billed and slower)."""

    def __init__(
        self, volume: Volume, cache: BlockCache | None = None, disk: NodeCaches | None = None
    ) -> None:
        self.volume = volume
        self.cache = cache
        self.disk = disk
        self.reads = CachedReads(cache, disk, self._fetch)
        # Where a block read from the volume is counted as coming from.
        self._source = LOCAL if isinstance(volume, LocalVolume) else S3

    def put(self, data: Buffer, *, md5: str | None = None) -> StoredBlock:
        if len(data) > MAX_BLOCK_SIZE:
            raise UsageError(f"block of {len(data)} bytes is over the {MAX_BLOCK_SIZE} limit")
        locator = Locator(md5 or hashlib.md5(data).hexdigest(), len(data))
        if locator.is_empty:
            return StoredBlock(locator, False)
        try:
            new = self.volume.put(locator.md5, data)
        except OSError as e:
            raise os_error(e, f"cannot store block {locator.md5} in {self.volume.name}") from None
        return StoredBlock(locator, new)

    def flush(self) -> None:
        """Nothing waits: each put was durable when it returned."""

    def close(self) -> None:
        self.reads.close()

    def get(self, locator: Locator, *, cache: bool = True) -> bytes | memoryview:
        return self.reads.get(locator, cache=cache)

    def checks_ahead(self) -> bool:
        """Whether ``get_ahead`` checks big blocks together (in the disk cache)."""
        return self.reads.checks_ahead()

    def get_ahead(self, locators: Sequence[Locator]) -> list[Callable[[], bytes | memoryview]]:
        """Big blocks of a one-pass read: see ``CachedReads.get_ahead``."""
        return self.reads.get_ahead(locators)

    def _fetch(self, locator: Locator) -> bytes:
        """The block from the volume, verified (the caches are asked first)."""
        try:
            data = self.volume.get(locator.md5)
        except OSError as e:
            raise os_error(e, f"cannot read block {locator.md5}") from None
        if len(data) != locator.size:
            raise CorruptDataError(
                f"block {locator.md5} on {self.volume.name} has {len(data)} bytes, "
                f"not {locator.size}"
            )
        count(self._source, len(data))
        return data

    def exists(self, locator: Locator) -> bool:
        if locator.is_empty:
            return True
        try:
            return self.volume.check(locator.md5, locator.size)
        except OSError as e:
            raise os_error(e, f"cannot look for block {locator.md5}") from None

    def put_range(self, fd: int, offset: int, size: int) -> Locator:
        """Store ``size`` bytes of ``fd`` from ``offset`` as one block, read
        a piece at a time twice (for its MD5, then to send it)."""
        return put_range(self.volume, self.volume.name, fd, offset, size)

    def copy_block(self, locator: Locator, write: Callable[[bytes | memoryview], object]) -> None:
        """Copy a block to ``write`` a piece at a time, verified once all is copied."""
        if locator.md5 == EMPTY_MD5:
            return
        if self.cache is not None and (hit := self.cache.get(locator.key)) is not None:
            write(hit)
            count(CACHE, len(hit))
            return
        try:
            size = self.volume.copy_to(locator.md5, write)
        except OSError as e:
            raise os_error(e, f"cannot read block {locator.md5}") from None
        if size != locator.size:
            raise CorruptDataError(
                f"block {locator.md5} on {self.volume.name} has {size} bytes, not {locator.size}"
            )
        count(self._source, size)
