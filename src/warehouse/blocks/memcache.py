"""An optional shared memcached of small blocks (DESIGN §4.3, docs/s3.md).

Nodes that read the same small blocks (a job's many steps over one input
of small files) find them in memory on the network before they ask a keep
server or a bucket. Only blocks up to ``MAX_ITEM`` bytes: memcached's items
are at most 1 MiB by default, and a big block costs one GET anyway.

Every hit is checked against its MD5 and size like any other copy; a bad
value is deleted and counts as a miss. Any memcached error is a miss too:
the cache can slow nothing down beyond its short timeouts, and never fails
a read. The client library (pymemcache, the ``[memcached]`` extra) is
imported only when the setting ``memcached`` names servers.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any

from warehouse.errors import UsageError

__all__ = ["MAX_ITEM", "MemcachedBlocks", "configured_memcached", "parse_servers"]

log = logging.getLogger("warehouse.cache")

MAX_ITEM = 1_000_000  # bytes: under memcached's default item limit with its overhead
_PREFIX = "wh-block-"
_TIMEOUT = 1.0  # seconds for a connect or a reply: a miss costs at most this


def parse_servers(text: str) -> list[tuple[str, int]]:
    """``HOST:PORT[,HOST:PORT...]``; raises ValueError saying what is wrong."""
    found: list[tuple[str, int]] = []
    for part in (p.strip() for p in text.split(",")):
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{part!r} is not HOST:PORT (servers are separated by commas)")
        found.append((host.strip("[]"), int(port)))
    return found


class MemcachedBlocks:
    """Small verified blocks in memcached servers (hashed over them)."""

    def __init__(self, servers: list[tuple[str, int]]) -> None:
        try:
            from pymemcache.client.hash import HashClient  # type: ignore[import-untyped]
        except ImportError:
            raise UsageError(
                "the memcached setting needs pymemcache: "
                "pip install 'warehouse[memcached]' (or unset WH_MEMCACHED)"
            ) from None
        self.servers = servers
        self.client: Any = HashClient(
            servers,
            connect_timeout=_TIMEOUT,
            timeout=_TIMEOUT,
            ignore_exc=True,  # a server down is a miss, not an error
            retry_attempts=1,
            dead_timeout=30,
            # A reader fetches blocks on several threads; one connection
            # shared by them mixes their replies.
            use_pooling=True,
            max_pool_size=16,
        )

    def get(self, md5: str, size: int) -> bytes | None:
        if size > MAX_ITEM:
            return None
        try:
            data = self.client.get(_PREFIX + md5)
        except Exception as e:  # any client failure is a miss
            log.debug("memcached: %s", e)
            return None
        if data is None:
            return None
        if len(data) != size or hashlib.md5(data).hexdigest() != md5:
            log.warning("memcached: dropping a bad copy of block %s", md5)
            self._delete(md5)
            return None
        return bytes(data)

    def put(self, md5: str, data: bytes | bytearray | memoryview) -> None:
        """Keep a block the caller verified, if small; failures only log."""
        if not 0 < len(data) <= MAX_ITEM:
            return
        try:
            # Waited for: the next reader, on another connection, finds it.
            self.client.set(_PREFIX + md5, bytes(data), noreply=False)
        except Exception as e:
            log.debug("memcached: %s", e)

    def _delete(self, md5: str) -> None:
        try:
            self.client.delete(_PREFIX + md5, noreply=False)
        except Exception as e:
            log.debug("memcached: %s", e)

    def stats(self) -> dict[str, int]:
        """get_hits, get_misses, curr_items and bytes summed over the servers
        that answer (memcached's own counts: every client's, not only ours)."""
        out = {"get_hits": 0, "get_misses": 0, "curr_items": 0, "bytes": 0}
        for server in list(self.client.clients.values()):
            try:
                values = server.stats()
            except Exception as e:
                log.debug("memcached: %s", e)
                continue
            for name in out:
                out[name] += int(values.get(name.encode(), values.get(name, 0)))
        return out

    def close(self) -> None:
        try:
            self.client.close()
        except Exception as e:
            log.debug("memcached: %s", e)


def configured_memcached() -> MemcachedBlocks | None:
    """The memcached servers the setting ``memcached`` names, or None."""
    text = os.environ.get("WH_MEMCACHED", "").strip()
    if not text:
        return None
    try:
        servers = parse_servers(text)
    except ValueError as e:
        raise UsageError(f"WH_MEMCACHED: {e}") from None
    return MemcachedBlocks(servers)
