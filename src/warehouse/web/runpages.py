"""Workflow run pages: the list of runs, and one run with its jobs drawn as a DAG."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from warehouse.web import queries, reading
from warehouse.web.auth import Reader, site_of
from warehouse.web.graphs import MAX_DRAWN, run_drawing
from warehouse.web.pages import PREFIX, Page, PageRoute, render
from warehouse.workflows import records
from warehouse.workflows.values import RUN_ACTIVE

__all__ = ["RUNS_PER_PAGE", "router"]

RUNS_PER_PAGE = 50

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)


@router.get("/workflows")
def run_list(request: Request, user: Reader, state: str = "all", page: int = 1) -> Response:
    site = site_of(request)
    engine = site.engine
    mine = reading.run_filter(site, user)
    found, total, number = queries.runs_page(engine, state, page, RUNS_PER_PAGE, mine)
    return render(
        request,
        "workflows.html",
        runs=Page(found, number, RUNS_PER_PAGE, total),
        counts=queries.node_counts(engine, [r.id for r in found]),
        state=state if state in queries.RUN_GROUPS else "all",
        groups=["all", *queries.RUN_GROUPS],
    )


@router.get("/workflows/{run_id}")
def run_page(request: Request, run_id: int, user: Reader) -> Response:
    site = site_of(request)
    found = records.get_run_with_nodes(site.engine, run_id)
    reading.require_run(site, user, run_id, found.run.owner)
    drawing = run_drawing(found.nodes) if len(found.nodes) <= MAX_DRAWN else None
    return render(
        request,
        "workflow.html",
        run=found.run,
        nodes=found.nodes,
        drawing=drawing,
        inputs=found.run.input_values,
        outputs=found.run.output_pdhs,
        active=found.run.state in RUN_ACTIVE,
    )
