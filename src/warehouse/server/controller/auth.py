"""Who is calling: bearer tokens checked against the catalog."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from starlette.concurrency import run_in_threadpool

from warehouse import catalog
from warehouse.server.accesslog import note_user
from warehouse.server.controller.state import ControllerState

__all__ = ["Admin", "Caller", "CallerToken", "bearer_token", "state_of"]


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
    user = await run_in_threadpool(catalog.user_for_token, state_of(request).engine, token)
    if user is None:
        raise HTTPException(401, "unknown or expired token")
    note_user(request.scope, user.name)
    return user


async def admin(user: Annotated[catalog.User, Depends(caller)]) -> catalog.User:
    if not user.admin:
        raise HTTPException(403, "this needs an admin token")
    return user


Caller = Annotated[catalog.User, Depends(caller)]
Admin = Annotated[catalog.User, Depends(admin)]
CallerToken = Annotated[str, Depends(bearer_token)]
