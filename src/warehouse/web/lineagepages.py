"""The lineage of any collection, drawn (DESIGN §5.7): what made it, or what was made from it."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from warehouse.errors import NotFoundError, UsageError
from warehouse.keys import is_pdh
from warehouse.lineage.tracing import MAX_DEPTH, trace
from warehouse.web import reading
from warehouse.web.auth import Reader, site_of
from warehouse.web.graphs import MAX_DRAWN, lineage_drawing, short_pdh
from warehouse.web.pages import PREFIX, PageRoute, render

__all__ = ["router"]

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)


@router.get("/lineage/{pdh}")
def lineage_page(
    request: Request,
    pdh: str,
    user: Reader,
    direction: str = "up",
    depth: str = "",
) -> Response:
    if not is_pdh(pdh):
        raise NotFoundError(f"{pdh!r} is not a collection's PDH")
    if direction not in ("up", "down"):
        raise UsageError(f"direction is up or down, not {direction!r}")
    # The form sends an empty depth for "all": not a number, so read it here.
    levels = None
    if depth.strip():
        if not (depth.strip().isascii() and depth.strip().isdigit()):
            raise UsageError(f"depth must be a number from 0 to {MAX_DEPTH}")
        levels = int(depth)
    site = site_of(request)
    reading.require_collection(site, user, pdh)
    graph = trace(site.engine, pdh, down=direction == "down", depth=levels)
    graph = reading.lineage_shown(site, user, graph)
    size = len(graph.collections) + len(graph.jobs)
    return render(
        request,
        "lineage.html",
        graph=graph,
        drawing=lineage_drawing(graph) if size <= MAX_DRAWN else None,
        short=short_pdh,
        direction=direction,
        depth=levels,
    )
