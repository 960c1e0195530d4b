"""Job pages: the list with progress and filters, one job with its steps, timeline and
controls, one step with its log, and the small JSON the script polls for progress."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from warehouse import catalog, jobs
from warehouse.blocks import Locator
from warehouse.errors import NotFoundError
from warehouse.jobs.jobrecords import StepRecord
from warehouse.manifest import Manifest
from warehouse.web import queries, reading
from warehouse.web.auth import Reader, SignedIn, read_form, site_of
from warehouse.web.eta import eta_seconds
from warehouse.web.pages import PREFIX, Page, PageRoute, render
from warehouse.web.site import Site
from warehouse.web.timeline import timeline
from warehouse.web.usagechart import job_usage_chart
from warehouse.workflows import runstore
from warehouse.workflows.runrecords import NodeRecord, RunRecord

__all__ = ["JOBS_PER_PAGE", "LOG_LIMIT", "STEPS_PER_PAGE", "router"]

JOBS_PER_PAGE = 50
STEPS_PER_PAGE = 100
LOG_LIMIT = 1 << 20  # bytes of a step's log shown on its page

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)


@router.get("/jobs")
def job_list(
    request: Request, user: Reader, state: str = "all", function: str = "", page: int = 1
) -> Response:
    site = site_of(request)
    mine = reading.job_filter(site, user)
    found, total, number = queries.jobs_page(
        site.engine, state, function, page, JOBS_PER_PAGE, mine
    )
    return render(
        request,
        "jobs.html",
        jobs=Page(reading.shown_jobs(site, user, found), number, JOBS_PER_PAGE, total),
        state=state if state in queries.JOB_GROUPS else "all",
        function=function,
        groups=["all", *queries.JOB_GROUPS],
    )


@router.get("/jobs/progress.json")
def progress(request: Request, user: Reader, ids: str = "") -> Response:
    """``{id: {state, steps_done, steps_running, steps_queued, failed_attempts}}``."""
    numbers = (i.strip() for i in ids.split(","))
    # Ids are 32-bit: a longer number names no job (and would fail the query).
    wanted = [int(i) for i in numbers if i.isascii() and i.isdigit() and len(i) < 10][:200]
    site = site_of(request)
    found = reading.readable_jobs(
        site, user, queries.jobs_by_id(site.engine, wanted) if wanted else []
    )
    keys = ("state", "steps_done", "steps_running", "steps_queued", "failed_attempts")
    body = {str(j.id): {k: getattr(j, k) for k in keys} for j in found}
    return JSONResponse(body, headers={"Cache-Control": "no-store"})


@router.get("/jobs/{job_id}")
def job_page(
    request: Request, job_id: int, user: Reader, state: str = "", page: int = 1
) -> Response:
    site = site_of(request)
    record = jobs.get_job(site.engine, job_id)
    reading.require_job(site, user, record)
    (record,) = reading.shown_jobs(site, user, [record])
    counts = queries.step_counts(site.engine, job_id)
    shown = sum(counts.values()) if not state else counts.get(state, 0)
    number = min(max(page, 1), max(1, -(-shown // STEPS_PER_PAGE)))
    found = queries.steps_page(
        site.engine, job_id, state, (number - 1) * STEPS_PER_PAGE, STEPS_PER_PAGE
    )
    eta = None
    if record.state not in ("complete", "failed", "cancelled"):
        durations = queries.done_durations(site.engine, job_id)
        eta = eta_seconds(durations, record.steps_running, record.steps_queued)
    failed = queries.failed_step(site.engine, job_id) if record.state == "failed" else None
    return render(
        request,
        "job.html",
        job=record,
        eta=eta,
        failed=failed,
        params=json.loads(record.params),
        counts=counts,
        state=state,
        steps=Page(found, number, STEPS_PER_PAGE, shown),
        timeline=timeline(found),
        usage=job_usage_chart(site.engine, job_id, record.cpus),
        controls=site.embedded is not None,
        workflow_nodes=_runs_of(site, user, job_id),
    )


def _runs_of(site: Site, user: catalog.User, job_id: int) -> list[tuple[NodeRecord, RunRecord]]:
    """The workflow runs the job is a node of, those ``user`` may read."""
    found = [
        (node, runstore.get_run(site.engine, node.run_id))
        for node in runstore.runs_of_job(site.engine, job_id)
    ]
    shown = reading.readable_runs(site, user, [(run.id, run.owner) for _, run in found])
    return [(node, run) for node, run in found if run.id in shown]


def _log_text(site: Site, step: StepRecord) -> tuple[str, bool]:
    """The step's log (its last attempt), at most ``LOG_LIMIT`` bytes; and if it was cut."""
    if not step.log:
        return step.log_tail or "", False
    data = bytearray()
    for entry in Manifest.parse(step.log).files().values():
        for piece in entry.pieces:
            block = site.store.get(Locator.parse(str(piece.locator)))
            data += block[piece.offset : piece.offset + piece.length]
            if len(data) > LOG_LIMIT:
                return data[:LOG_LIMIT].decode("utf-8", errors="replace"), True
    return data.decode("utf-8", errors="replace"), False


@router.get("/jobs/{job_id}/steps/{number}")
def step_page(request: Request, job_id: int, number: int, user: Reader) -> Response:
    site = site_of(request)
    record = jobs.get_job(site.engine, job_id)
    reading.require_job(site, user, record)
    found = jobs.list_steps(site.engine, job_id, number=number)
    if not found:
        raise NotFoundError(f"job {job_id} has no step {number}")
    text, cut = _log_text(site, found[0])
    return render(request, "step.html", job=record, step=found[0], log=text, cut=cut)


def _resubmit(site: Site, job_id: int, user: catalog.User) -> int:
    old = jobs.get_job(site.engine, job_id)
    request = jobs.JobRequest(
        f"{old.function_pdh}/{old.function_path}",  # the very version that ran
        old.input_pdh,
        json.loads(old.params),
        reuse=False,
        priority=old.priority,
        cpus=old.cpus,
        memory=old.memory,
        max_attempts=old.max_attempts,
        executor=old.executor,
    )
    return site.submit(request, user).id


def _control(site: Site, job_id: int, action: str, user: catalog.User) -> int:
    if action == "resubmit":
        return _resubmit(site, job_id, user)
    if action not in ("cancel", "pause", "resume"):
        raise NotFoundError(f"no job action {action!r}")
    site.control(job_id, action, user)
    return job_id


@router.post("/jobs/{job_id}/{action}")
async def job_action(request: Request, job_id: int, action: str, user: SignedIn) -> Response:
    await read_form(request)
    site = site_of(request)
    target = await run_in_threadpool(_control, site, job_id, action, user)
    return RedirectResponse(f"{PREFIX}/jobs/{target}", status_code=303)
