"""Signing in: a token typed once becomes a session cookie (HttpOnly, SameSite=Strict).

The cookie holds a session token of its own, made at sign-in with a limited
lifetime, so the token the user typed is never stored by the browser. Every
page checks the cookie against the catalog; without a valid one a page shows
the sign-in form and nothing else. Signing out revokes the session token.
Forms that change something are POSTs, and a POST from another site (by its
``Origin``, else its ``Sec-Fetch-Site`` or ``Referer``) is refused.
"""

from __future__ import annotations

import functools
import time
from typing import Annotated
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from warehouse import catalog
from warehouse.catalog.auth import JOB_TOKEN_LABEL, revoke_secret, token_info
from warehouse.catalog.grants import get_mode
from warehouse.errors import ForbiddenError, UsageError
from warehouse.permissions import Mode
from warehouse.server.accesslog import note_user
from warehouse.web.pages import NUL_REFUSED, PREFIX, PageRoute, SignInNeeded, render
from warehouse.web.site import Site

__all__ = [
    "COOKIE",
    "FORM_LIMIT",
    "SESSION_TTL",
    "Reader",
    "SignedIn",
    "read_form",
    "router",
    "site_of",
]

COOKIE = "wh_session"
SESSION_TTL = 12 * 3600
FORM_LIMIT = 1 << 20  # bytes of a posted form (the submit form's parameters fit)

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)


def site_of(request: Request) -> Site:
    """The app's ``Site``: set by ``wh web``, or made once from the controller's state."""
    site = getattr(request.app.state, "web_site", None)
    if site is None:
        site = Site.for_controller(request.app.state.controller)
        request.app.state.web_site = site
    assert isinstance(site, Site)
    return site


def _reader(request: Request) -> catalog.User:
    token = request.cookies.get(COOKIE, "")
    user = site_of(request).user(token) if token else None
    if user is None:
        raise SignInNeeded()
    request.state.web_user = user
    note_user(request.scope, user.name)
    return user


def _signed_in(request: Request) -> catalog.User:
    user = _reader(request)
    site = site_of(request)
    if site.kind == "controller" and not user.admin and get_mode(site.engine) is Mode.PRIVATE:
        # These pages read the catalog directly and do not yet hide what a
        # user may not read: closed rather than leaking (docs/permissions.md).
        raise ForbiddenError(
            "in private mode this page is for admins only: it does not yet hide "
            "what a user may not read (use wh or the API)"
        )
    return user


# A page that hides what its user may not read (web/reading.py) takes Reader;
# one that does not yet, SignedIn (closed to non-admins in private mode).
SignedIn = Annotated[catalog.User, Depends(_signed_in)]
Reader = Annotated[catalog.User, Depends(_reader)]


def _from_here(request: Request) -> bool:
    """Whether a POST came from one of our own pages: by ``Origin``; a browser
    that sends none tells by ``Sec-Fetch-Site`` or ``Referer``, and a client
    that sends none of them (not a browser: no cookie of a victim) passes."""
    here = f"{request.url.scheme}://{request.url.netloc}"
    origin = request.headers.get("origin")
    if origin is not None:
        return origin == here
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    referer = request.headers.get("referer")
    if referer is None:
        return True
    parts = urlsplit(referer)
    return f"{parts.scheme}://{parts.netloc}" == here


async def _body(request: Request) -> bytes:
    """The request's body, refused past ``FORM_LIMIT`` bytes: the sign-in form
    takes posts from anyone, and a body is held whole to be parsed."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > FORM_LIMIT:
        raise UsageError(f"a form over {FORM_LIMIT >> 20} MiB is refused")
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > FORM_LIMIT:
            raise UsageError(f"a form over {FORM_LIMIT >> 20} MiB is refused")
    return bytes(data)


async def read_form(request: Request) -> dict[str, str]:
    """A URL-encoded form (the last value of each field), after checking where it came from."""
    if not _from_here(request):
        raise ForbiddenError("a form from another site is refused")
    body = (await _body(request)).decode("utf-8", errors="replace")
    form = {k: v[-1] for k, v in parse_qs(body, keep_blank_values=True).items()}
    if any("\x00" in k or "\x00" in v for k, v in form.items()):
        raise UsageError(f"a form field: {NUL_REFUSED}")
    return form


def _safe_next(target: str) -> str:
    # Only somewhere on these pages: never another site.
    if target.startswith(PREFIX + "/") and not target.startswith("//") and "\\" not in target:
        return target
    return PREFIX + "/"


@router.get("/signin")
def signin_form(request: Request, next: str = PREFIX + "/") -> Response:
    return render(request, "signin.html", next=_safe_next(next), error=None)


@router.post("/signin")
async def signin(request: Request) -> Response:
    form = await read_form(request)
    site = site_of(request)
    target = _safe_next(form.get("next", ""))
    token = form.get("token", "").strip()
    user = await run_in_threadpool(site.user, token) if token else None
    info = await run_in_threadpool(token_info, site.engine, token) if user else None
    if user is None or info is None:
        return render(request, "signin.html", 401, next=target, error="That token is not valid.")
    if info.label.startswith(JOB_TOKEN_LABEL):
        # A job's token dies with its job: no session may outlive it.
        return render(
            request, "signin.html", 403, next=target, error="A job's token cannot sign in."
        )
    # Never longer than the token signed in with: a session cannot renew itself.
    ttl = (
        SESSION_TTL if info.expires_at is None else min(SESSION_TTL, info.expires_at - time.time())
    )
    session = await run_in_threadpool(
        functools.partial(
            catalog.create_token,
            site.engine,
            user.name,
            label="web session",
            ttl=SESSION_TTL,
            not_after=info.expires_at,
        )
    )
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        COOKIE,
        session,
        max_age=max(1, int(ttl)),
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/signout")
async def signout(request: Request) -> Response:
    await read_form(request)
    # The session token dies here, not when the cookie would have expired.
    token = request.cookies.get(COOKIE, "")
    if token:
        await run_in_threadpool(revoke_secret, site_of(request).engine, token)
    response = RedirectResponse(PREFIX + "/signin", status_code=303)
    response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
    return response
