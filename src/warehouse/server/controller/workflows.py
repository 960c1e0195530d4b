"""Workflow runs over the API: start (or resume), list, show and cancel.

The controller's workflow thread drives them (``ControllerState.start_jobs``
starts it with the job manager). A user reads the runs it may (its own, or
shared: docs/permissions.md); only the owner (or an admin) may cancel one.
``GET /{id}?since=V&wait=S`` follows a run cheaply: only the nodes changed
since version V, answered once there are any (docs/workflows.md,
"Following a run").
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Query
from fastapi import Request as _Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from warehouse import catalog
from warehouse.catalog.values import NAME_LIMIT
from warehouse.errors import NotFoundError
from warehouse.jobs.controllerhost import CatalogWarehouse
from warehouse.server.controller.access import hide_run, readable_runs
from warehouse.server.controller.auth import Caller, CallerToken, is_job_token, state_of
from warehouse.workflows import runstore
from warehouse.workflows.runrecords import RUN_FINISHED, RunRecord
from warehouse.workflows.runstart import start_run
from warehouse.workflows.spec import MAX_FILE_BYTES

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/workflows", tags=["workflows"])


class WorkflowCreate(BaseModel):
    file: str = Field(max_length=MAX_FILE_BYTES, description="The workflow file (YAML).")
    filename: str = Field(
        default="workflow.yml", min_length=1, max_length=255, description="Its file name."
    )
    inputs: dict[str, str | int | float | bool] = Field(
        default_factory=dict, max_length=1000, description="Inputs, as -i NAME=VALUE gives."
    )
    name_outputs: str | None = Field(
        default=None,
        max_length=NAME_LIMIT,
        description=f"Name each output PREFIX.<output> (at most {NAME_LIMIT} characters).",
    )
    base_dir: str | None = Field(
        default=None,
        max_length=4096,
        description="Where relative git repositories of the file are (on the controller).",
    )


@router.post("")
def start_workflow(
    body: WorkflowCreate, user: Caller, token: CallerToken, request: _Request
) -> dict[str, Any]:
    """Start a run, or find the unfinished run of the same file, inputs and prefix."""
    state = state_of(request)
    # As for jobs: a run started by a step would outlive its job.
    if is_job_token(state.engine, token):
        raise HTTPException(403, "a job's token cannot start workflows")
    if state.workflows is None:
        raise HTTPException(400, "this controller runs no job manager")
    wh = CatalogWarehouse(
        state.engine,
        state.keep,
        user.name,
        state.config.git_roots,
        state.config.git_allow,
        check_reads=not user.admin,
    )
    started = start_run(
        wh,
        body.file,
        Path(body.filename).name,
        body.inputs,
        name_outputs=body.name_outputs,
        base_dir=Path(body.base_dir) if body.base_dir else None,
    )
    state.workflows.wake()
    return {**runstore.run_view(state.engine, started.run.id), "resumed": started.resumed}


# Run ids are 32-bit in the catalog: PostgreSQL refuses a larger one.
_MAX_ID = 2**31 - 1


def _run_id(run_id: int) -> int:
    if not 0 < run_id <= _MAX_ID:
        raise NotFoundError(f"no workflow run {run_id}")
    return run_id


@router.get("")
def list_workflows(
    user: Caller, request: _Request, state: str | None = None, limit: int = 1000
) -> list[dict[str, Any]]:
    """Runs (optionally in these comma-separated states), newest first; 1 to 10000."""
    states = state.split(",") if state else None
    limit = min(max(limit, 1), 10000)  # a negative LIMIT is none at all (SQLite) or an error
    engine = state_of(request).engine
    found = runstore.list_runs(engine, states=states, limit=limit)
    # In private mode only the caller's runs and those shared (docs/permissions.md).
    shown = readable_runs(engine, user, [(r.id, r.owner) for r in found])
    return [r.as_dict() for r in found if r.id in shown]


# The longest a request may wait for a change (``wait``); a client asks again.
MAX_WAIT = 60.0
# A change seen while waiting is answered no sooner than this after the
# request: the changes of a busy run go in fewer, fuller answers. The run's
# end is answered at once.
GATHER = 0.25
# A waiting request reads the run's version at least this often: a run another
# process writes (a CWL runner through another controller) rings no bell here.
_LOOK_EVERY = 0.5
# Requests waiting at once (each a read at every ring); past it, answered at once.
MAX_WAITING = 256
# ...and of one user: one user's many requests take no place from the others.
MAX_WAITING_EACH = 16
_waiting = 0  # only touched on the server's event loop
_waiting_by: dict[str, int] = {}  # user -> requests waiting (same loop)


@router.get("/{run_id}")
async def get_workflow(
    run_id: int,
    user: Caller,
    request: _Request,
    since: Annotated[int | None, Query(ge=0, le=_MAX_ID)] = None,
    wait: Annotated[float, Query(ge=0, le=MAX_WAIT)] = 0.0,
) -> dict[str, Any]:
    """A run with its nodes (each with its job's steps done). With ``since``
    (a ``version`` it answered before): only the nodes changed after it
    (every node once the run has ended); with ``wait`` too, the answer waits
    up to that many seconds for a change or the run's end."""
    engine = state_of(request).engine
    run = await run_in_threadpool(_readable_run, engine, user, _run_id(run_id))
    if since is None:
        return await run_in_threadpool(runstore.run_view, engine, run_id)
    waits = not (run.state in RUN_FINISHED or runstore.versionless(run))
    if wait > 0 and run.version <= since and waits:
        await _until_changed(request, run_id, since, wait, user.name)
        # Read again as it stands now: a grant taken back meanwhile hides it.
        await run_in_threadpool(_readable_run, engine, user, run_id)
    return await run_in_threadpool(runstore.run_changes, engine, run_id, since)


def _readable_run(engine: sa.Engine, user: catalog.User, run_id: int) -> RunRecord:
    """The run, or NotFoundError worded as for no such run unless ``user`` may read it."""
    run = runstore.get_run(engine, run_id)
    hide_run(engine, user, run_id, run.owner)
    return run


async def _until_changed(request: _Request, run_id: int, since: int, wait: float, who: str) -> None:
    """Return once the run's version passed ``since`` (answered no sooner than
    ``GATHER`` seconds from the start), the run ended, the client left, or
    ``wait`` seconds went by."""
    global _waiting
    if _waiting >= MAX_WAITING or _waiting_by.get(who, 0) >= MAX_WAITING_EACH:
        return  # answered at once: the client asks again after a pause
    state = state_of(request)
    start = time.monotonic()
    deadline = start + wait
    gathered = min(start + GATHER, deadline)
    changed = False
    _waiting += 1
    _waiting_by[who] = _waiting_by.get(who, 0) + 1
    try:
        with contextlib.ExitStack() as stack:
            workflows = state.workflows
            # Listening before the first read: a ring after it is heard.
            ear = stack.enter_context(workflows.changed.listen()) if workflows else None
            while True:
                run = await run_in_threadpool(runstore.get_run, state.engine, run_id)
                if run.state in RUN_FINISHED:
                    return
                changed = changed or run.version > since
                until = gathered if changed else deadline
                pause = min(until - time.monotonic(), _LOOK_EVERY)
                if pause <= 0 or await request.is_disconnected():
                    return
                if ear is not None:
                    await ear.wait(pause)
                else:
                    await asyncio.sleep(pause)
    finally:
        _waiting -= 1
        _waiting_by[who] -= 1
        if not _waiting_by[who]:
            del _waiting_by[who]


@router.post("/{run_id}/cancel")
def cancel_workflow(run_id: int, user: Caller, request: _Request) -> dict[str, Any]:
    """Ask the run's driver to cancel it (its running jobs are cancelled too)."""
    engine = state_of(request).engine
    run = runstore.get_run(engine, _run_id(run_id))
    hide_run(engine, user, run_id, run.owner)
    if not user.admin and run.owner != user.name:
        raise HTTPException(403, f"workflow run {run_id} belongs to {run.owner}")
    runstore.request_cancel(engine, run_id)
    workflows = state_of(request).workflows
    if workflows is not None:
        workflows.wake()  # applied at its next pass, now
    return runstore.run_view(engine, run_id)
