"""Workflow runs over the API: start (or resume), list, show and cancel.

The controller's workflow thread drives them (``ControllerState.start_jobs``
starts it with the job manager). Any user may read runs; only the owner (or
an admin) may cancel one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi import Request as _Request
from pydantic import BaseModel, Field

from warehouse.catalog.values import NAME_LIMIT
from warehouse.errors import NotFoundError
from warehouse.jobs.controllerhost import CatalogWarehouse
from warehouse.server.controller.access import hide_run, readable_runs
from warehouse.server.controller.auth import Caller, CallerToken, is_job_token, state_of
from warehouse.workflows import runstore
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


@router.get("/{run_id}")
def get_workflow(run_id: int, user: Caller, request: _Request) -> dict[str, Any]:
    """A run with its nodes (each with its job's steps done)."""
    engine = state_of(request).engine
    run = runstore.get_run(engine, _run_id(run_id))
    hide_run(engine, user, run_id, run.owner)
    return runstore.run_view(engine, run_id)


@router.post("/{run_id}/cancel")
def cancel_workflow(run_id: int, user: Caller, request: _Request) -> dict[str, Any]:
    """Ask the run's driver to cancel it (its running jobs are cancelled too)."""
    engine = state_of(request).engine
    run = runstore.get_run(engine, _run_id(run_id))
    hide_run(engine, user, run_id, run.owner)
    if not user.admin and run.owner != user.name:
        raise HTTPException(403, f"workflow run {run_id} belongs to {run.owner}")
    runstore.request_cancel(engine, run_id)
    return runstore.run_view(engine, run_id)
