"""The lineage of a key, embedded (over the catalog) or remote (over the API): one call."""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

from warehouse.errors import UsageError
from warehouse.lineage.values import Lineage

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = ["MAX_DEPTH", "lineage", "trace"]

MAX_DEPTH = 10_000


def _check_depth(depth: int | None) -> None:
    if depth is not None and not 0 <= depth <= MAX_DEPTH:
        raise UsageError(f"depth must be between 0 and {MAX_DEPTH}, not {depth}")


def trace(engine: sa.Engine, key: str, *, down: bool = False, depth: int | None = None) -> Lineage:
    """The lineage of ``key`` (a name or a PDH) from this catalog."""
    from warehouse import catalog
    from warehouse.lineage.build import build
    from warehouse.lineage.reads import CatalogFacts

    _check_depth(depth)
    k = catalog.split_key(engine, key)
    if k.path:
        raise UsageError(f"lineage is of whole collections: {key!r} names a path inside one")
    pdh = k.head if k.is_pdh else catalog.get_name(engine, catalog.check_name(k.head)).pdh
    return build(CatalogFacts(engine), key, pdh, down=down, depth=depth)


def lineage(wh: object, key: str, *, down: bool = False, depth: int | None = None) -> Lineage:
    """The lineage of ``key`` in warehouse ``wh``: its catalog, or its controller's API."""
    from warehouse.embedded import EmbeddedWarehouse
    from warehouse.remote.warehouse import RemoteWarehouse

    _check_depth(depth)
    if isinstance(wh, RemoteWarehouse):
        query: dict[str, object] = {"direction": "down" if down else "up"}
        if depth is not None:
            query["depth"] = depth
        return Lineage.from_dict(wh.api.get(f"/lineage/{quote(key, safe='')}", **query))
    if isinstance(wh, EmbeddedWarehouse):
        return trace(wh.engine, key, down=down, depth=depth)
    raise UsageError("lineage needs an embedded warehouse or a controller")
