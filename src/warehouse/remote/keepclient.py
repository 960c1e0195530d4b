"""The block client for keep servers (DESIGN §4.3): replication, failover,
retries with backoff, verification with fallback to another copy.

``KeepClient`` implements the same ``BlockStore`` protocol as the local
store, so the collection writer and reader work unchanged over HTTP.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from warehouse.blocks import MAX_BLOCK_SIZE, Locator
from warehouse.blocks.cache import BlockCache
from warehouse.blocks.locator import LocatorError
from warehouse.blocks.nodecache import CachedReads, NodeCaches
from warehouse.blocks.sources import KEEP, count
from warehouse.blocks.store import Buffer, StoredBlock
from warehouse.errors import (
    CorruptDataError,
    ForbiddenError,
    NotFoundError,
    UsageError,
    WarehouseError,
    os_error,
)
from warehouse.remote.blockhttp import (
    REPLY_LIMIT,
    BlockHttp,
    Body,
    DeadlineError,
    FileRange,
    Reply,
    TransportError,
    keep_timeout,
)
from warehouse.remote.probe import (
    Service,
    hinted_copies,
    k_hint,
    order_from_hint,
    own_host_first,
    probe_order,
)
from warehouse.remote.signatures import SignatureCache

__all__ = ["KeepClient", "KeepStats", "ReplicationError", "cluster_of"]

log = logging.getLogger("warehouse.keep")

# Seconds a server that ran out a request's deadline is asked last for reads:
# a hung server costs one deadline, not one per block.
SLOW_FOR = 300.0
# Signed locators of blocks put that a client remembers at most.
_SIGNED_HELD = 10_000
# Bytes of a file range read at a time for its MD5 (``put_range``).
_PIECE = 1 << 20


class ReplicationError(WarehouseError):
    """Fewer copies of a block could be written than the caller asked for."""


@dataclass
class KeepStats:
    """What the client saw; shown by `wh put --json` and in test output."""

    puts: int = 0
    copies: int = 0
    skipped: int = 0  # blocks already stored, not sent again
    gets: int = 0
    failovers: int = 0
    bad_copies: list[tuple[str, str]] = field(default_factory=list)  # (block, server url)
    min_copies_seen: int | None = None


class KeepClient:
    def __init__(
        self,
        services: Sequence[Service],
        token: str,
        *,
        replication: int = 2,
        min_copies: int | None = None,
        cluster: str = "local",
        timeout: float | None = None,
        retries: int = 3,
        backoff: float = 0.2,
        cache: BlockCache | None = None,
        disk: NodeCaches | None = None,
        signer: Callable[[Locator], Locator] | None = None,
        known: SignatureCache | None = None,
        remotes: Callable[[str], KeepClient | None] | None = None,
        host: str = "",
    ) -> None:
        if not services:
            raise UsageError("no keep servers are registered with the controller")
        self.services = list(services)
        self.token = token
        self.replication = max(1, replication)
        self.min_copies = self.replication if min_copies is None else min_copies
        self.cluster = cluster
        self.retries = retries
        self.backoff = backoff
        self.cache = cache
        # The node's disk cache of whole blocks and a shared memcached
        # (docs/s3.md, "The cache"): filled by one-pass reads too, so a
        # second `wh get` asks no server.
        self.disk = disk
        self.reads = CachedReads(cache, disk, self._fetch)
        # The controller signs its own reads (it holds the key); clients use
        # the signatures the controller gave them.
        self.signer = signer
        self.stats = KeepStats()
        # The last PUT reply that was not a copy of its block (which server, what).
        self.last_put_problem = ""
        self._lock = threading.Lock()
        # Signed locators this client already holds: a later put of the same
        # block only checks (HEAD) that the copies are there. The last
        # ``_SIGNED_HELD`` at most: a block per directory of a tree of a
        # million one-file directories held about 0.4 KB each.
        self._signed: dict[str, Locator] = {}
        self.known = known
        # The block client of another cluster by its name (None: not known);
        # a block whose +K hint names it is read there (docs/clusters.md).
        self.remotes = remotes
        # This client's host label ($WH_HOST, given to steps): reads prefer a
        # copy on a server of the same host (docs/clusters.md).
        self.host = host
        # What a block read from these servers counts as (blocks.sources):
        # another cluster's client is told it is one (RemoteWarehouse.other).
        self.source = KEEP
        # Server URL -> when a request to it last ran out its deadline.
        self._slow: dict[str, float] = {}
        # Seconds a server may send nothing (default: the keep_timeout setting);
        # a whole request has a deadline scaled to its size (remote.blockhttp).
        self.http = BlockHttp(token, keep_timeout() if timeout is None else timeout)
        # Sends the second and later copies of a block while the caller's
        # thread sends the first (threads start only when used).
        self._copiers = ThreadPoolExecutor(max_workers=16, thread_name_prefix="wh-copy")

    def close(self) -> None:
        self._copiers.shutdown(wait=True)
        self.http.close()
        if self.known is not None:
            self.known.close()
        self.reads.close()

    def flush(self) -> None:
        """Every put returned after its copies were stored: nothing to wait for."""

    # -- writing -------------------------------------------------------------

    def put(self, data: Buffer, *, md5: str | None = None) -> StoredBlock:
        size = len(data)
        if size > MAX_BLOCK_SIZE:
            raise UsageError(f"block of {size} bytes is over the {MAX_BLOCK_SIZE} limit")
        return self._put(md5 or hashlib.md5(data).hexdigest(), data)

    def put_range(self, fd: int, offset: int, size: int) -> Locator:
        """Store ``size`` bytes of the open file ``fd`` from ``offset`` as one
        block, as ``put`` stores a block (copies, signature, a block already
        stored not sent again), reading it a piece (1 MiB) at a time: once
        for its MD5, then once for each copy sent. For a put's manifest
        text, which may be hundreds of megabytes: what is held is a piece
        per copy in flight, not a 64 MiB block. Each server checks the MD5
        of what it is sent (a range that changed meanwhile is refused)."""
        if size > MAX_BLOCK_SIZE:
            raise UsageError(f"block of {size} bytes is over the {MAX_BLOCK_SIZE} limit")
        body = FileRange(fd, offset, size)
        md5 = hashlib.md5()
        try:
            for piece in body.pieces(_PIECE):
                md5.update(piece)
        except OSError as e:
            raise os_error(e, "cannot read a block to store") from None
        return self._put(md5.hexdigest(), body).locator

    def _put(self, md5: str, data: Body) -> StoredBlock:
        size = len(data)
        plain = Locator(md5, size)
        if plain.is_empty:
            return StoredBlock(plain, False)
        known = self._signed.get(plain.key)
        if known is None and self.known is not None:
            known = self.known.get(plain.key)
        if known is not None and self._has_copies(known):
            with self._lock:
                self.stats.skipped += 1
            return StoredBlock(known, False)
        order = probe_order(md5, self.services)
        stored, signed, new = self._store_copies(md5, data, order)
        with self._lock:
            self.stats.puts += 1
            self.stats.copies += len(stored)
            seen = self.stats.min_copies_seen
            self.stats.min_copies_seen = len(stored) if seen is None else min(seen, len(stored))
        if len(stored) < self.min_copies or signed is None:
            why = f"; last refusal: {self.last_put_problem}" if self.last_put_problem else ""
            raise ReplicationError(
                f"block {md5}: stored {len(stored)} of {self.replication} copies "
                f"(at least {self.min_copies} needed; {len(self.services)} servers){why}"
            )
        locator = signed.with_hint(k_hint(stored, self.cluster))
        if len(self._signed) >= _SIGNED_HELD:
            # Forgotten: the signature cache (``known``) still has them,
            # else such a block is sent again, not wrongly skipped.
            self._signed.clear()
        self._signed[plain.key] = locator
        if self.known is not None:
            self.known.add(locator)
        return StoredBlock(locator, new)

    def _store_copies(
        self, md5: str, body: Body, order: list[Service]
    ) -> tuple[list[int], Locator | None, bool]:
        """PUT to the first servers in probe order that accept, the copies at
        once: which took it, a signed locator, and whether any copy was new."""
        stored: list[int] = []
        signed: Locator | None = None
        new = False
        failed: list[int] = []
        for attempt in range(self.retries + 1):
            candidates = list(range(len(order))) if attempt == 0 else failed
            failed = []
            while candidates and len(stored) < self.replication:
                need = self.replication - len(stored)
                batch, candidates = candidates[:need], candidates[need:]
                for i, outcome in zip(batch, self._put_each(md5, body, order, batch), strict=True):
                    if isinstance(outcome, DeadlineError):
                        # It had its whole time: the next server is asked, not it again.
                        log.info("PUT %s to %s failed: %s", md5, order[i].url, outcome)
                        self.last_put_problem = f"{order[i].url}: {outcome}"
                        self._too_slow(order[i].url)
                        continue
                    if isinstance(outcome, str):
                        log.info("PUT %s to %s failed: %s", md5, order[i].url, outcome)
                        failed.append(i)
                        continue
                    _raise_for_client_error(outcome, f"storing block {md5} on {order[i].url}")
                    locator = _stored_locator(outcome, md5, len(body))
                    if isinstance(locator, str):
                        # Not a copy: naming what it answered would name bytes never stored.
                        log.warning("PUT %s to %s: %s", md5, order[i].url, locator)
                        self.last_put_problem = f"{order[i].url}: {locator}"
                        continue
                    signed = locator
                    new = new or outcome.headers.get("x-keep-new", "1") == "1"
                    stored.append(i)
            if len(stored) >= self.replication or not failed:
                break
            time.sleep(self.backoff * 2**attempt)
        return stored, signed, new

    def _put_each(
        self, md5: str, body: Body, order: list[Service], batch: list[int]
    ) -> list[Reply | str | DeadlineError]:
        """One PUT per server in ``batch``, all at once; a reply, or why it failed
        (5xx too; a DeadlineError for a server too slow to be asked again)."""

        def one(i: int) -> Reply | str | DeadlineError:
            try:
                resp = self.http.request("PUT", f"{order[i].url}/{md5}", body)
            except DeadlineError as e:
                return e
            except TransportError as e:
                return str(e)
            return f"HTTP {resp.status}" if resp.status >= 500 else resp

        if len(batch) == 1:
            return [one(batch[0])]
        # This thread sends one copy; helpers send the others. All are over
        # before this returns, even on an error: the body may be a view of a
        # buffer the caller reuses.
        others = [self._copiers.submit(one, i) for i in batch[1:]]
        try:
            first = one(batch[0])
        finally:
            wait(others)
        return [first, *(f.result() for f in others)]

    def _has_copies(self, locator: Locator) -> bool:
        order = probe_order(locator.md5, self.services)[: self.replication]
        for s in order:
            try:
                resp = self.http.request("HEAD", f"{s.url}/{locator}")
            except TransportError:
                return False
            if resp.status != 200:
                return False
        return True

    # -- reading -------------------------------------------------------------

    def get(self, locator: Locator, *, cache: bool = True) -> bytes:
        """A verified block: the RAM cache, the node's caches, then a keep server."""
        return self.reads.get(locator, cache=cache)

    def checks_ahead(self) -> bool:
        """Whether ``get_ahead`` checks big blocks together (in the disk cache)."""
        return self.reads.checks_ahead()

    def get_ahead(self, locators: Sequence[Locator]) -> list[Callable[[], bytes | memoryview]]:
        """Big blocks of a one-pass read: see ``CachedReads.get_ahead``."""
        return self.reads.get_ahead(locators)

    def _fetch(self, locator: Locator) -> bytes:
        """The block from a keep server (or another cluster's), verified."""
        other = self._other_cluster(locator)
        if other is not None:
            # Signed by that cluster for its token: only its servers can serve
            # it (and that client counts it, as a cache hit or another cluster's).
            return other.get(locator, cache=False)
        if self.signer is not None and locator.hint("A") is None:
            locator = self.signer(locator)
        hint = locator.hint("K")
        order = order_from_hint(probe_order(locator.md5, self.services), hint, self.cluster)
        if self.host:
            copies = hinted_copies(hint, self.cluster) or self.replication
            order = own_host_first(order, copies, self.host)
        order = self._slow_last(order)
        corrupt: list[str] = []
        errors: list[str] = []
        too_slow: set[str] = set()
        for attempt in range(self.retries + 1):
            retry = False
            for s in order:
                if s.url in too_slow:
                    continue
                try:
                    resp = self.http.request(
                        "GET", f"{s.url}/{locator}", limit=max(locator.size, REPLY_LIMIT)
                    )
                except DeadlineError as e:
                    # It had its whole time: this copy failed; the next is read
                    # and this server is not asked again for the block.
                    errors.append(f"{s.url}: {e}")
                    too_slow.add(s.url)
                    self._too_slow(s.url)
                    continue
                except TransportError as e:
                    errors.append(f"{s.url}: {e}")
                    retry = True
                    continue
                if resp.status == 404:
                    continue
                if resp.status == 502:
                    self._bad_copy(locator, s, "the server found its copy corrupt")
                    corrupt.append(s.url)
                    continue
                if resp.status >= 500:
                    errors.append(f"{s.url}: HTTP {resp.status}")
                    retry = True
                    continue
                _raise_for_client_error(resp, f"reading block {locator.key} from {s.url}")
                if resp.status != 200:
                    # A redirect (not followed: the token must not go elsewhere) or
                    # another success has no block in it; not a corrupt copy either.
                    errors.append(f"{s.url}: HTTP {resp.status}")
                    continue
                data = resp.body
                if len(data) != locator.size or hashlib.md5(data).hexdigest() != locator.md5:
                    self._bad_copy(locator, s, "the bytes received do not match")
                    corrupt.append(s.url)
                    continue
                with self._lock:
                    self.stats.gets += 1
                    self.stats.failovers += s is not order[0]
                    self._slow.pop(s.url, None)  # it answered in time
                count(self.source, len(data))
                return data
            if not retry:
                break
            time.sleep(self.backoff * 2**attempt)
        if corrupt:
            raise CorruptDataError(
                f"block {locator.key}: no good copy (corrupt on {', '.join(corrupt)})"
            )
        if errors:
            raise WarehouseError(f"block {locator.key}: no server answered ({errors[-1]})")
        raise NotFoundError(f"block {locator.key} is on none of {len(order)} keep servers")

    def _too_slow(self, url: str) -> None:
        with self._lock:
            self._slow[url] = time.monotonic()

    def _slow_last(self, order: list[Service]) -> list[Service]:
        """``order`` with the servers that ran out a deadline lately moved last."""
        with self._lock:
            if not self._slow:
                return order
            now = time.monotonic()
            for url in [u for u, at in self._slow.items() if now - at > SLOW_FOR]:
                del self._slow[url]
            slow = set(self._slow)
        return [s for s in order if s.url not in slow] + [s for s in order if s.url in slow]

    def _other_cluster(self, locator: Locator) -> KeepClient | None:
        """The client of the other cluster the block's ``+K`` hint names, if known."""
        if self.remotes is None:
            return None
        where = cluster_of(locator.hint("K"))
        if where is None or where == self.cluster:
            return None
        return self.remotes(where)

    def held(self, locator: Locator) -> Locator | None:
        """A locator signed for this client of a block that is stored here with all
        its copies, as far as this client can tell without the data: one it stored
        itself (this run, or earlier in the signature cache) and that is still there."""
        if locator.is_empty:
            return locator.without_hints()
        known = self._signed.get(locator.key)
        if known is None and self.known is not None:
            known = self.known.get(locator.key)
        if known is None or not self._has_copies(known):
            return None
        return known

    def _bad_copy(self, locator: Locator, service: Service, why: str) -> None:
        log.warning("bad copy of block %s on %s: %s", locator.key, service.url, why)
        with self._lock:
            self.stats.bad_copies.append((locator.key, service.url))

    def exists(self, locator: Locator) -> bool:
        if locator.is_empty:
            return True
        if self.signer is not None and locator.hint("A") is None:
            locator = self.signer(locator)
        for s in probe_order(locator.md5, self.services):
            try:
                if self.http.request("HEAD", f"{s.url}/{locator}").status == 200:
                    return True
            except TransportError:
                continue
        return False


def cluster_of(hint: str | None) -> str | None:
    """The cluster a ``+K`` hint (without its K) names."""
    if not hint:
        return None
    return hint.partition("@")[2] or None


def _stored_locator(resp: Reply, md5: str, size: int) -> Locator | str:
    """The locator a PUT's reply gives for the block ``md5``/``size``, or why it is none."""
    if resp.status != 200:
        return f"answered HTTP {resp.status}, not 200"
    text = resp.text.strip()
    try:
        locator = Locator.parse(text)
    except LocatorError:
        return f"answered {text[:80]!r}, not a locator"
    if (locator.md5, locator.size) != (md5, size):
        return f"answered the locator of another block ({locator.md5}+{locator.size})"
    return locator


def _raise_for_client_error(resp: Reply, doing: str) -> None:
    if resp.status < 400:
        return
    detail = resp.text.strip()[:300]
    if resp.status in (401, 403):
        raise ForbiddenError(f"{doing}: HTTP {resp.status} {detail}")
    if resp.status == 404:
        raise NotFoundError(f"{doing}: not found")
    raise UsageError(f"{doing}: HTTP {resp.status} {detail}")
