"""Finding collections by who stored them and what they are (`wh collection ls`).

What a collection is comes from the lineage labels (``reads``): a put, a
job's output or log, a function's source, a combined collection, a workflow
file; the pages list the same.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from warehouse.errors import UsageError

__all__ = ["KIND_NAMES", "MAX_LIMIT", "Found", "find", "find_in_catalog"]

# Command-line names for the lineage kinds.
KIND_NAMES = {
    "put": "put",
    "output": "job output",
    "log": "job log",
    "function": "function",
    "combined": "combined",
    "workflow-file": "workflow file",
}
MAX_LIMIT = 10_000
# Rows read from the catalog per round while filtering by kind.
_PAGE = 1000
# At most this many rows are looked at for one listing (a bound on one request).
_SCAN = 200_000


@dataclass(frozen=True)
class Found:
    pdh: str
    size: int
    file_count: int
    created_at: float
    created_by: str
    kinds: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "kinds": list(self.kinds)}


def _check(kind: str | None, limit: int) -> str | None:
    if not 1 <= limit <= MAX_LIMIT:
        raise UsageError(f"limit must be from 1 to {MAX_LIMIT}, not {limit}")
    if kind is None:
        return None
    if kind in KIND_NAMES.values():
        return kind
    if kind not in KIND_NAMES:
        raise UsageError(f"kind {kind!r} is not one of {', '.join(KIND_NAMES)}")
    return KIND_NAMES[kind]


def find_in_catalog(
    engine: Any, *, created_by: str | None = None, kind: str | None = None, limit: int = 100
) -> list[Found]:
    """The newest collections (newest first), by ``created_by`` and of ``kind``."""
    import sqlalchemy as sa

    from warehouse.catalog.db import connect
    from warehouse.catalog.schema import collections
    from warehouse.lineage.reads import collection_kinds

    wanted = _check(kind, limit)
    query = sa.select(
        collections.c.pdh,
        collections.c.size,
        collections.c.file_count,
        collections.c.created_at,
        collections.c.created_by,
    ).order_by(collections.c.created_at.desc(), collections.c.pdh)
    if created_by is not None:
        query = query.where(collections.c.created_by == created_by)
    found: list[Found] = []
    for offset in range(0, _SCAN, _PAGE):
        with connect(engine) as conn:
            rows = [r._mapping for r in conn.execute(query.limit(_PAGE).offset(offset))]
        kinds = collection_kinds(engine, [r["pdh"] for r in rows])
        for r in rows:
            if wanted is None or wanted in kinds[r["pdh"]]:
                found.append(Found(**r, kinds=kinds[r["pdh"]]))
                if len(found) == limit:
                    return found
        if len(rows) < _PAGE:
            break
    return found


def find(
    wh: object, *, mine: bool = False, kind: str | None = None, limit: int = 100
) -> list[Found]:
    """Collections of warehouse ``wh``: its catalog, or its controller's API."""
    from warehouse.embedded import EmbeddedWarehouse
    from warehouse.remote.warehouse import RemoteWarehouse

    _check(kind, limit)
    if isinstance(wh, RemoteWarehouse):
        query: dict[str, object] = {"limit": limit, "with_kinds": "true"}
        if mine:
            query["created_by"] = wh.user
        if kind is not None:
            query["kind"] = kind
        rows = wh.api.get("/collections", **query)
        return [
            Found(
                pdh=r["pdh"],
                size=r["size"],
                file_count=r["file_count"],
                created_at=r["created_at"],
                created_by=r["created_by"],
                kinds=tuple(r.get("kinds") or ()),
            )
            for r in rows
        ]
    if isinstance(wh, EmbeddedWarehouse):
        return find_in_catalog(
            wh.engine, created_by=wh.user if mine else None, kind=kind, limit=limit
        )
    raise UsageError("listing collections needs an embedded warehouse or a controller")
