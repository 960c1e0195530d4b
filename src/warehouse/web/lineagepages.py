"""The lineage of any collection, drawn (DESIGN §5.7): what made it, or what was made from it."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from warehouse.errors import NotFoundError
from warehouse.keys import is_pdh
from warehouse.lineage.tracing import MAX_DEPTH, trace
from warehouse.web.auth import SignedIn, site_of
from warehouse.web.graphs import MAX_DRAWN, lineage_drawing, short_pdh
from warehouse.web.pages import PREFIX, PageRoute, render

__all__ = ["router"]

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)


@router.get("/lineage/{pdh}")
def lineage_page(
    request: Request,
    pdh: str,
    user: SignedIn,
    direction: Literal["up", "down"] = "up",
    depth: int | None = Query(default=None, ge=0, le=MAX_DEPTH),
) -> Response:
    if not is_pdh(pdh):
        raise NotFoundError(f"{pdh!r} is not a collection's PDH")
    graph = trace(site_of(request).engine, pdh, down=direction == "down", depth=depth)
    size = len(graph.collections) + len(graph.jobs)
    return render(
        request,
        "lineage.html",
        graph=graph,
        drawing=lineage_drawing(graph) if size <= MAX_DRAWN else None,
        short=short_pdh,
        direction=direction,
        depth=depth,
    )
