"""What GC has collected (DESIGN §6): recorded so it never becomes a root again.

A run that trashed the blocks of every collection it did not find as a root
records those collections as collected. Raising the TTL, the history
retention or the job retention later cannot make them roots again (their
blocks may be gone, and a root that cannot be read stops every run). Only
a name pointing at one now keeps it a root: naming a collected collection
is refused, so that happens only when a name was set during the run.
Storing the same data again clears the mark.
"""

from __future__ import annotations

import sqlalchemy as sa

from warehouse.catalog.db import connect, write
from warehouse.catalog.schema import collected, collections, names

__all__ = ["collected_pdhs", "record_collected"]


def collected_pdhs(engine: sa.Engine) -> set[str]:
    with connect(engine) as conn:
        return set(conn.execute(sa.select(collected.c.pdh)).scalars())


def record_collected(engine: sa.Engine, roots: set[str], recorded_before: float, now: float) -> int:
    """Mark every collection recorded before ``recorded_before`` that is not a
    root, not named now and not marked yet; return how many were marked."""
    with connect(engine) as conn:
        candidates = conn.execute(
            sa.select(collections.c.pdh).where(
                collections.c.created_at < recorded_before,
                collections.c.pdh.not_in(sa.select(names.c.pdh)),
                collections.c.pdh.not_in(sa.select(collected.c.pdh)),
            )
        ).scalars()
        fresh = [p for p in candidates if p not in roots]
    if fresh:
        with write(engine) as conn:
            for i in range(0, len(fresh), 500):
                conn.execute(
                    collected.insert(),
                    [{"pdh": p, "collected_at": now} for p in fresh[i : i + 500]],
                )
    return len(fresh)
