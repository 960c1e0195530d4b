"""What a user holds: the bytes of the collections it recorded or its jobs
made (a quota's measure, docs/server.md "Quota")."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from warehouse.catalog.db import connect, write
from warehouse.catalog.schema import collected, collection_holders, collections, jobs

__all__ = ["Holding", "holding", "record_block_bytes"]


@dataclass(frozen=True, slots=True)
class Holding:
    """A user's stored bytes, and whether it already holds one collection."""

    stored: int
    holds: bool


def holding(engine: sa.Engine, user: str, pdh: str) -> Holding:
    """The summed size (the larger of its files' bytes and its distinct
    blocks' bytes) of every collection ``user`` recorded (its holders'
    rows) or a job of ``user``'s made (its output and log, which the
    manager records: reused ones too, as the job keeps them alive) that GC
    has not collected, and whether ``pdh`` is one of them.

    A collection held by two users counts in full for each: each put it, and
    each may keep it alive by naming it."""
    h, c, j = collection_holders.c, collections.c, jobs.c
    mine = sa.union(
        sa.select(h.pdh).where(h.user == user),
        sa.select(j.output_pdh).where(j.submitted_by == user, j.output_pdh.is_not(None)),
        sa.select(j.log_pdh).where(j.submitted_by == user, j.log_pdh.is_not(None)),
    ).subquery()
    # A put may keep whole blocks while naming a byte of each: what is held
    # is the larger of the blocks' bytes and the files'.
    counted = sa.case((c.block_bytes > c.size, c.block_bytes), else_=c.size)
    live = (
        sa.select(c.pdh, counted.label("size"))
        .join(mine, mine.c.pdh == c.pdh)
        .where(c.pdh.not_in(sa.select(collected.c.pdh)))
        .subquery()
    )
    with connect(engine) as conn:
        stored = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(live.c.size), 0))).scalar()
        holds = conn.execute(sa.select(live.c.pdh).where(live.c.pdh == pdh)).first()
    return Holding(int(stored or 0), holds is not None)


def record_block_bytes(engine: sa.Engine, pdh: str, block_bytes: int) -> None:
    """Keep the summed size of the distinct blocks of the recorded ``pdh``
    (the same for every put of it: written once)."""
    c = collections.c
    with write(engine) as conn:
        conn.execute(
            collections.update()
            .where(c.pdh == pdh, c.block_bytes.is_(None))
            .values(block_bytes=block_bytes)
        )
