"""Collections and block-write accounting rows."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator

import sqlalchemy as sa

from warehouse.catalog.db import (
    by_code_point,
    connect,
    duplicate_key,
    insert_ignoring_duplicates,
    write,
)
from warehouse.catalog.schema import (
    block_writes,
    collected,
    collection_holders,
    collection_listing_parts,
    collection_listings,
    collections,
)
from warehouse.catalog.values import IN_PARTS, AccountingRow, CollectionRecord
from warehouse.errors import NotFoundError

__all__ = [
    "AccountingRow",
    "CollectionRecord",
    "accounting",
    "add_collection",
    "add_collection_in",
    "collection_summary",
    "get_collection",
    "get_listing",
    "get_listing_in_parts",
    "list_collections",
    "record_block_writes",
    "record_listing",
    "record_listing_parts",
    "require_collection",
]


def add_collection(
    engine: sa.Engine,
    pdh: str,
    manifest_blocks: str,
    size: int,
    file_count: int,
    user: str,
    file_md5s: str | None = None,
) -> CollectionRecord:
    """Record a collection; recording one that exists fills in missing digests
    and makes it count as recorded now (a root for GC's TTL, as any put).

    Recording one GC has collected is storing it again: it is no longer
    marked collected.
    """
    record = CollectionRecord(pdh, manifest_blocks, size, file_count, time.time(), user, file_md5s)
    try:
        return _add_collection(engine, record)
    except sa.exc.IntegrityError as e:
        # Recorded by another writer between our read and our insert
        # (PostgreSQL): both succeed, and the first record stands.
        if not duplicate_key(e):
            raise
        return _add_collection(engine, record)


def _add_collection(engine: sa.Engine, record: CollectionRecord) -> CollectionRecord:
    with write(engine) as conn:
        _hold(conn, record)
        found = _recorded_again(conn, record)
        if found is not None:
            return found
        conn.execute(collections.insert().values(**_row(record)))
    return record


def _hold(conn: sa.Connection, record: CollectionRecord) -> None:
    # Whoever records a collection held all its bytes: it manages it
    # (docs/permissions.md), whether or not it was the first.
    row = {"pdh": record.pdh, "user": record.created_by}
    insert_ignoring_duplicates(conn, collection_holders, [row], ["pdh", "user"])


def add_collection_in(conn: sa.Connection, record: CollectionRecord) -> None:
    """``add_collection`` inside the caller's write transaction (a workflow records
    its combined input with the jobs reading it: one commit). A row another
    writer inserted meanwhile (PostgreSQL) stands, and the transaction goes on."""
    _hold(conn, record)
    if _recorded_again(conn, record) is None:
        insert_ignoring_duplicates(conn, collections, [_row(record)], ["pdh"])


# A recording again this much later refreshes a collection's time (a TTL may
# be seconds); a burst of recordings of one collection writes its row once.
_RECORDED_AGAIN = 1.0


def _recorded_again(conn: sa.Connection, record: CollectionRecord) -> CollectionRecord | None:
    """The recorded row of ``record.pdh`` brought up to date (digests, GC), if any."""
    pdh, file_md5s = record.pdh, record.file_md5s
    found = conn.execute(sa.select(collections).where(collections.c.pdh == pdh)).first()
    if found is None:
        return None
    values: dict[str, object] = {}
    if found.file_md5s is None and file_md5s is not None:
        values["file_md5s"] = file_md5s
    if conn.execute(collected.delete().where(collected.c.pdh == pdh)).rowcount:
        values["created_at"] = record.created_at
    elif found.created_at < record.created_at - _RECORDED_AGAIN:
        # A put of the same data again, which may reuse old blocks without
        # rewriting them (its cache), is a recording like the first: GC keeps
        # it as a root for the TTL from now.
        values["created_at"] = record.created_at
    if values:
        conn.execute(collections.update().where(collections.c.pdh == pdh).values(**values))
    return CollectionRecord(**{**found._mapping, **values})


def _row(r: CollectionRecord) -> dict[str, object]:
    return {f: getattr(r, f) for f in CollectionRecord.__slots__}


def get_collection(engine: sa.Engine, pdh: str) -> CollectionRecord:
    with connect(engine) as conn:
        row = conn.execute(sa.select(collections).where(collections.c.pdh == pdh)).first()
    if row is None:
        raise NotFoundError(f"no collection {pdh}")
    return CollectionRecord(**row._mapping)


# Every column but the file digests, which can be megabytes a row.
_SUMMARY = [c for c in collections.c if c.name != "file_md5s"]


_SUMMARY_OF = sa.select(*_SUMMARY).where(collections.c.pdh == sa.bindparam("pdh"))


def collection_summary(engine: sa.Engine, pdh: str) -> CollectionRecord:
    """``get_collection`` without the file digests (``file_md5s`` is None)."""
    with connect(engine) as conn:
        row = conn.execute(_SUMMARY_OF, {"pdh": pdh}).first()
    if row is None:
        raise NotFoundError(f"no collection {pdh}")
    return CollectionRecord(**row._mapping)


def require_collection(engine: sa.Engine, pdh: str) -> None:
    """Raise NotFoundError unless the collection is recorded (reads no digests)."""
    with connect(engine) as conn:
        found = conn.execute(sa.select(collections.c.pdh).where(collections.c.pdh == pdh))
        if found.first() is None:
            raise NotFoundError(f"no collection {pdh}")
        gone = conn.execute(sa.select(collected.c.pdh).where(collected.c.pdh == pdh)).first()
        if gone is not None:
            raise NotFoundError(
                f"collection {pdh} was collected by GC (its blocks may be gone): "
                "store its data again to use it"
            )


def list_collections(engine: sa.Engine, limit: int = 1000) -> list[CollectionRecord]:
    """The newest collections, without their file digests (``file_md5s`` is None)."""
    query = sa.select(*_SUMMARY).order_by(collections.c.created_at.desc()).limit(limit)
    with connect(engine) as conn:
        return [CollectionRecord(**r._mapping) for r in conn.execute(query)]


def record_listing(engine: sa.Engine, pdh: str, user: str, file_md5s: str) -> None:
    """Keep ``user``'s md5sum listing of ``pdh`` (replacing that user's earlier one)."""
    record_listing_parts(engine, pdh, user, lambda: (file_md5s,))


def record_listing_parts(
    engine: sa.Engine, pdh: str, user: str, pieces: Callable[[], Iterable[str]]
) -> None:
    """``record_listing`` of the JSON text ``pieces()`` yields in order.

    One piece is kept as one value, as always; more are kept one row each in
    ``collection_listing_parts`` (so no more than a piece is held at once),
    the listing's own row holding "{}". ``pieces`` is called again if the
    write is retried.
    """
    where = (collection_listings.c.pdh == pdh) & (collection_listings.c.user == user)
    parts_of = (collection_listing_parts.c.pdh == pdh) & (collection_listing_parts.c.user == user)
    for attempt in range(2):
        try:
            with write(engine) as conn:
                conn.execute(collection_listings.delete().where(where))
                conn.execute(collection_listing_parts.delete().where(parts_of))
                it = iter(pieces())
                first = next(it, "")
                second = next(it, None)
                row = {"pdh": pdh, "user": user, "recorded_at": time.time()}
                whole = first if second is None else IN_PARTS
                conn.execute(collection_listings.insert().values(**row, file_md5s=whole))
                if second is None:
                    return
                for part, text in enumerate((first, second), 0):
                    conn.execute(_part(pdh, user, part, text))
                del first, second
                for part, text in enumerate(it, 2):
                    conn.execute(_part(pdh, user, part, text))
            return
        except sa.exc.IntegrityError as e:
            # The same user recording the same PDH twice at once (PostgreSQL).
            if not duplicate_key(e) or attempt:
                raise


def _part(pdh: str, user: str, part: int, text: str) -> sa.Insert:
    values = {"pdh": pdh, "user": user, "part": part, "text": text}
    return collection_listing_parts.insert().values(**values)


def get_listing(engine: sa.Engine, pdh: str, user: str) -> str | None:
    """``user``'s own listing of ``pdh``; nobody else's is ever returned."""
    c = collection_listings.c
    p = collection_listing_parts.c
    with connect(engine) as conn:
        found = conn.execute(
            sa.select(c.file_md5s).where((c.pdh == pdh) & (c.user == user))
        ).scalar()
        if found == IN_PARTS:
            parts = conn.execute(
                sa.select(p.text).where((p.pdh == pdh) & (p.user == user)).order_by(p.part)
            ).scalars()
            found = "".join(parts) or found
    return None if found is None else str(found)


def get_listing_in_parts(
    engine: sa.Engine, pdh: str, user: str
) -> tuple[str, Iterator[str]] | None:
    """``get_listing`` a part at a time: its first part (or the whole of a
    listing kept as one value) and an iterator of the others, each read when
    asked for. The parts end early if the listing is recorded again meanwhile
    (a reader then finds the files left out of it nowhere, and reads the
    listing again whole)."""
    c = collection_listings.c
    mine = (c.pdh == pdh) & (c.user == user)
    with connect(engine) as conn:
        row = conn.execute(sa.select(c.file_md5s, c.recorded_at).where(mine)).first()
        if row is None:
            return None
        if row.file_md5s != IN_PARTS:
            return str(row.file_md5s), iter(())
        first = _listing_part(conn, pdh, user, 0, row.recorded_at)
    if first is None:
        return str(row.file_md5s), iter(())

    def rest() -> Iterator[str]:
        for part in itertools.count(1):
            with connect(engine) as conn:
                text = _listing_part(conn, pdh, user, part, row.recorded_at)
            if text is None:
                return
            yield text

    return first, rest()


def _listing_part(
    conn: sa.Connection, pdh: str, user: str, part: int, recorded_at: float
) -> str | None:
    """Part ``part`` of the listing recorded at ``recorded_at``; None past the
    last, or if the listing was recorded again since."""
    c = collection_listings.c
    p = collection_listing_parts.c
    query = (
        sa.select(p.text)
        .join(collection_listings, (c.pdh == p.pdh) & (c.user == p.user))
        .where((p.pdh == pdh) & (p.user == user) & (p.part == part))
        .where(c.recorded_at == recorded_at)
    )
    found = conn.execute(query).scalar()
    return None if found is None else str(found)


# Accounting rows a statement inserts at most.
_WRITES_AT_ONCE = 2_000


def record_block_writes(
    engine: sa.Engine, user: str, writes: Iterable[tuple[str, int, bool]]
) -> int:
    """One accounting row per block write: (md5, size, whether it was new),
    all in one transaction, inserted ``_WRITES_AT_ONCE`` a statement (a put
    of a million small directories has a million rows: not one list)."""
    now = time.time()
    count = 0
    rows = ({"at": now, "user": user, "md5": m, "size": s, "new": n} for m, s, n in writes)
    batch = list(itertools.islice(rows, _WRITES_AT_ONCE))
    if not batch:
        return 0
    with write(engine) as conn:
        while batch:
            conn.execute(block_writes.insert(), batch)
            count += len(batch)
            batch = list(itertools.islice(rows, _WRITES_AT_ONCE))
    return count


def accounting(
    engine: sa.Engine,
    since: float = 0.0,
    *,
    user: str | None = None,
    after: str = "",
    limit: int | None = None,
) -> list[AccountingRow]:
    """Per user (only ``user``'s, when given), in code point order of names:
    block writes, how many were new, bytes sent and bytes newly stored; the
    users after the name ``after``, at most ``limit`` (None: all)."""
    bw = block_writes.c
    ordered = by_code_point(engine, bw.user)
    query = (
        sa.select(
            bw.user,
            sa.func.count(),
            sa.func.sum(sa.case((bw.new, 1), else_=0)),
            sa.func.sum(bw.size),
            sa.func.sum(sa.case((bw.new, bw.size), else_=0)),
        )
        .where(bw.at >= since)
        .group_by(bw.user)
        .order_by(ordered)
        .limit(limit)
    )
    if user is not None:
        query = query.where(bw.user == user)
    if after:
        query = query.where(ordered > after)
    with connect(engine) as conn:
        return [
            AccountingRow(u, int(c), int(n), int(b), int(bn))
            for u, c, n, b, bn in conn.execute(query)
        ]
