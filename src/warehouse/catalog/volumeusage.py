"""The catalog's ``volume_usage`` rows: written by an embedded warehouse as
it closes and by the controller for its keep servers; read by ``wh usage
--volumes`` (docs/usage.md, "Per volume")."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import sqlalchemy as sa

from warehouse.blocks.volumecounts import Taken
from warehouse.catalog.db import connect, write
from warehouse.catalog.schema import volume_usage
from warehouse.usage.volumes import VolumeRow

__all__ = ["record_taken", "record_volume_rows", "volume_rows"]


def _latest(conn: sa.Connection, volume: str) -> int | None:
    """The bytes the volume held at its newest sample (None: none yet)."""
    row = conn.execute(
        sa.select(volume_usage.c.stored_bytes)
        .where(volume_usage.c.volume == volume, volume_usage.c.stored_bytes.is_not(None))
        .order_by(volume_usage.c.at.desc(), volume_usage.c.id.desc())
        .limit(1)
    ).first()
    return None if row is None else int(row[0])


def record_taken(
    engine: sa.Engine, volume: str, taken: Taken, held: Callable[[], int], at: float | None = None
) -> None:
    """One row for a process's counts of ``volume``; the bytes held are the
    newest sample's plus those this process added (within one write
    transaction, so processes closing together add up), or, for a volume
    never sampled, ``held()`` (a whole listing, made outside the
    transaction: the process's own writes are in it)."""
    with connect(engine) as conn:
        known = _latest(conn, volume) is not None
    walked = None if known else held()
    with write(engine) as conn:
        latest = _latest(conn, volume)
        stored = walked if latest is None else latest + taken.added_bytes
        conn.execute(
            volume_usage.insert().values(
                volume=volume,
                at=time.time() if at is None else at,
                stored_bytes=None if stored is None else max(0, stored),
                gets=taken.gets,
                puts=taken.puts,
                lists=taken.lists,
                deletes=taken.deletes,
            )
        )


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
