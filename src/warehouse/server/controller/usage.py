"""Usage over the API: what steps used, summed per job (docs/usage.md).

Only jobs (and runs) the caller may read are summed (in a private
installation, their own and those shared with them); the total is of those.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi import Request as _Request
from pydantic import BaseModel, Field

from warehouse.catalog.volumeusage import record_volume_rows, volume_rows
from warehouse.jobs.usage import job_usage, run_usage, user_runs
from warehouse.server.controller.access import readable_jobs, readable_runs
from warehouse.server.controller.auth import Admin, Caller, state_of
from warehouse.server.controller.paging import MAX_ID
from warehouse.usage import Selection, total
from warehouse.usage.volumes import VolumeRow, summarize

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/usage", tags=["usage"])

_MAX_RUNS = 1000  # runs one answer sums at most


@router.get("")
def get_usage(
    user: Caller,
    request: _Request,
    job: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    workflow: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    submitter: Annotated[str | None, Query(alias="user", max_length=255)] = None,
    since: Annotated[float | None, Query(ge=0, allow_inf_nan=False)] = None,
) -> dict[str, Any]:
    """What the measured steps of the selected jobs used: ``jobs``, one row
    per job, and their ``total`` (CPU and wall seconds, reserved cpu-seconds,
    peak memory, bytes read and written)."""
    engine = state_of(request).engine
    found = job_usage(engine, Selection(job, workflow, submitter, since))
    shown = readable_jobs(engine, user, [(r.job, r.user) for r in found])
    found = [r for r in found if r.job in shown]
    return {
        "jobs": [r.as_dict() for r in found],
        "total": total(r.usage for r in found).as_dict(),
    }


@router.get("/runs")
def get_run_usage(
    user: Caller,
    request: _Request,
    owner: Annotated[str | None, Query(alias="user", max_length=255)] = None,
    since: Annotated[float | None, Query(ge=0, allow_inf_nan=False)] = None,
    limit: Annotated[int, Query(ge=1, le=_MAX_RUNS)] = 100,
) -> dict[str, Any]:
    """What the newest ``limit`` workflow runs (of ``user`` if given, made
    since ``since``) the caller may read used: ``runs``, one row per run
    with a measured step (the jobs it ran, not those it reused), and their
    ``total``; what the user page draws (docs/usage.md)."""
    engine = state_of(request).engine
    runs = user_runs(engine, owner, since, limit)
    shown = readable_runs(engine, user, [(r[0], r[2]) for r in runs])
    runs = [r for r in runs if r[0] in shown]
    used = run_usage(engine, [r[0] for r in runs])
    rows = [
        {"run": i, "workflow": w, "user": o, "state": st, **used[i].as_dict()}
        for i, w, o, st, _ in runs
        if i in used
    ]
    return {"runs": rows, "total": total(used[r["run"]] for r in rows).as_dict()}


_COUNT = Field(ge=0, le=2**53)


class VolumeRowIn(BaseModel):
    volume: str = Field(min_length=1, max_length=1024)
    at: float = Field(ge=0, allow_inf_nan=False)
    stored_bytes: int | None = Field(default=None, ge=0, le=2**53)
    gets: int = _COUNT
    puts: int = _COUNT
    lists: int = _COUNT
    deletes: int = _COUNT


class VolumeRowsIn(BaseModel):
    rows: list[VolumeRowIn] = Field(max_length=1000)


@router.get("/volumes")
def get_volume_usage(
    user: Admin,
    request: _Request,
    since: Annotated[float | None, Query(ge=0, allow_inf_nan=False)] = None,
) -> dict[str, Any]:
    """Per volume of the installation (admins only: volumes are no user's):
    requests by kind at ``since`` or later and GB-months stored from then
    to now (docs/usage.md, "Per volume")."""
    now = time.time()
    used = summarize(volume_rows(state_of(request).engine, since), since, now)
    return {"since": since, "now": now, "volumes": [u.as_dict() for u in used]}


@router.post("/volumes")
def post_volume_usage(body: VolumeRowsIn, user: Admin, request: _Request) -> dict[str, int]:
    """A keep server's counts of its volumes since it last sent them, and
    the bytes each held (sent with its admin token)."""
    rows = [
        VolumeRow(r.volume, r.at, r.stored_bytes, r.gets, r.puts, r.lists, r.deletes)
        for r in body.rows
    ]
    record_volume_rows(state_of(request).engine, rows)
    return {"recorded": len(rows)}
