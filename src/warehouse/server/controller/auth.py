"""Who is calling: bearer tokens checked against the catalog."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import sqlalchemy as sa
from fastapi import Depends, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from warehouse import catalog
from warehouse.catalog.auth import JOB_TOKEN_LABEL, token_info
from warehouse.server.accesslog import note_user
from warehouse.server.controller.state import ControllerState

__all__ = ["Admin", "Caller", "CallerToken", "bearer_token", "is_job_token", "state_of"]


def state_of(request: Request) -> ControllerState:
    state = request.app.state.controller
    assert isinstance(state, ControllerState)
    return state


def bearer_token(request: Request) -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() not in ("bearer", "oauth2") or not token.strip():
        raise HTTPException(401, "a token is needed: Authorization: Bearer <token>")
    return token.strip()


async def caller(request: Request) -> catalog.User:
    token = bearer_token(request)
    engine = state_of(request).engine
    user = await run_in_threadpool(catalog.user_for_token, engine, token)
    if user is None:
        raise HTTPException(401, "unknown or expired token")
    if user.admin and await run_in_threadpool(is_job_token, engine, token):
        # A step may run someone else's code: what it does must end with the
        # job, so no signing key, new admin or keep server. (Keep servers ask
        # /users/current, so they see a plain user too.)
        user = dataclasses.replace(user, admin=False)
    note_user(request.scope, user.name)
    return user


def is_job_token(engine: sa.Engine, token: str) -> bool:
    """Whether ``token`` is the one a job manager made for a job's steps."""
    info = token_info(engine, token)
    return info is not None and info.label.startswith(JOB_TOKEN_LABEL)


async def admin(user: Annotated[catalog.User, Depends(caller)]) -> catalog.User:
    if not user.admin:
        raise HTTPException(403, "this needs an admin token")
    return user


Caller = Annotated[catalog.User, Depends(caller)]
Admin = Annotated[catalog.User, Depends(admin)]
CallerToken = Annotated[str, Depends(bearer_token)]
