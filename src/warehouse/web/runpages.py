"""Workflow run pages: the list of runs, one run with its jobs drawn as a DAG
and their usage, and a user's runs with theirs (docs/usage.md)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from warehouse.jobs.usage import job_usage, run_usage, user_runs
from warehouse.usage import Selection
from warehouse.usage import total as sum_usage
from warehouse.web import queries, reading
from warehouse.web.auth import Reader, site_of
from warehouse.web.graphs import MAX_DRAWN, run_drawing
from warehouse.web.pages import PREFIX, Page, PageRoute, render
from warehouse.web.usagechart import cost_chart
from warehouse.workflows import runstore
from warehouse.workflows.runrecords import RUN_ACTIVE

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
    found = runstore.get_run_with_nodes(site.engine, run_id)
    reading.require_run(site, user, run_id, found.run.owner)
    drawing = run_drawing(found.nodes) if len(found.nodes) <= MAX_DRAWN else None
    node_of = {n.job_id: n.node for n in found.nodes if n.job_id is not None}
    used = job_usage(site.engine, Selection(workflow=run_id))
    rows = [(node_of.get(j.job, f"job {j.job}"), f"/jobs/{j.job}", j.usage) for j in used]
    return render(
        request,
        "workflow.html",
        run=found.run,
        nodes=found.nodes,
        drawing=drawing,
        inputs=found.run.input_values,
        outputs=found.run.output_pdhs,
        active=found.run.state in RUN_ACTIVE,
        usage=cost_chart(rows),
    )


@router.get("/users/{name}")
def user_page(request: Request, name: str, user: Reader) -> Response:
    """A user's newest workflow runs the viewer may read, with what each used
    and cost; and the total of that user's jobs the viewer may read."""
    site = site_of(request)
    runs = user_runs(site.engine, name, None, RUNS_PER_PAGE * 4)
    readable = reading.readable_runs(site, user, [(r[0], r[2]) for r in runs])
    runs = [r for r in runs if r[0] in readable][:RUNS_PER_PAGE]
    used = run_usage(site.engine, [r[0] for r in runs])
    rows = [
        (f"run {i}: {workflow}", f"/workflows/{i}", used[i])
        for i, workflow, _, _, _ in runs
        if i in used
    ]
    jobs_used = job_usage(site.engine, Selection(user=name))
    seen = reading.readable_job_ids(site, user, [(j.job, j.user) for j in jobs_used])
    jobs_used = [j for j in jobs_used if j.job in seen]
    return render(
        request,
        "user.html",
        name=name,
        runs=runs,
        usage=cost_chart(rows),
        jobs=cost_chart(
            [("all jobs", "/jobs", sum_usage(j.usage for j in jobs_used))] if jobs_used else []
        ),
        job_count=len(jobs_used),
    )
