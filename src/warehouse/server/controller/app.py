"""The controller's HTTP API (FastAPI): JSON over HTTP with bearer tokens.

The OpenAPI description is served at ``/openapi.json`` (and browsable at
``/docs``). Library errors map to status codes: bad input 400, no or bad
token 401, not allowed 403, not found 404, conflict 409, too large 413,
corrupt data 502.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import warehouse.errors as errors
from warehouse.server.accesslog import AccessLog
from warehouse.server.bodytimeout import BodyTimeout
from warehouse.server.controller import (
    collections,
    cwlruns,
    gc,
    jobs,
    lineage,
    names,
    regol,
    s3credentials,
    sharing,
    sql,
    usage,
    users,
    workflows,
)
from warehouse.server.controller.apidocs import docs_router
from warehouse.server.controller.metrics import (
    ControllerMetrics,
    LatencyMiddleware,
    metrics_router,
)
from warehouse.server.controller.state import ControllerConfig, ControllerState

__all__ = ["create_app"]

log = logging.getLogger("warehouse.controller")

_STATUS = [
    (errors.UsageError, 400),
    (errors.ForbiddenError, 403),
    (errors.NotFoundError, 404),
    (errors.ConflictError, 409),
    (errors.CorruptDataError, 502),
    (errors.WarehouseError, 500),
]


# The most of an error message sent back: many repeat what the client sent
# (a name, a key, a query), which must not come back whole at any length.
MAX_ERROR = 500


def _error(status: int, message: str) -> JSONResponse:
    if len(message) > MAX_ERROR:
        message = f"{message[: MAX_ERROR - 40]}… ({len(message):,} characters)"
    return JSONResponse({"error": message}, status_code=status)


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or "body"


class BodyLimit:
    """Refuse bodies over ``limit`` bytes with 413 before reading them into memory."""

    def __init__(self, app: ASGIApp, limit: int, own: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.limit = limit
        # Paths whose routes bound their bodies themselves (spooling them to disk).
        self.own = own

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.own:
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            await _error(413, f"request body over {self.limit} bytes")(scope, receive, send)
            return
        seen = 0
        refused = False

        async def counted() -> Message:
            # A chunked body has no length up front: count, and once over the
            # limit answer 413 ourselves and tell the app the client left.
            nonlocal seen, refused
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit and not refused:
                refused = True
                await _error(413, f"request body over {self.limit} bytes")(scope, receive, send)
                return {"type": "http.disconnect"}
            return message

        async def guarded(message: Message) -> None:
            if not refused:
                await send(message)

        try:
            await self.app(scope, counted, guarded)
        except Exception:
            if not refused:
                raise


def create_app(config: ControllerConfig, state: ControllerState | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        opened = state or ControllerState.open(config)
        app.state.controller = opened
        try:
            yield
        finally:
            if state is None:
                opened.close()

    app = FastAPI(
        title="Free Factory warehouse",
        version="1",
        summary="Collections, names, users and keep services of one installation.",
        lifespan=lifespan,
        docs_url=None,  # served from the package below, not from a CDN
        redoc_url=None,
    )
    if state is not None:
        app.state.controller = state
    app.include_router(docs_router(app.title))
    app.state.metrics = ControllerMetrics()
    app.include_router(metrics_router())
    routed = (
        collections,
        names,
        users,
        gc,
        jobs,
        regol,
        workflows,
        cwlruns,
        lineage,
        sql,
        sharing,
        usage,
        s3credentials,
    )
    for module in routed:
        app.include_router(module.router)
    from warehouse.web import web_router  # the pages (docs/web.md); imported late: they use us

    app.include_router(web_router())

    @app.exception_handler(errors.WarehouseError)
    async def warehouse_error(request: Request, exc: errors.WarehouseError) -> JSONResponse:
        status = next(code for cls, code in _STATUS if isinstance(exc, cls))
        return _error(status, str(exc))

    @app.exception_handler(sa.exc.DataError)
    async def bad_value(request: Request, exc: sa.exc.DataError) -> JSONResponse:
        # The database refused a value the request carried (PostgreSQL: a NUL
        # in a string, an integer out of range): bad input, not a failure here.
        said = str(exc.orig or "").strip().splitlines()
        return _error(
            400, f"the catalog cannot take a value of this request: {said[0] if said else exc}"
        )

    @app.exception_handler(sa.exc.OperationalError)
    @app.exception_handler(OSError)
    async def disk_full(request: Request, exc: Exception) -> JSONResponse:
        # A full disk is the installation's state, not a fault of the request:
        # 507, said so, rather than a bare 500 (docs/server.md).
        if not errors.disk_full(exc):
            raise exc
        log.error("%s %s: the disk is full: %s", request.method, request.url.path, exc)
        return _error(507, "the controller's disk is full: nothing was changed; try again later")

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [f"{_field(e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in exc.errors()]
        return _error(400, "; ".join(problems))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        response = _error(exc.status_code, str(exc.detail))
        response.headers.update(exc.headers or {})  # a 503's Retry-After
        if exc.status_code == 401:
            response.headers["WWW-Authenticate"] = "Bearer"
        return response

    @app.get("/api/v1/health", tags=["cluster"])
    def health(request: Request) -> dict[str, str]:
        # "starting" until `wh serve`'s keep servers and job manager are up.
        starting = getattr(request.app.state, "controller", None)
        return {"status": "starting" if getattr(starting, "starting", False) else "ok"}

    app.add_middleware(BodyLimit, limit=config.max_body, own=frozenset({collections.STREAMED_PATH}))
    app.add_middleware(BodyTimeout, idle=config.body_timeout)
    app.add_middleware(LatencyMiddleware, metrics=app.state.metrics)
    app.add_middleware(AccessLog)  # outermost: it sees every answer, 408 and 413 too
    return app
