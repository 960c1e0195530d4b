"""The OpenAPI page (``/docs``) with Swagger UI served from the installed package.

FastAPI's default page loads Swagger UI from a CDN and so is blank on a
cluster without internet access; the ``fastapi-offline`` package ships
the same files (Swagger UI 5, which reads OpenAPI 3.1), and we serve them.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, HTTPException
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse

__all__ = ["STATIC_PREFIX", "docs_router"]

STATIC_PREFIX = "/docs/static"
# Only these files are served: the page needs nothing else.
_FILES = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon.png": "image/png",
}


def docs_router(title: str, openapi_url: str = "/openapi.json") -> APIRouter:
    router = APIRouter(include_in_schema=False)
    folder = Path(fastapi_offline.__file__).parent / "static"

    @router.get("/docs")
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{title} - API",
            swagger_js_url=f"{STATIC_PREFIX}/swagger-ui-bundle.js",
            swagger_css_url=f"{STATIC_PREFIX}/swagger-ui.css",
            swagger_favicon_url=f"{STATIC_PREFIX}/favicon.png",
            oauth2_redirect_url="/docs/oauth2-redirect",
        )

    @router.get("/docs/oauth2-redirect")
    def oauth2_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @router.get(STATIC_PREFIX + "/{name}")
    def static(name: str) -> FileResponse:
        if name not in _FILES:
            raise HTTPException(404, f"no file {name!r}")
        headers = {"Cache-Control": "public, max-age=86400"}
        return FileResponse(folder / name, media_type=_FILES[name], headers=headers)

    return router
