"""Lineage over the API: the same graph ``wh lineage --json`` prints (docs/lineage.md)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query
from fastapi import Request as _Request

from warehouse.lineage.tracing import MAX_DEPTH, trace
from warehouse.server.controller.auth import Caller, state_of

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/lineage", tags=["lineage"])


@router.get("/{key}")
def get_lineage(
    key: str,
    user: Caller,
    request: _Request,
    direction: Literal["up", "down"] = "up",
    depth: int | None = Query(default=None, ge=0, le=MAX_DEPTH),
) -> dict[str, Any]:
    """What made collection ``key`` (a name or PDH), back to the puts (``up``), or
    every job that read it and what they made (``down``); ``depth``: making links
    followed at most."""
    graph = trace(state_of(request).engine, key, down=direction == "down", depth=depth)
    return graph.as_dict()
