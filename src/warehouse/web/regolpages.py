"""Regol pages: every watch's history on one chart, and one watch with its runs."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from warehouse.regol import records
from warehouse.regol.chart import chart
from warehouse.web import reading
from warehouse.web.auth import Reader, site_of
from warehouse.web.pages import PREFIX, PageRoute, render

__all__ = ["MAX_ROWS", "router"]

MAX_ROWS = 200  # watches drawn on the overview (the newest)

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)


@router.get("/regol")
def regol_overview(request: Request, user: Reader) -> Response:
    site = site_of(request)
    engine = site.engine
    watches = records.list_watches(engine)
    shown = reading.readable_watches(site, user, [w.owner for w in watches])
    watches = [w for w, ok in zip(watches, shown, strict=True) if ok][-MAX_ROWS:]
    history = [(w, records.history(engine, w.id)) for w in watches]
    return render(request, "regol.html", history=history, chart=chart(history))


@router.get("/regol/{watch_id}")
def regol_watch(request: Request, watch_id: int, user: Reader) -> Response:
    site = site_of(request)
    engine = site.engine
    watch = records.get_watch(engine, watch_id)
    reading.require_watch(site, user, watch_id, watch.owner)
    runs = records.history(engine, watch_id)
    return render(request, "regol_watch.html", watch=watch, runs=runs, chart=chart([(watch, runs)]))
