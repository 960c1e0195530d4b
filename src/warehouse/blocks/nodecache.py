"""The node's caches of whole blocks behind the RAM cache, in the order a
read asks them: the disk cache (``diskcache``), then a shared memcached of
small blocks (``memcache``, optional), then the caller's keep servers or
volume. Each verifies what it gives; a block found in memcached is kept on
disk too, and a block fetched goes into both."""

from __future__ import annotations

from warehouse.blocks.diskcache import DiskCache, configured
from warehouse.blocks.memcache import MemcachedBlocks, configured_memcached

__all__ = ["NodeCaches", "configured_caches"]


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
