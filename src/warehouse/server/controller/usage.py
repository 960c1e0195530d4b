"""Usage over the API: what steps used, summed per job (docs/usage.md).

Only jobs the caller may read are summed (in a private installation, their
own and those shared with them); the total is of those.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi import Request as _Request

from warehouse.jobs.usage import job_usage
from warehouse.server.controller.access import readable_jobs
from warehouse.server.controller.auth import Caller, state_of
from warehouse.server.controller.paging import MAX_ID
from warehouse.usage import Selection, total

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/usage", tags=["usage"])


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
