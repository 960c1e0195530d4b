"""Regol pages: every watch's history on one chart, and one watch with its runs."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from warehouse.regol import records
from warehouse.regol.chart import chart
from warehouse.web.auth import SignedIn, site_of
from warehouse.web.pages import PREFIX, PageRoute, render

__all__ = ["MAX_ROWS", "router"]

MAX_ROWS = 200  # watches drawn on the overview (the newest)

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)


@router.get("/regol")
def regol_overview(request: Request, user: SignedIn) -> Response:
    engine = site_of(request).engine
    watches = records.list_watches(engine)[-MAX_ROWS:]
    history = [(w, records.history(engine, w.id)) for w in watches]
    return render(request, "regol.html", history=history, chart=chart(history))


@router.get("/regol/{watch_id}")
def regol_watch(request: Request, watch_id: int, user: SignedIn) -> Response:
    engine = site_of(request).engine
    watch = records.get_watch(engine, watch_id)
    runs = records.history(engine, watch_id)
    return render(request, "regol_watch.html", watch=watch, runs=runs, chart=chart([(watch, runs)]))
