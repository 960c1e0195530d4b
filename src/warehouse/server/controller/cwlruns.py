"""CWL runs over the API: what a ``wh cwl run`` through this controller runstore.

cwltool runs where ``wh cwl run`` runs; its jobs are this controller's (``POST
/api/v1/jobs``), and the run itself is written here, as the caller's: its
row, a node per job, the collections it made from others (lineage), its
heartbeat, its end (outputs named as the caller). Every collection and job
named must be one the caller may read, and a run may be written only by
its owner (docs/permissions.md). ``wh workflow ls|show|cancel`` and the run
pages then show it as any workflow run; the workflow thread ends it once its
runner falls silent (``workflows.cwlruns.end_lost``).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, HTTPException
from fastapi import Request as _Request
from pydantic import BaseModel, Field

from warehouse.catalog.values import NAME_LIMIT, check_name
from warehouse.errors import NotFoundError, UsageError
from warehouse.jobs import jobstore
from warehouse.jobs.controllerhost import CatalogWarehouse
from warehouse.server.controller.access import hide_job, hide_run
from warehouse.server.controller.auth import Caller, CallerToken, is_job_token, state_of
from warehouse.server.controller.state import ControllerState
from warehouse.workflows import cwlruns, runstore
from warehouse.workflows.runrecords import RUN_ACTIVE, RunRecord
from warehouse.workflows.spec import output_name

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/cwl-runs", tags=["workflows"])

_MAX_ID = 2**31 - 1  # ids are 32-bit in the catalog


class CwlRunCreate(BaseModel):
    workflow: str = Field(min_length=1, max_length=255, description="The document's file name.")
    file_pdh: str = Field(max_length=100, description="A collection of the CWL files loaded.")
    inputs: dict[str, Any] = Field(
        default_factory=dict,
        max_length=10000,
        description="The job order, files as keep:PDH/path (each one the caller may read).",
    )
    name_outputs: str | None = Field(default=None, max_length=NAME_LIMIT)
    runner: str = Field(
        min_length=3, max_length=200, pattern=r"^[^\s:]+:[0-9]+$", description="HOST:PID."
    )


class CwlNode(BaseModel):
    node: str = Field(min_length=1, max_length=255)
    function: str = Field(default="", max_length=4096, description="The tool's file#id.")
    depends_on: list[str] = Field(default_factory=list, max_length=10000)
    job_id: int = Field(ge=1, le=_MAX_ID, description="The node's job (the caller reads it).")


class CwlNodes(BaseModel):
    nodes: list[CwlNode] = Field(max_length=1000)


class CwlParts(BaseModel):
    pdh: str = Field(max_length=100, description="A collection the run made from others.")
    parts: list[tuple[str, str]] = Field(
        min_length=1, max_length=10000, description="[path in it, the PDH it came from]."
    )


class CwlFinish(BaseModel):
    state: Literal["complete", "failed", "cancelled"]
    outputs: dict[str, str] = Field(
        default_factory=dict, max_length=1000, description="Output name -> PDH."
    )
    error: str | None = Field(default=None, max_length=4000)
    output_files: str | None = Field(
        default=None, max_length=100, description="The collection of the output files."
    )


def _as_caller(state: ControllerState, user: Caller) -> CatalogWarehouse:
    return CatalogWarehouse(
        state.engine,
        state.keep,
        user.name,
        state.config.git_roots,
        state.config.git_allow,
        check_reads=not user.admin,
    )


def _readable(wh: CatalogWarehouse, pdh: str, what: str) -> None:
    """``pdh`` is a PDH (recorded as given: a name would move) of a collection
    the caller may read; else refused, a hidden one as one that does not exist."""
    if wh.resolve(pdh) != pdh:
        raise UsageError(f"{what}: {pdh[:100]!r} is not a portable data hash")
    wh.manifest(pdh)


def _locations(value: Any, found: list[str]) -> list[str]:
    """Every ``keep:`` location of a job order."""
    if isinstance(value, dict):
        loc = value.get("location")
        if isinstance(loc, str) and loc.startswith("keep:"):
            found.append(loc.removeprefix("keep:").split("/", 1)[0])
        for v in value.values():
            _locations(v, found)
    elif isinstance(value, list):
        for v in value:
            _locations(v, found)
    return found


def _own_run(state: ControllerState, user: Caller, run_id: int) -> RunRecord:
    """The caller's CWL run (an admin may write any): refused otherwise."""
    if not 0 < run_id <= _MAX_ID:
        raise NotFoundError(f"no workflow run {run_id}")
    run = runstore.get_run(state.engine, run_id)
    hide_run(state.engine, user, run_id, run.owner)
    if not user.admin and run.owner != user.name:
        raise HTTPException(403, f"workflow run {run_id} belongs to {run.owner}")
    if not cwlruns.is_cwl_run(run):
        raise UsageError(f"workflow run {run_id} is not a CWL run")
    return run


def _active(run: RunRecord) -> RunRecord:
    if run.state not in RUN_ACTIVE:
        raise HTTPException(409, f"workflow run {run.id} is already {run.state}")
    return run


@router.post("")
def start_cwl_run(
    body: CwlRunCreate, user: Caller, token: CallerToken, request: _Request
) -> dict[str, Any]:
    """Record a CWL run started by the caller's runner (no node yet)."""
    state = state_of(request)
    if is_job_token(state.engine, token):  # as for jobs and workflows
        raise HTTPException(403, "a job's token cannot start workflows")
    if state.workflows is None:
        raise HTTPException(400, "this controller runs no job manager")
    if body.name_outputs is not None:
        check_name(body.name_outputs)
    wh = _as_caller(state, user)
    _readable(wh, body.file_pdh, "file_pdh")
    for pdh in sorted(set(_locations(body.inputs, []))):
        _readable(wh, pdh, "inputs")
    run = cwlruns.start(
        state.engine,
        user.name,
        workflow=body.workflow,
        file_pdh=body.file_pdh,
        inputs=body.inputs,
        name_outputs=body.name_outputs,
        runner=body.runner,
    )
    return runstore.run_view(state.engine, run.id)


@router.post("/{run_id}/nodes")
def put_cwl_nodes(run_id: int, body: CwlNodes, user: Caller, request: _Request) -> dict[str, Any]:
    """Nodes added or following their jobs (state, input, output read from the
    job itself); renews the heartbeat."""
    state = state_of(request)
    run = _active(_own_run(state, user, run_id))
    for n in body.nodes:
        job = jobstore.get_job(state.engine, n.job_id)
        hide_job(state.engine, user, n.job_id, job.submitted_by)
        cwlruns.put_node(state.engine, run.id, n.node, n.function, n.depends_on, job)
    return {"state": run.state, "control": run.control}


@router.post("/{run_id}/parts")
def put_cwl_parts(run_id: int, body: CwlParts, user: Caller, request: _Request) -> dict[str, Any]:
    """A collection the run made from others, each part at its path: lineage.
    The caller must read them all, and the collection must hold each part's
    data at its path."""
    state = state_of(request)
    _active(_own_run(state, user, run_id))
    wh = _as_caller(state, user)
    _readable(wh, body.pdh, "pdh")
    made = wh.manifest(body.pdh)
    seen: dict[str, Any] = {}
    for path, pdh in body.parts:
        if pdh not in seen:
            _readable(wh, pdh, "parts")
            seen[pdh] = wh.manifest(pdh)
        if not cwlruns.part_held(made, path, seen[pdh]):
            raise UsageError(f"collection {body.pdh} holds no data of {pdh} at {path!r}")
    runstore.record_parts(state.engine, body.pdh, body.parts)
    return {"pdh": body.pdh, "parts": len(body.parts)}


@router.post("/{run_id}/heartbeat")
def cwl_heartbeat(run_id: int, user: Caller, request: _Request) -> dict[str, Any]:
    """The runner lives; the run's state and ``control`` (``cancel`` when asked)."""
    state = state_of(request)
    _own_run(state, user, run_id)
    run = cwlruns.beat(state.engine, run_id)
    return {"state": run.state, "control": run.control}


@router.post("/{run_id}/finish")
def finish_cwl_run(run_id: int, body: CwlFinish, user: Caller, request: _Request) -> dict[str, Any]:
    """The run's end: its outputs recorded and, with its prefix, named as the
    caller (``naming_error`` says why not). A run already ended stays so."""
    state = state_of(request)
    run = _own_run(state, user, run_id)
    wh = _as_caller(state, user)
    for name, pdh in sorted(body.outputs.items()):
        if run.name_outputs:
            check_name(output_name(run.name_outputs, name))
        _readable(wh, pdh, f"outputs.{name}")
    if body.output_files is not None:
        _readable(wh, body.output_files, "output_files")
    said = cwlruns.finish(
        wh, state.engine, run, body.state, body.outputs, body.error, None, body.output_files
    )
    return {**runstore.run_view(state.engine, run_id), "naming_error": said}
