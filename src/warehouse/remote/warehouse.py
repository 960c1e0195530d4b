"""The remote warehouse: the same operations as the embedded one, over HTTP.

Blocks go straight to the keep servers (``KeepClient``); manifests, names
and accounting go through the controller, which only accepts blocks signed
for the caller.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing, contextmanager
from typing import TYPE_CHECKING
from urllib.parse import quote

from warehouse import catalog
from warehouse.base import BlockWrites, WarehouseBase
from warehouse.blocks.cache import DEFAULT_CACHE_BYTES
from warehouse.blocks.sources import CLUSTER
from warehouse.catalog.values import check_writer
from warehouse.errors import (
    ConflictError,
    CorruptDataError,
    NotFoundError,
    UsageError,
    WarehouseError,
    os_error,
)
from warehouse.remote.api import REPLY_LIMIT, ApiClient, MethodNotAllowed, check_token
from warehouse.remote.sharing import RemoteSharing

# What reads or writes a collection (its manifest, listing, scratch text,
# blocks) loads where it is used: `wh name ls` needs none of it, `wh ls
# NAME` no block (docs/latency.md).
if TYPE_CHECKING:
    from warehouse.collection.listings import Digests, OrderedListing
    from warehouse.collection.spool import Spool
    from warehouse.collection.storedtext import StoredText
    from warehouse.keys import Key
    from warehouse.manifest import Manifest
    from warehouse.remote.keepclient import KeepClient
    from warehouse.remote.probe import Service
    from warehouse.settings import OtherCluster

__all__ = ["RemoteWarehouse"]

Progress = Callable[[int], None]


class RemoteWarehouse(WarehouseBase, RemoteSharing):
    # Each block waits on the network and two servers' disks: more blocks in
    # flight than cores keeps the cores busy (measured in benchmarks/remote.py).
    writers = 4
    readahead = 4

    def __init__(
        self,
        url: str,
        token: str,
        *,
        replication: int | None = None,
        min_copies: int | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        clusters: Mapping[str, OtherCluster] | None = None,
        wait: bool = True,
    ) -> None:
        self.url = url
        self._others: dict[str, RemoteWarehouse] = {}
        self.api = ApiClient(url, token)
        try:
            self._start(token, replication, min_copies, cache_bytes, clusters, wait)
        except BaseException:
            # Left open, the client's kept-alive connection is found later by
            # the garbage collector: a ResourceWarning wherever that happens.
            self.api.close()
            raise

    def _start(
        self,
        token: str,
        replication: int | None,
        min_copies: int | None,
        cache_bytes: int,
        clusters: Mapping[str, OtherCluster] | None,
        wait: bool,
    ) -> None:
        # Another cluster is not waited for when it refuses connections: it is
        # down (or wrong), not starting under this command.
        self.api._may_wait = wait
        token = check_token(token)
        me = self.api.get("/users/current")
        self.user: str = me["name"]
        # This installation's name, in its locators' +K hints (docs/clusters.md).
        self.cluster: str = me.get("cluster") or "local"
        self.clusters = {n: c for n, c in (clusters or {}).items() if n != self.cluster}
        self._others_lock = threading.Lock()
        # The block client is made when first used (``store``): a command
        # that reads names or a manifest's text only (`wh name ls`, `wh ls
        # NAME`) asks for no keep servers, opens no signature cache and
        # loads no block client (docs/latency.md).
        self._keep_args = (token, replication, min_copies, cache_bytes)
        self._store: KeepClient | None = None
        self._store_lock = threading.Lock()

    @property
    def store(self) -> KeepClient:  # type: ignore[override] # made on first use
        """The keep servers' client, made on first use, once whatever the thread."""
        store = self._store
        if store is None:
            with self._store_lock:
                if self._store is None:
                    self._store = self._keep_client(*self._keep_args)
                store = self._store
        return store

    def _keep_client(
        self, token: str, replication: int | None, min_copies: int | None, cache_bytes: int
    ) -> KeepClient:
        from warehouse.blocks.cache import BlockCache
        from warehouse.blocks.nodecache import configured_caches
        from warehouse.remote.keepclient import KeepClient
        from warehouse.remote.signatures import SignatureCache, default_cache_dir

        services = self._services()
        if not services:
            # `wh serve --keep N &` may not have registered its keep servers yet.
            self.api.wait_until_ready()
            services = self._services()
        if replication is None:
            # The default never asks for more copies than there are servers;
            # an explicit request does, and fails if it cannot be met.
            replication = min(int(os.environ.get("WH_REPLICATION", "2")), max(len(services), 1))
        # On by default: a block read again on this node then costs a disk
        # read, not a keep server's (and its object store's) GET.
        disk = configured_caches()
        known = SignatureCache(default_cache_dir(), self.url, token)
        try:
            return KeepClient(
                services,
                token,
                replication=replication,
                min_copies=min_copies,
                cache=BlockCache(cache_bytes),
                disk=disk,
                known=known,
                cluster=self.cluster,
                remotes=self._other_store if self.clusters else None,
                # A step's host label (docs/clusters.md): its reads prefer that host.
                host=os.environ.get("WH_HOST", "")[:64],
            )
        except BaseException:
            known.close()
            raise

    def _services(self) -> list[Service]:
        from warehouse.remote.probe import Service

        return [
            Service(s["id"], s["url"], s.get("host") or "") for s in self.api.get("/keep_services")
        ]

    def cache_identity(self) -> str:
        # Signed locators are read capabilities of one token: kept per token.
        return f"url:{self.url}\n{self.store.token}"

    def close(self) -> None:
        for other in self._others.values():
            other.close()
        if self._store is not None:  # else never needed
            self._store.close()
        self.api.close()

    # -- other clusters --------------------------------------------------------

    def other(self, name: str) -> RemoteWarehouse:
        """The installation of another cluster this client is configured with."""
        with self._others_lock:
            if name not in self._others:
                entry = self.clusters.get(name)
                if entry is None:
                    known = ", ".join(sorted(self.clusters)) or "none"
                    raise UsageError(
                        f"cluster {name!r} is not configured here (known: {known}; "
                        "see [clusters.NAME] in docs/clusters.md)"
                    )
                other = RemoteWarehouse(entry.url, entry.token, wait=False)
                try:
                    other.store.source = CLUSTER  # its blocks are another cluster's
                except BaseException:
                    other.close()
                    raise
                if other.cluster != name:
                    other.close()
                    raise UsageError(
                        f"cluster {name!r} is configured as {entry.url}, "
                        f"which calls itself {other.cluster!r}"
                    )
                self._others[name] = other
            return self._others[name]

    def _other_store(self, name: str) -> KeepClient | None:
        return self.other(name).store if name in self.clusters else None

    # -- collections ---------------------------------------------------------

    def _record(
        self,
        manifest: Manifest,
        file_md5s: Mapping[str, str] | None,
        writes: BlockWrites,
        pdh: str | None = None,
    ) -> catalog.CollectionRecord:
        out = self.api.post(
            "/collections",
            {
                "manifest_text": manifest.format(),
                "file_md5s": None if file_md5s is None else dict(file_md5s),
                "block_writes": [{"md5": m, "size": s, "new": n} for m, s, n in writes],
            },
        )
        return self._stored("/collections", out, pdh)

    def _stored(self, path: str, out: object, pdh: str | None) -> catalog.CollectionRecord:
        """The record a controller answered a put with, ``pdh`` when known:
        an answer of another shape, or naming another collection, is an
        error (not a traceback, nor a put that seems done)."""
        if not (
            isinstance(out, dict)
            and isinstance(out.get("pdh"), str)
            and isinstance(out.get("size"), int)
            and isinstance(out.get("file_count"), int)
        ):
            raise WarehouseError(
                f"the controller at {self.api.url} answered POST {path} with "
                f"{str(out)[:80]!r}, not the collection it recorded"
            )
        if pdh is not None and out["pdh"] != pdh:
            raise CorruptDataError(
                f"the controller at {self.api.url} recorded {str(out['pdh'])[:80]!r} "
                f"for a put of {pdh}"
            )
        return catalog.CollectionRecord(
            out["pdh"], "", out["size"], out["file_count"], time.time(), self.user
        )

    def _spool(self) -> Spool:
        from warehouse.collection.spool import Spool  # a put's alone

        # The system's scratch directory ($TMPDIR): a client has no home of its own.
        try:
            return Spool()
        except OSError as e:
            raise os_error(e, "cannot make a put's scratch files") from None

    def _record_spool(self, spool: Spool, writes: BlockWrites) -> catalog.CollectionRecord:
        # Streamed from the spool's files: neither the manifest nor the
        # listing is held whole here, nor on the controller.
        text_size, listing_size = spool.written()
        with _again(writes) as rows:
            body = _SpoolBody(spool, rows)
            try:
                out = self.api.post_stream(
                    "/collections/text",
                    body,
                    text_size + listing_size + body.writes_size(),
                    manifest_size=text_size,
                    listing_size=listing_size,
                )
            except MethodNotAllowed:
                # A controller older than the streamed put: the whole manifest, as before.
                listing = json.loads(spool.listing())
                from warehouse.manifest import Manifest

                return self._record(Manifest.parse(spool.text()), listing, rows, spool.pdh)
        return self._stored("/collections/text", out, spool.pdh)

    def _record_text_spool(self, spool: Spool) -> catalog.CollectionRecord:
        # Streamed as a put's own text, with no listing (listing_size 0) and
        # no block writes: the controller checks it a line at a time.
        text_size, _ = spool.written()
        try:
            out = self.api.post_stream(
                "/collections/text",
                _SpoolBody(spool, (), listing=False),
                text_size,
                manifest_size=text_size,
                listing_size=0,
            )
        except MethodNotAllowed:
            # A controller older than the streamed put: the whole manifest, as before.
            from warehouse.manifest import Manifest

            return self._record(Manifest.parse(spool.text()), None, (), spool.pdh)
        return self._stored("/collections/text", out, spool.pdh)

    def _collection(self, pdh: str) -> tuple[Manifest, dict[str, str] | None]:
        try:
            return self._own_collection(pdh)
        except NotFoundError as missing:
            # Held on another cluster? Its manifest's +K hints then send each
            # block read there (docs/clusters.md).
            for name in self.clusters:
                try:
                    return self.other(name)._own_collection(pdh)
                except NotFoundError:
                    continue
                except WarehouseError as e:
                    missing.add_note(f"cluster {name}: {e}")
            raise

    def _own_collection(self, pdh: str) -> tuple[Manifest, dict[str, str] | None]:
        from warehouse.manifest import Manifest

        path = f"/collections/{pdh}"
        # The manifest and its listing in JSON, in memory: its size bounds the
        # manifest (escaped: twice), not the listing (REPLY_LIMIT, or as much).
        bound = 2 * _signed_bound(pdh) + REPLY_LIMIT
        out = self.api.call_object("GET", path, limit=bound)
        text = out.get("manifest_text")
        if not isinstance(text, str):
            raise WarehouseError(
                f"the controller at {self.url} answered GET {path} without a manifest_text"
            )
        manifest = Manifest.parse(text)
        self._check_pdh(pdh, manifest.pdh)
        return manifest, out.get("file_md5s")

    def _check_pdh(self, asked: str, got: str) -> None:
        """A PDH names its content: a manifest of another is never taken for it."""
        if got != asked:
            raise CorruptDataError(
                f"the controller at {self.url} answered collection {asked} "
                f"with a manifest whose PDH is {got}"
            )

    def _collection_text(self, pdh: str) -> tuple[StoredText, Digests | None] | None:
        """The manifest as the controller stores it (normalized), signed, and
        the caller's own listing read in manifest order: a get goes through
        them stream by stream. Both are written to unnamed scratch files as
        they arrive and read back a piece at a time, so neither is held.
        None where the controller does not hold it that way (another
        cluster's, stored otherwise, or an older controller without these
        requests): the caller asks for the whole manifest."""
        text = self._signed_text(pdh)
        if text is None:
            return None
        try:
            return text, self._listing(pdh)
        except BaseException:
            text.close()
            raise

    def stored_text(self, key: str | Key) -> StoredText | None:
        """The manifest as the controller stores it (see ``_collection_text``),
        in a scratch file: ``wh ls`` and ``wh manifest`` go through it a line
        or a piece at a time, with no file table."""
        return self._signed_text(self.resolve(key))

    def _signed_text(self, pdh: str) -> StoredText | None:
        """The collection's normalized, signed text written to an unnamed
        scratch file as it arrives, checked a line at a time against ``pdh``;
        None where the controller does not hold it that way."""
        from warehouse.collection.storedtext import StoredText
        from warehouse.manifest.normal import normal_pdh

        text = StoredText()
        try:
            try:
                sent = self.api.get_into(
                    f"/collections/{pdh}/manifest", text.write, _signed_bound(pdh)
                )
            except (NotFoundError, ConflictError):
                sent = False
            if not sent or (got := normal_pdh(text.done())) is None:
                # Not normalized: the whole manifest is asked for (and checked).
                text.close()
                return None
            self._check_pdh(pdh, got)
            return text
        except BaseException:
            text.close()
            raise

    def _listing(self, pdh: str) -> OrderedListing | None:
        """The caller's own listing, from a scratch file a piece at a time."""
        from warehouse.collection.listings import ordered_listing, parse_listing
        from warehouse.collection.storedtext import StoredText

        listing = StoredText()
        first = last = b""  # its first and last bytes but blanks

        def write(piece: bytes) -> None:
            nonlocal first, last
            listing.write(piece)
            kept = piece.strip()
            if kept:
                first = first or kept[:1]
                last = kept[-1:]

        where = f"the controller at {self.api.url} answered the listing of {pdh} with"
        try:
            bound = _listing_bound(pdh)
            if not self.api.get_into(f"/collections/{pdh}/listing", write, bound):
                listing.close()
                return None
            # Told before any file is listed: what is not an object is no listing.
            if first + last != b"{}":
                raise WarehouseError(f"{where} no JSON object of paths and MD5s")
        except BaseException:
            listing.close()
            raise
        parts = listing.done().decoded_pieces(_LISTING_PART)

        def whole() -> str:
            try:
                text = listing.read().decode()
            except UnicodeDecodeError:
                raise WarehouseError(f"{where} bytes that are not UTF-8") from None
            try:
                parse_listing(text)
            except CorruptDataError:
                raise WarehouseError(f"{where} no JSON object of paths and MD5s") from None
            return text

        # A listing in another order is read whole into a table, as before.
        return ordered_listing(next(parts, ""), parts, whole, close=listing.close)

    def holds(self, pdh: str) -> bool:
        """Whether this cluster itself records the collection."""
        try:
            self._own_collection(pdh)
        except NotFoundError:
            return False
        return True

    def _copies(self) -> int:
        seen = self.store.stats.min_copies_seen
        return self.store.replication if seen is None else seen

    # -- names ---------------------------------------------------------------

    def set_name(
        self, name: str, pdh: str, *, expect: str | None, create: bool = False
    ) -> catalog.NameRecord:
        out = self.api.put(
            f"/names/{_name_path(name)}", {"pdh": pdh, "expect": expect, "create": create}
        )
        return catalog.NameRecord(**out)

    def get_name(self, name: str) -> catalog.NameRecord:
        return catalog.NameRecord(**self.api.get(f"/names/{_name_path(name)}"))

    def list_names(self, prefix: str = "") -> list[catalog.NameRecord]:
        return [catalog.NameRecord(**r) for r in self.api.get("/names", prefix=prefix)]

    def name_log(self, name: str) -> list[catalog.NameChange]:
        return [catalog.NameChange(**c) for c in self.api.get(f"/names/{_name_path(name)}/log")]

    def remove_name(self, name: str, *, expect: str) -> catalog.NameChange:
        path = f"/names/{_name_path(name)}"
        return catalog.NameChange(**self.api.call("DELETE", path, params={"expect": expect}))

    def name_writers(self, name: str) -> list[str]:
        return [str(u) for u in self.api.get(f"/names/{_name_path(name)}/writers")]

    def add_name_writer(self, name: str, writer: str) -> None:
        path = f"/names/{_name_path(name)}/writers"
        self.api.post(path, {"user": check_writer(writer)})

    def remove_name_writer(self, name: str, writer: str) -> None:
        path = f"/names/{_name_path(name)}/writers/{quote(check_writer(writer), safe='')}"
        self.api.call("DELETE", path)

    def accounting(self, since: float = 0.0) -> list[catalog.AccountingRow]:
        return [catalog.AccountingRow(**r) for r in self.api.get("/accounting", since=since)]


def _signed_bound(pdh: str) -> int:
    """The most bytes a signed text of ``pdh`` can take: its portable
    length (in the PDH) with a signature hint on each locator, which at most
    about triples a locator's length (docs/server.md)."""
    return 4 * int(pdh.partition("+")[2] or 0) + (1 << 20)


def _listing_bound(pdh: str) -> int:
    """The most bytes of a listing of ``pdh`` read (to a scratch file, not
    memory). Each file's full path is in it, so it may be far longer than
    the manifest (many files in one deep directory); what a put could send
    is bounded by the controller's --max-spooled-body, 4 GiB by default."""
    return max(4 << 30, 64 * int(pdh.partition("+")[2] or 0) + (1 << 20))


# What of a listing is read at once (as the catalog's parts: docs/storage.md).
_LISTING_PART = 1 << 20


class _SpoolBody:
    """A streamed put's body read from its spool, a piece at a time, each
    time it is iterated: the manifest text, the listing, the block writes.
    It is iterated again when a busy controller asks for it again, so
    ``writes`` must be re-iterable (see ``_again``): its accounting lines
    (about 60 bytes a block, a block per directory of small files) are made
    as they are sent, never held together."""

    def __init__(self, spool: Spool, writes: BlockWrites, *, listing: bool = True) -> None:
        self._spool = spool
        self.writes = writes
        self._listing = listing

    def writes_size(self) -> int:
        """The bytes of the accounting lines, counted without making them."""
        # Each line is "MD5 SIZE NEW\n": the MD5 and size in ASCII, NEW 0 or 1.
        return sum(len(m) + len(str(s)) + 4 for m, s, _ in self.writes)

    def __iter__(self) -> Iterator[bytes]:
        yield from self._spool.text_pieces(_PIECE)
        if self._listing:
            for piece in self._spool.listing_pieces(_PIECE):
                yield piece.encode()
        lines: list[str] = []
        for m, s, n in self.writes:
            lines.append(f"{m} {s} {int(n)}\n")
            if len(lines) == _LINES:
                yield "".join(lines).encode()
                lines.clear()
        if lines:
            yield "".join(lines).encode()


@contextmanager
def _again(writes: BlockWrites) -> Iterator[BlockWrites]:
    """``writes`` as rows that can be read more than once, while in the
    ``with``: a put's own (a list, or its block log read back from a scratch
    file) as they are; a one-shot iterator is first written to a block log,
    which spills to a scratch file past a few thousand rows, closed at the
    end of the ``with``."""
    if not isinstance(writes, Iterator):
        yield writes
        return
    # A put's alone: not loaded by a command that only reads.
    from warehouse.blocks import Locator
    from warehouse.blocks.store import StoredBlock
    from warehouse.collection.scratch import BlockLog

    with closing(BlockLog()) as log:
        for md5, size, new in writes:
            log.append(StoredBlock(Locator(md5, size), new))
        yield log.rows()


# Accounting lines sent together: 4096 make about 240 KB.
_LINES = 4096
# What a put's body is sent in pieces of.
_PIECE = 1 << 20


def _name_path(name: str) -> str:
    """``name`` checked, for a URL path: unchecked, ``x?y`` or ``x#y`` reached
    the name ``x`` and ``a/b`` another route."""
    return quote(catalog.check_name(name), safe="")
