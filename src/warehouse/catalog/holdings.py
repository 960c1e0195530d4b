"""What a user holds: the bytes of the collections it recorded (a quota's
measure, docs/server.md "Quota")."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from warehouse.catalog.db import connect
from warehouse.catalog.schema import collected, collection_holders, collections

__all__ = ["Holding", "holding"]


@dataclass(frozen=True, slots=True)
class Holding:
    """A user's stored bytes, and whether it already holds one collection."""

    stored: int
    holds: bool


def holding(engine: sa.Engine, user: str, pdh: str) -> Holding:
    """The summed size of every collection ``user`` recorded (its holders'
    rows) that GC has not collected, and whether ``pdh`` is one of them.

    A collection held by two users counts in full for each: each put it, and
    each may keep it alive by naming it."""
    h, c = collection_holders.c, collections.c
    live = (
        sa.select(c.pdh, c.size)
        .join(collection_holders, h.pdh == c.pdh)
        .where(h.user == user, c.pdh.not_in(sa.select(collected.c.pdh)))
        .subquery()
    )
    with connect(engine) as conn:
        stored = conn.execute(sa.select(sa.func.coalesce(sa.func.sum(live.c.size), 0))).scalar()
        holds = conn.execute(sa.select(live.c.pdh).where(live.c.pdh == pdh)).first()
    return Holding(int(stored or 0), holds is not None)
