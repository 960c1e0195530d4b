"""Regol over the API: watches, runs at commits, history and bisect steps.

Git is read here, on the controller, as for any ``git:`` job submitted to it;
runs go to the controller's own job manager at the lowest priority. Any user
may read watches; only the owner (or an admin) may stop one. A bisect is
driven by the client one step at a time (``POST …/bisect`` answers the run
to wait for, or the commit found), so no request waits for a job.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi import Request as _Request
from pydantic import BaseModel, Field

from warehouse.jobs.hosted import CatalogWarehouse
from warehouse.regol import records, service
from warehouse.server.controller.auth import Caller, state_of
from warehouse.server.controller.state import ControllerState

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/regol", tags=["regol"])

MAX_WATCHES_PER_RUN = 1000


class WatchCreate(BaseModel):
    job: int = Field(description="A completed job whose function is git:")
    branch: str | None = Field(default=None, max_length=255)
    label: str | None = Field(default=None, max_length=255)


class RunCreate(BaseModel):
    watches: list[int] = Field(
        default_factory=list, max_length=MAX_WATCHES_PER_RUN, description="Default: every active."
    )
    commits: str | None = Field(default=None, max_length=512, description="REV..REV")


class BisectCreate(BaseModel):
    good: str = Field(min_length=1, max_length=255)
    bad: str = Field(min_length=1, max_length=255)


def _host(state: ControllerState, user: str) -> tuple[CatalogWarehouse, str]:
    manager = state.job_manager
    if manager is None:
        raise HTTPException(400, "this controller runs no job manager")
    return CatalogWarehouse(state.engine, state.keep, user), manager.executor_name


@router.post("/watches")
def create_watch(body: WatchCreate, user: Caller, request: _Request) -> dict[str, Any]:
    """Follow a completed job whose function is ``git:`` along a branch."""
    host = CatalogWarehouse(state_of(request).engine, state_of(request).keep, user.name)
    return service.watch(host, body.job, body.branch, body.label).as_dict()


@router.get("/watches")
def list_watches(user: Caller, request: _Request) -> list[dict[str, Any]]:
    return [w.as_dict() for w in records.list_watches(state_of(request).engine)]


@router.get("/watches/{watch_id}")
def get_watch(watch_id: int, user: Caller, request: _Request) -> dict[str, Any]:
    return records.get_watch(state_of(request).engine, watch_id).as_dict()


@router.delete("/watches/{watch_id}")
def delete_watch(watch_id: int, user: Caller, request: _Request) -> dict[str, Any]:
    """Stop following (the history stays)."""
    engine = state_of(request).engine
    found = records.get_watch(engine, watch_id)
    if not user.admin and found.owner != user.name:
        raise HTTPException(403, f"watch {watch_id} belongs to {found.owner}")
    return records.set_active(engine, watch_id, False).as_dict()


@router.get("/watches/{watch_id}/runs")
def history(watch_id: int, user: Caller, request: _Request) -> list[dict[str, Any]]:
    """The runs of a watch in commit order."""
    return [r.as_dict() for r in records.history(state_of(request).engine, watch_id)]


@router.post("/runs")
def run(body: RunCreate, user: Caller, request: _Request) -> list[dict[str, Any]]:
    """Submit a run for every commit not run yet (or each commit of a range)."""
    state = state_of(request)
    host, executor = _host(state, user.name)
    chosen = service.runnable_watches(records.list_watches(state.engine), body.watches)
    return [r.as_dict() for w in chosen for r in service.run_watch(host, w, body.commits, executor)]


@router.post("/watches/{watch_id}/bisect")
def bisect(watch_id: int, body: BisectCreate, user: Caller, request: _Request) -> dict[str, Any]:
    """One bisect step: the run to wait for (made now if needed), or the answer."""
    state = state_of(request)
    host, executor = _host(state, user.name)
    found = records.get_watch(state.engine, watch_id)
    return service.bisect_step(host, found, body.good, body.bad, executor).as_dict()
