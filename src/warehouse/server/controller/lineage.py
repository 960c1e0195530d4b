"""Lineage over the API: the same graph ``wh lineage --json`` prints (docs/lineage.md)."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Query
from fastapi import Request as _Request

from warehouse.lineage.hiding import function_pdhs, hide
from warehouse.lineage.tracing import MAX_DEPTH, trace
from warehouse.server.controller.access import (
    hide_key,
    readable_jobs,
    readable_pdhs,
)
from warehouse.server.controller.auth import Caller, state_of

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/lineage", tags=["lineage"])


@router.get("/{key:path}")
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
    engine = state_of(request).engine
    # The collection asked about must be the caller's to read; what it meets
    # on the way that is not is shown as "hidden" (docs/permissions.md).
    hide_key(engine, user, key)
    graph = trace(engine, key, down=direction == "down", depth=depth)
    pdhs = readable_pdhs(engine, user, [c.pdh for c in graph.collections])
    jobs = readable_jobs(engine, user, [(j.id, j.submitted_by) for j in graph.jobs])
    functions = readable_pdhs(engine, user, function_pdhs(graph))
    return hide(graph, pdhs, jobs, functions).as_dict()
