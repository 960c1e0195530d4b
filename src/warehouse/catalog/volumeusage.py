"""The catalog's ``volume_usage`` rows: folded from an embedded home's
spool (``volumespool``) and written by the controller for its keep servers; read by ``wh usage
--volumes`` (docs/usage.md, "Per volume")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import sqlalchemy as sa

from warehouse.catalog.db import connect, duplicate_key, write
from warehouse.catalog.schema import volume_usage
from warehouse.catalog.volumespool import SpoolRecord, read_spool, unlink_records
from warehouse.faults import fault_point
from warehouse.usage.volumes import VolumeRow

__all__ = ["fold_spool", "record_volume_rows", "volume_rows"]


def _latest(conn: sa.Connection, volume: str) -> int | None:
    """The bytes the volume held at its newest sample (None: none yet)."""
    row = conn.execute(
        sa.select(volume_usage.c.stored_bytes)
        .where(volume_usage.c.volume == volume, volume_usage.c.stored_bytes.is_not(None))
        .order_by(volume_usage.c.at.desc(), volume_usage.c.id.desc())
        .limit(1)
    ).first()
    return None if row is None else int(row[0])


def fold_spool(engine: sa.Engine, home: Path, held: Callable[[str], int | None]) -> int:
    """Fold the home's spooled records into ``volume_usage``, each once
    (docs/usage.md, "The spool"); the number folded by this call.

    A record already in the catalog (another fold's, or one of a fold
    stopped after its commit) is only removed. A row's bytes held are the
    newest sample's plus those its process added; for a volume never
    sampled, ``held(volume)`` (a whole listing, after every spooled write:
    the records are counted back from it), None if this process cannot
    list that volume."""
    records = read_spool(home)
    if not records:
        return 0
    try:
        folded = _fold(engine, records, held)
    except sa.exc.IntegrityError as e:
        if not duplicate_key(e):
            raise
        # A fold racing ours (PostgreSQL) inserted one first: once more,
        # now seeing its rows.
        folded = _fold(engine, records, held)
    fault_point("volume-usage-folded")
    unlink_records(records)
    return folded


def _fold(engine: sa.Engine, records: list[SpoolRecord], held: Callable[[str], int | None]) -> int:
    walked: dict[str, int | None] = {}
    with connect(engine) as conn:
        for volume in {r.volume for r in records}:
            if _latest(conn, volume) is None:
                walked[volume] = held(volume)  # outside the write transaction
    with write(engine) as conn:
        ids = [r.record for r in records]
        done: set[str] = set()
        for i in range(0, len(ids), 500):
            found = sa.select(volume_usage.c.record).where(
                volume_usage.c.record.in_(ids[i : i + 500])
            )
            done.update(str(x) for x in conn.scalars(found))
        todo = [r for r in records if r.record not in done]
        stored: dict[str, int | None] = {}
        for volume in {r.volume for r in todo}:
            latest = _latest(conn, volume)
            if latest is None and walked.get(volume) is not None:
                # Counted back: the listing holds every record's bytes.
                gained = sum(r.taken.added_bytes for r in todo if r.volume == volume)
                latest = int(walked[volume] or 0) - gained
            stored[volume] = latest
        rows = []
        for r in todo:
            now = stored[r.volume]
            if now is not None:
                now += r.taken.added_bytes
                stored[r.volume] = now
            rows.append(
                {
                    "volume": r.volume,
                    "at": r.at,
                    "stored_bytes": None if now is None else max(0, now),
                    "gets": r.taken.gets,
                    "puts": r.taken.puts,
                    "lists": r.taken.lists,
                    "deletes": r.taken.deletes,
                    "record": r.record,
                }
            )
        if rows:
            conn.execute(volume_usage.insert(), rows)
    return len(rows)


def record_volume_rows(engine: sa.Engine, rows: Sequence[VolumeRow]) -> None:
    """Rows as a keep server sent them (its own samples of the bytes held)."""
    if not rows:
        return
    with write(engine) as conn:
        conn.execute(
            volume_usage.insert(),
            [
                {
                    "volume": r.volume,
                    "at": r.at,
                    "stored_bytes": r.stored_bytes,
                    "gets": r.gets,
                    "puts": r.puts,
                    "lists": r.lists,
                    "deletes": r.deletes,
                }
                for r in rows
            ],
        )


def volume_rows(engine: sa.Engine, since: float | None) -> list[VolumeRow]:
    """The rows at ``since`` or later, and each volume's last sample before it."""
    c = volume_usage.c
    cols = (c.volume, c.at, c.stored_bytes, c.gets, c.puts, c.lists, c.deletes)
    with connect(engine) as conn:
        if since is None:
            return [VolumeRow(*r) for r in conn.execute(sa.select(*cols).order_by(c.at, c.id))]
        rows = [
            VolumeRow(*r)
            for r in conn.execute(sa.select(*cols).where(c.at >= since).order_by(c.at, c.id))
        ]
        before = (
            sa.select(c.volume, sa.func.max(c.at).label("at"))
            .where(c.at < since, c.stored_bytes.is_not(None))
            .group_by(c.volume)
            .subquery()
        )
        opening = conn.execute(
            sa.select(*cols)
            .join(before, sa.and_(before.c.volume == c.volume, before.c.at == c.at))
            .where(c.stored_bytes.is_not(None))
        )
        # Only its bytes held: its requests were before the window.
        rows += [VolumeRow(r[0], r[1], r[2], 0, 0, 0, 0) for r in opening]
    return rows
