"""Names over the API: compare-and-swap, history, writers.

A name may hold "/" (``lab/run42``), so each route takes the rest of the
path; the routes of a name's log and writers come first, and ``_the_whole``
tells ``lab/log`` the name from the log of ``lab`` (docs/server.md)."""

from __future__ import annotations

from typing import Annotated

import sqlalchemy as sa
from fastapi import APIRouter, HTTPException, Query, Request, Response
from pydantic import BaseModel, Field

from warehouse import catalog
from warehouse.catalog import grants
from warehouse.catalog.db import connect
from warehouse.catalog.values import check_writer
from warehouse.errors import UsageError
from warehouse.permissions import Level
from warehouse.server.controller.access import (
    hide_name,
    readable_names,
    require_collection_read,
)
from warehouse.server.controller.auth import Caller, CallerToken, is_job_token, state_of
from warehouse.server.controller.paging import (
    DEFAULT_LIMIT,
    MAX_INT,
    bounded,
    filtered_page,
    link_next,
)

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/names", tags=["names"])


class NameOut(BaseModel):
    name: str
    pdh: str
    version: int
    owner: str
    updated_at: float
    updated_by: str


class NameSet(BaseModel):
    pdh: str = Field(pattern=r"^[0-9a-f]{32}\+[0-9]+$")
    expect: str | None = Field(
        default=None, description="The PDH the name must hold now; null: it must not exist."
    )
    create: bool = Field(
        default=False, description="With expect null: fail even if it already holds pdh."
    )


class ChangeOut(BaseModel):
    name: str
    version: int
    old_pdh: str | None
    new_pdh: str | None
    by: str
    at: float


class WriterAdd(BaseModel):
    user: str


def _out(r: catalog.NameRecord) -> NameOut:
    return NameOut(
        name=r.name,
        pdh=r.pdh,
        version=r.version,
        owner=r.owner,
        updated_at=r.updated_at,
        updated_by=r.updated_by,
    )


@router.get("", response_model=list[NameOut])
def list_names(
    user: Caller,
    request: Request,
    response: Response,
    prefix: str = "",
    limit: int = DEFAULT_LIMIT,
    after: str = "",
) -> list[NameOut]:
    """Names starting with ``prefix``, in code point order: at most ``limit``
    (default 1000, at most 10000), those after the name ``after``; a full page
    links to the next (docs/server.md)."""
    limit = bounded(limit)
    engine = state_of(request).engine

    def fetch(start: str, count: int) -> list[catalog.NameRecord]:
        return catalog.list_names(engine, prefix, after=start, limit=count)

    def shown(rows: list[catalog.NameRecord]) -> list[catalog.NameRecord]:
        readable = readable_names(engine, user, [r.name for r in rows])
        return [r for r in rows if r.name in readable]

    found = filtered_page(request, response, fetch, shown, lambda r: r.name, after, limit)
    return [_out(r) for r in found]


@router.get("/{name:path}/log", response_model=list[ChangeOut] | NameOut)
def name_log(
    name: str,
    user: Caller,
    request: Request,
    response: Response,
    limit: int = DEFAULT_LIMIT,
    after: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
) -> list[ChangeOut] | NameOut:
    """The name's changes by version: at most ``limit``, those after version
    ``after``; a full page links to the next (docs/server.md)."""
    limit = bounded(limit)
    engine = state_of(request).engine
    if _the_whole(engine, user, name, "log"):
        return get_name(f"{name}/log", user, request)
    hide_name(engine, user, catalog.check_name(name))
    found = catalog.name_log(engine, name, after=after, limit=limit)
    link_next(request, response, len(found), limit, found[-1].version if found else after)
    return [
        ChangeOut(
            name=c.name, version=c.version, old_pdh=c.old_pdh, new_pdh=c.new_pdh, by=c.by, at=c.at
        )
        for c in found
    ]


@router.get("/{name:path}/writers", response_model=list[str] | NameOut)
def list_writers(
    name: str,
    user: Caller,
    request: Request,
    response: Response,
    limit: int = DEFAULT_LIMIT,
    after: str = "",
) -> list[str] | NameOut:
    """The users its owner let change this name (besides the owner and
    admins), in code point order: at most ``limit``, those after the user
    ``after``; a full page links to the next (docs/server.md)."""
    limit = bounded(limit)
    engine = state_of(request).engine
    if _the_whole(engine, user, name, "writers"):
        return get_name(f"{name}/writers", user, request)
    hide_name(engine, user, catalog.check_name(name))
    found = catalog.list_writers(engine, name, after=after, limit=limit)
    link_next(request, response, len(found), limit, found[-1] if found else after)
    return found


@router.delete("/{name:path}/writers/{writer}", status_code=204)
def remove_writer(
    name: str, writer: str, user: Caller, request: Request, expect: str | None = None
) -> Response:
    """Take back a user's right to move this name (its owner or an admin only)."""
    engine = state_of(request).engine
    whole = f"{name}/writers/{writer}"
    if _the_whole(engine, user, name, f"writers/{writer}"):
        if expect is None:
            raise UsageError(f"removing name {whole!r} takes expect=PDH")
        change = remove_name(whole, expect, user, request)
        return Response(change.model_dump_json(), media_type="application/json")
    hide_name(engine, user, catalog.check_name(name))
    catalog.remove_writer(engine, name, writer, user=user.name, admin=user.admin)
    return Response(status_code=204)


@router.post("/{name:path}/writers", status_code=204)
def add_writer(
    name: str, body: WriterAdd, user: Caller, token: CallerToken, request: Request
) -> None:
    """Let another user move this name (its owner or an admin only)."""
    engine = state_of(request).engine
    hide_name(engine, user, catalog.check_name(name))
    # A right given to someone else outlives the job: a step (maybe that
    # someone's code) acts for its submitter only while its job runs.
    if is_job_token(engine, token):
        raise HTTPException(403, "a job's token cannot add writers")
    catalog.get_user(engine, check_writer(body.user))
    catalog.add_writer(engine, name, body.user, user=user.name, admin=user.admin)


@router.get("/{name:path}", response_model=NameOut)
def get_name(name: str, user: Caller, request: Request) -> NameOut:
    engine = state_of(request).engine
    hide_name(engine, user, catalog.check_name(name))
    return _out(catalog.get_name(engine, name))


@router.put("/{name:path}", response_model=NameOut)
def set_name(name: str, body: NameSet, user: Caller, request: Request) -> NameOut:
    """Compare-and-swap: 409 if the name holds anything but ``expect``."""
    engine = state_of(request).engine
    # A write grant on the name (or a project above it) lets the caller move it.
    level = hide_name(engine, user, catalog.check_name(name))
    # A name gives read on what it points at: only at what the caller reads.
    require_collection_read(engine, user, body.pdh)
    rec = catalog.set_name(
        engine,
        name,
        body.pdh,
        expect=body.expect,
        create=body.create,
        user=user.name,
        admin=user.admin or level >= Level.WRITE,
    )
    return _out(rec)


@router.delete("/{name:path}", response_model=ChangeOut)
def remove_name(name: str, expect: str, user: Caller, request: Request) -> ChangeOut:
    """Compare-and-swap removal: ``expect`` (required) is the PDH the name must
    hold now; 409 if it holds anything else, 404 if it never existed. The
    removal is kept in the name's history."""
    engine = state_of(request).engine
    hide_name(engine, user, catalog.check_name(name))
    c = catalog.remove_name(engine, name, expect=expect, user=user.name, admin=user.admin)
    return ChangeOut(
        name=c.name, version=c.version, old_pdh=c.old_pdh, new_pdh=c.new_pdh, by=c.by, at=c.at
    )


def _the_whole(engine: sa.Engine, user: catalog.User, name: str, rest: str) -> bool:
    """Whether ``name/rest`` is meant as one name rather than ``rest`` of the
    name ``name``: a name may hold "/" (``lab/log``), and no name is a project
    above another, so at most one reading names a name. Only names the caller
    reads count: a hidden one answers as the other reading's missing name."""
    if _reads(engine, user, name):
        return False
    return _reads(engine, user, f"{name}/{rest}")


def _reads(engine: sa.Engine, user: catalog.User, name: str) -> bool:
    try:
        catalog.check_name(name)
        with connect(engine) as conn:
            level, exists = grants.name_level_for(conn, user.name, user.admin, name)
    except UsageError:
        return False
    return exists and level >= Level.READ
