"""The web pages as one router (mounted into the controller by ``wh serve``) and as
an app of their own over an embedded warehouse (``wh web``)."""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import NotFoundError
from warehouse.web import (
    auth,
    browse,
    cluster,
    download,
    jobpages,
    lineagepages,
    preview,
    regolpages,
    runpages,
    submitting,
)
from warehouse.web.auth import Reader
from warehouse.web.pages import PREFIX, PageRoute
from warehouse.web.site import Site

__all__ = ["create_web_app", "web_router"]

_STATIC = {"style.css": "text/css", "live.js": "text/javascript"}


def _static_router() -> APIRouter:
    router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)

    @router.get("/static/{name}")
    def static(name: str) -> Response:
        """Our stylesheet and script (no sign-in needed: they hold nothing private)."""
        if name not in _STATIC:
            raise NotFoundError(f"no static file {name!r}")
        data = resources.files("warehouse.web").joinpath("static", name).read_bytes()
        headers = {"Cache-Control": "public, max-age=300"}
        return Response(data, media_type=_STATIC[name], headers=headers)

    return router


def _unknown_router() -> APIRouter:
    router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)

    @router.get("/{rest:path}")
    def unknown(request: Request, rest: str, user: Reader) -> Response:
        """Any other address under the pages: a page saying so (signed out:
        the sign-in page, as everywhere), not the API's JSON. A page's
        address with a slash added goes to the page (as without this route)."""
        if rest.endswith("/") and rest.strip("/"):
            query = f"?{request.url.query}" if request.url.query else ""
            return RedirectResponse(f"{PREFIX}/{rest.strip('/')}{query}", status_code=307)
        raise NotFoundError(f"no page /web/{rest[:200]}")

    return router


def web_router() -> APIRouter:
    """Every page under ``/web``; the site comes from ``app.state`` (see ``auth.site_of``)."""
    router = APIRouter()
    for module in (
        auth,
        browse,
        download,
        preview,
        jobpages,
        regolpages,
        submitting,
        cluster,
        runpages,
        lineagepages,
    ):
        router.include_router(module.router)
    router.include_router(_static_router())
    router.include_router(_unknown_router())  # last: it matches any address
    return router


def create_web_app(wh: EmbeddedWarehouse) -> FastAPI:
    """The pages alone, over an embedded warehouse (the caller closes ``wh``)."""
    app = FastAPI(title="warehouse web pages", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.web_site = Site.for_embedded(wh)
    app.include_router(web_router())

    @app.get("/", include_in_schema=False)
    def root() -> Response:
        return RedirectResponse(PREFIX + "/", status_code=303)

    return app
