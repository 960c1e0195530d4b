"""Jobs over the API: submit, list, show, steps (with logs) and control.

The controller's own manager thread runs them (``ControllerState.start_jobs``);
a job submitted here is recorded for that manager's executor. Any user may
read jobs; only the submitter (or an admin) may cancel, pause or resume one.
Manifest text in step rows (output, intermediate, log) is signed for the caller.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Response
from fastapi import Request as _Request
from pydantic import BaseModel, Field

from warehouse import jobs
from warehouse.errors import UsageError
from warehouse.jobs import jobstore
from warehouse.jobs.controllerhost import CatalogWarehouse
from warehouse.jobs.model import ACTIVE, FINISHED
from warehouse.manifest import Manifest
from warehouse.server.controller.access import hide_input, hide_job, readable_jobs, shown_jobs
from warehouse.server.controller.auth import Caller, CallerToken, is_job_token, state_of
from warehouse.server.controller.collections import signed_text
from warehouse.server.controller.paging import (
    DEFAULT_LIMIT,
    MAX_ID,
    MAX_INT,
    bounded,
    filtered_page,
    link_next,
)
from warehouse.server.controller.state import ControllerState

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"])


class JobCreate(BaseModel):
    function: str = Field(description="builtin:NAME, git:REPOSITORY@REVISION:PATH or PDH/PATH")
    input: str = Field(description="The input collection: a PDH or a name.")
    params: dict[str, Any] = Field(default_factory=dict)
    reuse: bool = True
    priority: int = 0
    cpus: int = Field(default=1, ge=1)
    memory: int = Field(default=0, ge=0, description="Bytes per step.")
    max_attempts: int = Field(default=3, ge=1)
    executor: str | None = Field(
        default=None, description="Must be the controller's executor if given."
    )


class JobControl(BaseModel):
    control: Literal["cancel", "pause", "resume"]


def _executor(state: ControllerState) -> str:
    manager = state.job_manager
    if manager is None:
        raise HTTPException(400, "this controller runs no job manager")
    return manager.executor_name


@router.post("")
def submit_job(
    body: JobCreate, user: Caller, token: CallerToken, request: _Request
) -> dict[str, Any]:
    """Submit a job (or answer it from reuse at once)."""
    state = state_of(request)
    # A step acts for its submitter only while its job runs: a job it
    # submitted would run on as the submitter after it (docs/security.md).
    if is_job_token(state.engine, token):
        raise HTTPException(403, "a job's token cannot submit jobs")
    executor = _executor(state)
    if body.executor is not None and body.executor != executor:
        raise HTTPException(400, f"executor: this controller runs {executor!r}")
    hide_input(state.engine, user, body.input)
    wh = CatalogWarehouse(
        state.engine,
        state.keep,
        user.name,
        state.config.git_roots,
        state.config.git_allow,
        check_reads=not user.admin,
    )
    job_request = jobs.JobRequest(
        body.function,
        body.input,
        body.params,
        reuse=body.reuse,
        priority=body.priority,
        cpus=body.cpus,
        memory=body.memory,
        max_attempts=body.max_attempts,
        executor=executor,
    )
    return jobs.submit(wh, job_request).as_dict()


@router.get("")
def list_jobs(
    user: Caller,
    request: _Request,
    response: Response,
    state: str | None = None,
    limit: int = DEFAULT_LIMIT,
    after: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> list[dict[str, Any]]:
    """Jobs (optionally in these comma-separated states), oldest first: at
    most ``limit`` (default 1000, at most 10000), those after job ``after``;
    a full page links to the next (docs/server.md)."""
    limit = bounded(limit)
    states = state.split(",") if state else None
    # A misspelled state is no job's: an empty list would say none is in it.
    unknown = [s for s in states or () if s not in ACTIVE | FINISHED]
    if unknown:
        known = ", ".join(sorted(ACTIVE | FINISHED))
        raise UsageError(f"state: {unknown[0][:50]!r} is not a job state ({known})")
    engine = state_of(request).engine

    def fetch(start: int, count: int) -> list[jobstore.JobRecord]:
        return jobstore.list_jobs(engine, states, after=start, limit=count)

    def shown(rows: list[jobstore.JobRecord]) -> list[jobstore.JobRecord]:
        readable = readable_jobs(engine, user, [(r.id, r.submitted_by) for r in rows])
        return [r for r in rows if r.id in readable]

    found = filtered_page(request, response, fetch, shown, lambda r: r.id, after, limit)
    return [r.as_dict() for r in shown_jobs(engine, user, found)]


@router.get("/{job_id}")
def get_job(job_id: int, user: Caller, request: _Request) -> dict[str, Any]:
    engine = state_of(request).engine
    record = jobstore.get_job(engine, job_id)
    hide_job(engine, user, job_id, record.submitted_by)
    (record,) = shown_jobs(engine, user, [record])
    return record.as_dict()


@router.get("/{job_id}/steps")
def list_steps(
    job_id: int,
    user: Caller,
    token: CallerToken,
    request: _Request,
    response: Response,
    level: int | None = None,
    number: int | None = None,
    failed: bool = False,
    limit: int = DEFAULT_LIMIT,
    after: Annotated[int | None, Query(ge=-MAX_INT, le=MAX_INT)] = None,
) -> list[dict[str, Any]]:
    """A job's steps by number; ``failed``: only those with failed attempts.
    At most ``limit`` (default 1000, at most 10000), those numbered above
    ``after``; a full page links to the next (docs/server.md)."""
    state = state_of(request)
    record = jobstore.get_job(state.engine, job_id)  # 404 for no such job
    hide_job(state.engine, user, job_id, record.submitted_by)
    limit = bounded(limit)
    found = jobstore.list_steps(
        state.engine, job_id, level=level, number=number, failed=failed, after=after, limit=limit
    )
    if found:
        link_next(request, response, len(found), limit, found[-1].number)
    out = []
    for s in found:
        row = s.as_dict()
        for column in ("output", "intermediate", "log"):
            if row[column]:
                row[column] = signed_text(Manifest.parse(row[column]), token, state)
        out.append(row)
    return out


@router.post("/{job_id}/control")
def control_job(job_id: int, body: JobControl, user: Caller, request: _Request) -> dict[str, Any]:
    """Ask the manager to cancel, pause or resume the job (applied within 0.2 s)."""
    engine = state_of(request).engine
    record = jobstore.get_job(engine, job_id)
    hide_job(engine, user, job_id, record.submitted_by)
    if not user.admin and record.submitted_by != user.name:
        raise HTTPException(403, f"job {job_id} was submitted by {record.submitted_by}")
    return jobstore.request_control(engine, job_id, body.control).as_dict()
