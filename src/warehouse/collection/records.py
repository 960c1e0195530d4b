"""Collections in the catalog: a manifest's text stored as blocks, plus a row.

Shared by the embedded warehouse and the controller, which differ only in
the block store they hand in.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from warehouse import catalog
from warehouse.blocks import MAX_BLOCK_SIZE, Locator
from warehouse.blocks.locator import EMPTY_LOCATOR
from warehouse.blocks.store import BlockStore, LocalBlockStore
from warehouse.collection.listings import (
    NotWellFormed,
    OrderedListing,
    listing_pieces,
    ordered_listing,
    parse_listing,
)
from warehouse.collection.reader import stored_text_damage
from warehouse.collection.spool import Spool
from warehouse.collection.storedtext import StoredText
from warehouse.errors import CorruptDataError, NotFoundError, UsageError, WarehouseError
from warehouse.faults import fault_point
from warehouse.manifest import Manifest
from warehouse.manifest.normal import Ancestors, NormalOrder, TooManyNames, is_marker, portable_line
from warehouse.manifest.parse import ManifestError, parse_raw_line

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = [
    "copy_stored_text",
    "listing_of",
    "load_manifest",
    "load_manifest_text",
    "load_manifests",
    "load_normal_text",
    "load_stored_text",
    "manifest_from_blocks",
    "spool_normal_text",
    "store_manifest",
    "store_portable",
    "store_spooled",
]


def store_manifest(
    store: BlockStore,
    engine: sa.Engine,
    manifest: Manifest,
    user: str,
    file_md5s: Mapping[str, str] | None = None,
) -> catalog.CollectionRecord:
    """Store the portable text of ``manifest`` (normalized) and record the collection.

    The caller has checked that every block it lists is stored. ``file_md5s``,
    if well formed, is kept as ``user``'s own listing (shown to nobody else).
    """
    manifest = manifest.normalized()
    record = store_portable(
        store,
        engine,
        manifest.pdh,
        manifest.portable_text().encode(),
        size=manifest.size,
        file_count=manifest.file_count(),
        user=user,
    )
    if isinstance(file_md5s, Mapping):
        from warehouse.catalog.records import record_listing_parts  # SQLAlchemy: loaded when used

        # Made and recorded a piece at a time, in manifest order, as a put's
        # spool records it: a listing of a million files is 55 MB. One not
        # well formed is undone with its transaction and kept by nobody.
        pieces = partial(listing_pieces, manifest, file_md5s, LISTING_PIECE)
        with contextlib.suppress(NotWellFormed):
            record_listing_parts(engine, manifest.pdh, user, pieces)
    return record


def store_spooled(
    store: BlockStore, engine: sa.Engine, spool: Spool, user: str, *, listing: bool = True
) -> catalog.CollectionRecord:
    """Record the collection a put wrote to ``spool``: its manifest text is
    stored as blocks a block at a time, and its listing kept as ``user``'s own
    (``listing``: a put of manifest text has none, and records none)."""
    if not spool.portable:  # hints in the text (no local store gives any)
        return store_manifest(store, engine, Manifest.parse(spool.text()), user, None)
    # Ten million files make 152 MB of text: stored a piece at a time.
    fd, ranges = spool.text_ranges(MAX_BLOCK_SIZE)
    locators = [store.put_range(fd, offset, size) for offset, size in ranges]
    if not locators:
        locators.append(store.put(b"").locator)
    store.flush()  # nothing is recorded before its blocks are durable
    fault_point("put-recording")  # every block stored, nothing recorded
    record = catalog.add_collection(
        engine,
        spool.pdh,
        " ".join(str(loc.without_hints()) for loc in locators),
        spool.size,
        spool.file_count,
        user,
    )
    if not listing:
        return record
    from warehouse.catalog.records import record_listing_parts  # SQLAlchemy: loaded when used

    # A piece at a time: a listing of ten million files is half a gigabyte.
    record_listing_parts(engine, spool.pdh, user, lambda: spool.listing_pieces(LISTING_PIECE))
    return record


def spool_normal_text(
    spool: Spool,
    f: BinaryIO,
    limit: int,
    stored: Callable[[Locator], bool] | None = None,
) -> bytes | None:
    """Copy manifest text from ``f`` into ``spool`` a line at a time, each
    line checked as it comes: None once all of it is in normalized form
    (the spool then holds it, as a put's own). Else the whole text (what was
    read, and the rest of ``f``): the caller parses and normalizes it whole,
    which reports any fault in it as a whole parse does. Over ``limit``
    bytes: UsageError. ``stored``: whether a block is stored (NotFoundError
    for the first that is not, once the whole text is read)."""
    order = NormalOrder()
    ancestors = Ancestors(limit)
    cache: dict[str, Locator] = {}
    known: set[str] = set()  # blocks found stored (bounded as ``cache`` is)
    missing: str | None = None
    read = number = 0
    while data := f.readline(limit - read + 1):
        read += len(data)
        if read > limit:
            raise UsageError(f"manifest is over {limit} bytes")
        number += 1
        line = _normal_line(number, data, order, ancestors, cache)
        if line is None:  # not normalized, or at fault: parsed whole, as before
            return _whole(spool, data, f, limit)
        text, locators, files, size = line
        if stored is not None and missing is None:
            if len(known) > _KNOWN:
                known.clear()
            for locator in locators:
                if locator.key not in known and not locator.is_empty:
                    if not stored(locator):
                        missing = locator.key
                        break
                    known.add(locator.key)
        hinted = any(loc.hints for loc in locators)
        portable = (portable_line(text, locators) + "\n").encode() if hinted else data
        spool.add_line(portable, files, size, data if hinted else None)
    if missing is not None:
        raise NotFoundError(f"block {missing} of the manifest is not stored")
    return None


def _normal_line(
    number: int,
    data: bytes,
    order: NormalOrder,
    ancestors: Ancestors,
    cache: dict[str, Locator],
) -> tuple[str, tuple[Locator, ...], int, int] | None:
    """Line ``number`` (with its newline) parsed and checked: its text,
    locators, files and bytes; None if it is not in normalized form or at
    fault in any way (the whole parse then says how)."""
    if not data.endswith(b"\n"):
        return None
    if len(cache) > _KNOWN:
        cache.clear()
    try:
        text, (name, locators, segments) = parse_raw_line(number, data[:-1], cache)
    except (ManifestError, UnicodeDecodeError):
        return None
    sums = order.line(text, name, locators, segments)
    if sums is None:
        return None
    names = set() if is_marker(segments[0][2]) else {s[2] for s in segments}
    try:
        if ancestors.enter(number, name, names) is not None:
            return None
    except TooManyNames:
        return None
    return text, locators, sums[0], sums[1]


def _whole(spool: Spool, data: bytes, f: BinaryIO, limit: int) -> bytes:
    """The text spooled so far, ``data`` and the rest of ``f`` (the whole
    at most ``limit`` bytes)."""
    text = bytearray(spool.text())
    text += data
    while chunk := f.read(min(1 << 24, limit - len(text) + 1)):
        text += chunk
        if len(text) > limit:
            raise UsageError(f"manifest is over {limit} bytes")
    return bytes(text)


# Blocks known stored, and locators parsed, kept at most (then forgotten).
_KNOWN = 100_000

# The most of a listing a put holds at once while recording it.
LISTING_PIECE = 1 << 20


def store_portable(
    store: BlockStore,
    engine: sa.Engine,
    pdh: str,
    text: bytes,
    *,
    size: int,
    file_count: int,
    user: str,
) -> catalog.CollectionRecord:
    """Store ``text``, the portable normalized manifest of ``pdh``, and record it."""
    locators = [
        store.put(text[i : i + MAX_BLOCK_SIZE]).locator
        for i in range(0, max(len(text), 1), MAX_BLOCK_SIZE)
    ]
    store.flush()  # nothing is recorded before its blocks are durable
    return catalog.add_collection(
        engine,
        pdh,
        " ".join(str(loc.without_hints()) for loc in locators),
        size,
        file_count,
        user,
    )


def _text_pdh(text: bytes) -> str:
    return f"{hashlib.md5(text).hexdigest()}+{len(text)}" if text else EMPTY_LOCATOR.key


def _checked(text: bytes, pdh: str) -> Manifest:
    """The manifest stored as ``text``, checked to be the collection ``pdh``.

    What is stored is the portable text itself, so its hash is the PDH and
    formatting every stream again to hash it (a third of reading a million
    files' manifest) is not needed; text stored any other way is hashed the
    long way.
    """
    with stored_text_damage(pdh):
        manifest = Manifest.parse(text)
    if _text_pdh(text) == pdh:
        manifest.__dict__["pdh"] = pdh  # the cached property, known already
    elif manifest.pdh != pdh:
        raise CorruptDataError(f"the stored manifest of {pdh} hashes to {manifest.pdh}")
    return manifest


def load_manifest_text(store: BlockStore, engine: sa.Engine, pdh: str) -> bytes | None:
    """The stored text of a collection's manifest, if it hashes to ``pdh``.

    What is stored is the portable normalized text, so its MD5 and length are
    the PDH; None if they are not (text stored some other way: the caller
    parses it whole). Each block is verified as it is read.
    """
    text = _stored_text(store, pdh, catalog.get_collection(engine, pdh).manifest_blocks)
    return text if _text_pdh(text) == pdh else None


def load_manifest(
    store: BlockStore, engine: sa.Engine, pdh: str, user: str | None
) -> tuple[Manifest, dict[str, str] | None]:
    """A collection's manifest (checked against its PDH) and ``user``'s own
    listing of its file digests, if that user recorded one (None: nobody's)."""
    record = catalog.get_collection(engine, pdh)
    return manifest_from_blocks(store, pdh, record.manifest_blocks), _listing(engine, pdh, user)


def _listing(engine: sa.Engine, pdh: str, user: str | None) -> dict[str, str] | None:
    """``user``'s own listing of the collection's file digests (None: nobody's)."""
    return parse_listing(listing_of(engine, pdh, user))


def listing_of(engine: sa.Engine, pdh: str, user: str | None) -> str | None:
    """``user``'s own listing as stored (JSON text), or None: nobody's."""
    if user is None:
        return None
    from warehouse.catalog.records import get_listing  # SQLAlchemy: loaded when used

    return get_listing(engine, pdh, user)


def load_stored_text(
    store: BlockStore, engine: sa.Engine, pdh: str, directory: Path | None
) -> StoredText | None:
    """Like ``load_manifest_text``, but the text is copied a piece at a time
    into an unnamed scratch file in ``directory``, not held: each block is
    hashed as it is copied and verified before any of it is used, and the
    whole text's MD5 and length are checked against ``pdh``. The caller
    closes what it gets."""
    from warehouse.catalog.records import collection_summary  # SQLAlchemy: loaded when used

    # Not get_collection: its file digests can be megabytes, and are not needed.
    manifest_blocks = collection_summary(engine, pdh).manifest_blocks
    return copy_stored_text(store, pdh, manifest_blocks, directory)


def copy_stored_text(
    store: BlockStore, pdh: str, manifest_blocks: str, directory: Path | None
) -> StoredText | None:
    """``load_stored_text`` with the manifest's locators already read."""
    text = StoredText(directory)
    try:
        for stored in manifest_blocks.split():
            _copy_block(store, pdh, Locator.parse(stored), text.write)
        if text.done().pdh == pdh:
            return text
    except BaseException:
        text.close()
        raise
    text.close()
    return None


def _copy_block(
    store: BlockStore, pdh: str, locator: Locator, write: Callable[[bytes | memoryview], object]
) -> None:
    """One block of collection ``pdh``'s manifest to ``write``, verified."""
    try:
        if isinstance(store, LocalBlockStore):
            store.copy_block(locator, write)
        else:  # a store that reads blocks whole: one block held at a time
            write(store.get(locator, cache=False))
    except NotFoundError as e:
        raise CorruptDataError(f"a block of the manifest of {pdh} is missing: {e}") from None


def load_normal_text(
    store: BlockStore,
    engine: sa.Engine,
    pdh: str,
    user: str | None,
    directory: Path | None = None,
) -> tuple[StoredText, OrderedListing | None] | None:
    """A collection's stored manifest text, if it hashes to ``pdh`` (so it is
    the normalized text), in a scratch file in ``directory`` (see
    ``load_stored_text``), and ``user``'s own listing, read in manifest order
    (no table of it); None for text stored some other way (the caller parses
    it whole)."""
    text = load_stored_text(store, engine, pdh, directory)
    if text is None:
        return None
    try:
        return text, _ordered_listing(engine, pdh, user)
    except BaseException:
        text.close()
        raise


def _ordered_listing(engine: sa.Engine, pdh: str, user: str | None) -> OrderedListing | None:
    """``user``'s own listing read a part at a time (a listing of 200,000
    files is 14 MB), in manifest order; None: nobody's."""
    if user is None:
        return None
    from warehouse.catalog.records import get_listing_in_parts  # SQLAlchemy: loaded when used

    found = get_listing_in_parts(engine, pdh, user)
    if found is None:
        return None
    first, rest = found
    return ordered_listing(first, rest, lambda: listing_of(engine, pdh, user))


def manifest_from_blocks(store: BlockStore, pdh: str, manifest_blocks: str) -> Manifest:
    """The manifest of recorded collection ``pdh`` from its blocks (their
    locators as the catalog keeps them), checked against its PDH."""
    return _checked(_stored_text(store, pdh, manifest_blocks), pdh)


def _stored_text(store: BlockStore, pdh: str, manifest_blocks: str) -> bytes:
    """The text of recorded collection ``pdh``'s manifest; each block verified as read."""
    try:
        return b"".join(bytes(store.get(Locator.parse(s))) for s in manifest_blocks.split())
    except NotFoundError as e:
        # The collection is recorded, so a block of it missing is damage (5), not "no such" (4).
        raise CorruptDataError(f"a block of the manifest of {pdh} is missing: {e}") from None


def load_manifests(
    store: BlockStore, engine: sa.Engine, pdhs: Iterable[str]
) -> dict[str, Manifest]:
    """Many collections' manifests, their rows read in one query per 500 (a
    workflow's reuse checks and combined inputs read hundreds at a time).

    A collection not recorded, or whose manifest is missing or damaged, is
    left out.
    """
    import sqlalchemy as sa  # loaded when used, as above

    from warehouse.catalog.db import connect
    from warehouse.catalog.schema import collections

    wanted = list(dict.fromkeys(pdhs))
    blocks: dict[str, str] = {}
    with connect(engine) as conn:
        for i in range(0, len(wanted), 500):
            query = sa.select(collections.c.pdh, collections.c.manifest_blocks).where(
                collections.c.pdh.in_(wanted[i : i + 500])
            )
            blocks.update((r.pdh, r.manifest_blocks) for r in conn.execute(query))
    out: dict[str, Manifest] = {}
    for pdh, text_blocks in blocks.items():
        try:
            text = b"".join(bytes(store.get(Locator.parse(s))) for s in text_blocks.split())
            out[pdh] = _checked(text, pdh)
        except WarehouseError:
            continue
    return out
