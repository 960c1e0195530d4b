"""Groups, grants and the permission mode over the API (docs/permissions.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from pydantic import BaseModel, Field

from warehouse.catalog import grants
from warehouse.catalog.values import check_account
from warehouse.permissions import Grant, GroupRecord, parse_level, parse_mode
from warehouse.server.controller.access import principal
from warehouse.server.controller.auth import Admin, Caller, CallerToken, is_job_token, state_of

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", tags=["permissions"])


class GroupOut(BaseModel):
    name: str
    owner: str
    members: list[str]


class GroupAdd(BaseModel):
    name: str = Field(max_length=255)


class MemberAdd(BaseModel):
    user: str = Field(max_length=255)


class GrantOut(BaseModel):
    target: str
    grantee_kind: str = Field(description="user or group")
    grantee: str
    level: str = Field(description="read, write or manage")


class GrantAdd(BaseModel):
    key: str = Field(max_length=1024, description="A name or project, a PDH, job:ID or run:ID.")
    who: str = Field(max_length=255, description="A group of that name, else a user.")
    level: str = Field(default="read", description="read, write or manage")


class PermsOut(BaseModel):
    key: str
    owners: list[tuple[str, str]] = Field(description="[kind, name] pairs")
    grants: list[GrantOut] = Field(description="On the key and on the projects above it.")
    level: str = Field(description="The caller's own level: none, read, write or manage.")
    mode: str = Field(description="open or private")


class ModeIO(BaseModel):
    mode: str = Field(description="open or private")


def _group(g: GroupRecord) -> GroupOut:
    return GroupOut(name=g.name, owner=g.owner, members=list(g.members))


def _grant(g: Grant) -> GrantOut:
    return GrantOut(
        target=g.target, grantee_kind=g.grantee_kind, grantee=g.grantee, level=str(g.level)
    )


def _no_job(request: Request, token: str, what: str) -> None:
    # A right given to someone else outlives the job: a step (maybe that
    # someone's code) acts for its submitter only while its job runs.
    if is_job_token(state_of(request).engine, token):
        raise HTTPException(403, f"a job's token cannot {what}")


@router.get("/groups", response_model=list[GroupOut])
def list_groups(user: Caller, request: Request) -> list[GroupOut]:
    """Every group with its owner and members."""
    return [_group(g) for g in grants.list_groups(state_of(request).engine)]


@router.post("/groups", response_model=GroupOut)
def add_group(body: GroupAdd, user: Caller, token: CallerToken, request: Request) -> GroupOut:
    """A new group, owned by the caller (who adds and removes its members)."""
    _no_job(request, token, "make groups")
    engine = state_of(request).engine
    return _group(grants.add_group(engine, body.name, principal(engine, user)))


@router.post("/groups/{group}/members", status_code=204)
def add_member(
    group: str, body: MemberAdd, user: Caller, token: CallerToken, request: Request
) -> None:
    """Add a user to a group: its owner, or an admin."""
    _no_job(request, token, "change groups")
    engine = state_of(request).engine
    grants.add_member(engine, group, body.user, principal(engine, user))


@router.delete("/groups/{group}/members/{member}", status_code=204)
def remove_member(
    group: str, member: str, user: Caller, token: CallerToken, request: Request
) -> None:
    """Take a user out of a group: its owner, or an admin (404 if not a member)."""
    _no_job(request, token, "change groups")
    engine = state_of(request).engine
    grants.remove_member(engine, group, member, principal(engine, user))


@router.post("/grants", response_model=GrantOut)
def share(body: GrantAdd, user: Caller, token: CallerToken, request: Request) -> GrantOut:
    """Give a group (else a user) a level on a key: who manages the key."""
    _no_job(request, token, "share")
    engine = state_of(request).engine
    level = parse_level(body.level)
    check_account(body.who)
    return _grant(grants.share(engine, body.key, body.who, level, principal(engine, user)))


@router.delete("/grants", status_code=204)
def unshare(
    user: Caller,
    token: CallerToken,
    request: Request,
    key: Annotated[str, Query(max_length=1024)],
    who: Annotated[str, Query(max_length=255)],
) -> None:
    """Take a grant back: who manages the key (404 if there is none)."""
    _no_job(request, token, "unshare")
    engine = state_of(request).engine
    grants.unshare(engine, key, who, principal(engine, user))


@router.get("/perms", response_model=PermsOut)
def perms(user: Caller, request: Request, key: Annotated[str, Query(max_length=1024)]) -> PermsOut:
    """The owners and grants of a key the caller may read, and the caller's level
    (404 for one it may not read, as for one that does not exist)."""
    engine = state_of(request).engine
    found = grants.perms(engine, key, principal(engine, user))
    return PermsOut(
        key=found.key,
        owners=list(found.owners),
        grants=[_grant(g) for g in found.grants],
        level=str(found.level),
        mode=found.mode.value,
    )


@router.get("/permission-mode", response_model=ModeIO)
def get_mode(user: Caller, request: Request) -> ModeIO:
    """The installation's mode: open or private."""
    return ModeIO(mode=grants.get_mode(state_of(request).engine).value)


@router.put("/permission-mode", response_model=ModeIO)
def set_mode(body: ModeIO, user: Admin, request: Request) -> ModeIO:
    """Set the installation's mode (admins)."""
    engine = state_of(request).engine
    mode = parse_mode(body.mode)
    grants.set_mode(engine, mode, principal(engine, user))
    return ModeIO(mode=mode.value)
