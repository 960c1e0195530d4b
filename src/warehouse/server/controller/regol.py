"""Regol over the API: watches, runs at commits, history and bisect steps.

Git is read here, on the controller, as for any ``git:`` job submitted to it;
runs go to the controller's own job manager at the lowest priority. Any user
may read watches; only the owner (or an admin) may stop one, run one or
bisect with it. Runs are submitted as the watch's owner, whoever asks: a
watch runs its owner's chosen code, which must never get the rights (the
job token) of another user, least of all an admin's. A bisect is driven by
the client one step at a time (``POST …/bisect`` answers the run to wait
for, or the commit found), so no request waits for a job.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Response
from fastapi import Request as _Request
from pydantic import BaseModel, Field

from warehouse import catalog
from warehouse.errors import NotFoundError
from warehouse.jobs import jobstore
from warehouse.jobs.controllerhost import CatalogWarehouse
from warehouse.regol import records, service
from warehouse.regol.values import WatchRecord
from warehouse.server.controller.access import (
    hide_job,
    hide_watch,
    readable_watches,
    require_collection_read,
)
from warehouse.server.controller.auth import Caller, CallerToken, is_job_token, state_of
from warehouse.server.controller.paging import DEFAULT_LIMIT, MAX_ID, MAX_INT, bounded, link_next
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
    # Runs are submitted as the watch's owner, who must still read what the
    # followed job read (docs/permissions.md): a grant may have been taken back.
    try:
        check_reads = not catalog.get_user(state.engine, user).admin
    except NotFoundError:
        check_reads = True
    host = CatalogWarehouse(
        state.engine,
        state.keep,
        user,
        state.config.git_roots,
        state.config.git_allow,
        check_reads=check_reads,
    )
    return host, manager.executor_name


def _owned(found: WatchRecord, user: catalog.User) -> None:
    if not user.admin and found.owner != user.name:
        raise HTTPException(403, f"watch {found.id} belongs to {found.owner}")


@router.post("/watches")
def create_watch(
    body: WatchCreate, user: Caller, token: CallerToken, request: _Request
) -> dict[str, Any]:
    """Follow a completed job whose function is ``git:`` along a branch."""
    state = state_of(request)
    # A watch runs code as its owner at every commit, for ever: a step (maybe
    # another user's code) acts for its submitter only while its job runs.
    if is_job_token(state.engine, token):
        raise HTTPException(403, "a job's token cannot make watches")
    # Only a job the caller may read can be followed (docs/permissions.md).
    followed = jobstore.get_job(state.engine, body.job)
    hide_job(state.engine, user, body.job, followed.submitted_by)
    # Its runs read the followed job's input as the caller: reading a shared
    # job is not reading its input.
    if followed.input_pdh:
        require_collection_read(state.engine, user, followed.input_pdh)
    host = CatalogWarehouse(
        state.engine, state.keep, user.name, state.config.git_roots, state.config.git_allow
    )
    return service.watch(host, body.job, body.branch, body.label).as_dict()


@router.get("/watches")
def list_watches(
    user: Caller,
    request: _Request,
    response: Response,
    limit: int = DEFAULT_LIMIT,
    after: Annotated[int, Query(ge=0, le=MAX_ID)] = 0,
) -> list[dict[str, Any]]:
    """Watches, oldest first: at most ``limit`` (default 1000, at most 10000),
    those after watch ``after``; a full page links to the next (docs/server.md)."""
    limit = bounded(limit)
    engine = state_of(request).engine
    found = records.list_watches(engine, after=after, limit=limit)
    link_next(request, response, len(found), limit, found[-1].id if found else after)
    shown = readable_watches(engine, user, [w.owner for w in found])
    return [w.as_dict() for w, ok in zip(found, shown, strict=True) if ok]


@router.get("/watches/{watch_id}")
def get_watch(watch_id: int, user: Caller, request: _Request) -> dict[str, Any]:
    engine = state_of(request).engine
    found = records.get_watch(engine, watch_id)
    hide_watch(engine, user, watch_id, found.owner)
    return found.as_dict()


@router.delete("/watches/{watch_id}")
def delete_watch(watch_id: int, user: Caller, request: _Request) -> dict[str, Any]:
    """Stop following (the history stays)."""
    engine = state_of(request).engine
    found = records.get_watch(engine, watch_id)
    hide_watch(engine, user, watch_id, found.owner)
    _owned(found, user)
    return records.set_active(engine, watch_id, False).as_dict()


@router.get("/watches/{watch_id}/runs")
def history(
    watch_id: int,
    user: Caller,
    request: _Request,
    response: Response,
    limit: int = DEFAULT_LIMIT,
    after: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
) -> list[dict[str, Any]]:
    """The runs of a watch in commit order: at most ``limit`` (default 1000, at
    most 10000), those after the run ``after``; a full page links to the next
    (docs/server.md)."""
    limit = bounded(limit)
    engine = state_of(request).engine
    hide_watch(engine, user, watch_id, records.get_watch(engine, watch_id).owner)
    found = records.history(engine, watch_id, after=after, limit=limit)
    link_next(request, response, len(found), limit, found[-1].id if found else after)
    return [r.as_dict() for r in found]


@router.post("/runs")
def run(body: RunCreate, user: Caller, request: _Request) -> list[dict[str, Any]]:
    """Submit a run for every commit not run yet (or each commit of a range), for
    the watches named (the caller's own or, for admins, anyone's), by default
    every active one of the caller's (admins: every active one); each as its
    watch's owner."""
    state = state_of(request)
    watches = records.list_watches(state.engine)
    if not body.watches and not user.admin:
        watches = [w for w in watches if w.owner == user.name]
    # Another user's watch answers as a missing one, before asking whether it
    # is still active.
    owners = {w.id: w.owner for w in watches}
    for i in body.watches:
        if i in owners:
            hide_watch(state.engine, user, i, owners[i])
    chosen = service.runnable_watches(watches, body.watches)
    for w in chosen:
        hide_watch(state.engine, user, w.id, w.owner)
        _owned(w, user)
    made: list[dict[str, Any]] = []
    for w in chosen:
        host, executor = _host(state, w.owner)
        made += [r.as_dict() for r in service.run_watch(host, w, body.commits, executor)]
    return made


@router.post("/watches/{watch_id}/bisect")
def bisect(watch_id: int, body: BisectCreate, user: Caller, request: _Request) -> dict[str, Any]:
    """One bisect step: the run to wait for (made now if needed, as the
    watch's owner), or the answer. The owner's or an admin's only."""
    state = state_of(request)
    found = records.get_watch(state.engine, watch_id)
    hide_watch(state.engine, user, watch_id, found.owner)
    _owned(found, user)
    host, executor = _host(state, found.owner)
    return service.bisect_step(host, found, body.good, body.bad, executor).as_dict()
