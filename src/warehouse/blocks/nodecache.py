"""The node's caches of whole blocks behind the RAM cache, in the order a
read asks them: the disk cache (``diskcache``), then a shared memcached of
small blocks (``memcache``, optional), then the caller's keep servers or
volume. Each verifies what it gives; a block found in memcached is kept on
disk too, and a block fetched goes into both. ``CachedReads`` is that
order, for every store that has these caches (the block client of keep
servers, the embedded store on an S3 volume)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from warehouse.blocks.cache import BlockCache
from warehouse.blocks.diskcache import DiskCache, configured
from warehouse.blocks.locator import EMPTY_MD5, Locator
from warehouse.blocks.memcache import MemcachedBlocks, configured_memcached
from warehouse.blocks.sources import CACHE, count, counting
from warehouse.blocks.volume import LocalVolume

__all__ = ["CachedReads", "NodeCaches", "configured_caches"]

Read = bytes | memoryview
# Blocks of a batch that missed the disk cache fetched at once, ahead of
# the one used (a one-pass reader's own read-ahead, which a batch replaces).
_FETCH_AHEAD = 3


class NodeCaches:
    def __init__(self, disk: DiskCache | None, shared: MemcachedBlocks | None = None) -> None:
        self.disk = disk
        self.shared = shared

    def get(self, md5: str, size: int) -> bytes | None:
        if self.disk is not None and (data := self.disk.get(md5, size)) is not None:
            return data
        if self.shared is not None and (data := self.shared.get(md5, size)) is not None:
            if self.disk is not None:
                self.disk.put(md5, data)
            return data
        return None

    def put(self, md5: str, data: bytes | bytearray | memoryview) -> None:
        if self.disk is not None:
            self.disk.put(md5, data)
        if self.shared is not None:
            self.shared.put(md5, data)

    def close(self) -> None:
        if self.disk is not None:
            self.disk.close()
        if self.shared is not None:
            self.shared.close()


def configured_caches() -> NodeCaches | None:
    """The caches the settings ask for (``cache_dir``/``cache_size``,
    ``memcached``), or None when there are none."""
    disk = configured()
    shared = configured_memcached()  # pymemcache is imported only when servers are named
    if disk is None and shared is None:
        return None
    return NodeCaches(disk, shared)


class CachedReads:
    """A read as every store with node caches makes it: the RAM cache, the
    node's caches, then ``fetch`` (the store's own read, verified), whose
    block is kept in the node's caches and, unless a one-pass read, in RAM.

    A one-pass read of big blocks (``get_ahead``) checks the disk cache's
    entries of a batch together, as a local volume checks its files: one
    native call hashes them side by side, and each is mapped when used.
    Without that a warm read hashed each block alone, and read slower than
    the same read of a local volume.
    """

    def __init__(
        self,
        ram: BlockCache | None,
        node: NodeCaches | None,
        fetch: Callable[[Locator], bytes],
    ) -> None:
        self.ram = ram
        self.node = node
        self.fetch = fetch
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def get(self, locator: Locator, *, cache: bool = True) -> bytes:
        if locator.md5 == EMPTY_MD5:
            return b""
        if self.ram is not None and (hit := self.ram.get(locator.key)) is not None:
            count(CACHE, len(hit))
            return hit
        node = self.node
        if node is not None and (held := node.get(locator.md5, locator.size)) is not None:
            if cache and self.ram is not None:
                self.ram.put(locator.key, held)
            count(CACHE, len(held))
            return held
        data = self.fetch(locator)  # counts its block by where it came from
        if node is not None:
            node.put(locator.md5, data)
        if cache and self.ram is not None:
            self.ram.put(locator.key, data)
        return data

    def checks_ahead(self) -> bool:
        """Whether ``get_ahead`` checks a batch of big blocks together here."""
        return self.node is not None and self.node.disk is not None and LocalVolume.can_check_open()

    def get_ahead(self, locators: Sequence[Locator]) -> list[Callable[[], Read]]:
        """Each block by a call made when it is used (the reader's order):
        one held by the disk cache is checked now with the others and mapped
        then; one that is not is fetched by ``get``, up to ``_FETCH_AHEAD``
        of them at once ahead of use, so a cold read keeps its overlap of
        fetching and using. Only where ``checks_ahead()``."""
        assert self.node is not None and self.node.disk is not None
        opened = self.node.disk.open_checked([(loc.md5, loc.size) for loc in locators])
        misses = [i for i, b in enumerate(opened) if b is None]
        fetches: dict[int, Future[Read]] = {}
        lock = threading.Lock()

        def start(at: int) -> None:
            # The miss at ``at`` and the next few (in the reader's order),
            # so no more than a few fetched blocks wait unused.
            with lock:
                for j in misses[at : at + _FETCH_AHEAD]:
                    if j not in fetches:
                        fetches[j] = self._fetcher().submit(self.get, locators[j], cache=False)

        def fetched(i: int) -> Read:
            start(misses.index(i))
            with lock:
                fetch = fetches.pop(i)
            return fetch.result()

        # The first few start now, while the reader still uses the blocks
        # before this batch: a cold read overlaps fetching and writing across
        # batches as it did block by block.
        start(0)
        return [
            functools.partial(fetched, i)
            if b is None
            else counting(b.take, CACHE, locators[i].size)
            for i, b in enumerate(opened)
        ]

    def _fetcher(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(_FETCH_AHEAD, thread_name_prefix="wh-fetch")
            return self._pool

    def close(self) -> None:
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        if self.node is not None:
            self.node.close()
