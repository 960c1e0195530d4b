"""Rendering: the Jinja2 environment (autoescape on), filters, pagination, and the
route class every page uses (HTML error pages, the sign-in page when needed, and a
``Server-Timing`` header with the time the server spent)."""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlencode

import jinja2
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from fastapi.routing import APIRoute

import warehouse.errors as errors

__all__ = [
    "NUL_REFUSED",
    "PREFIX",
    "Page",
    "PageRoute",
    "SignInNeeded",
    "human_size",
    "paginate",
    "render",
]

PREFIX = "/web"
# Scripts and styles come from our static files only: no inline script runs.
CSP = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'"

_STATUS = [
    (errors.UsageError, 400),
    (errors.ForbiddenError, 403),
    (errors.NotFoundError, 404),
    (errors.ConflictError, 409),
    (errors.CorruptDataError, 502),
    (errors.WarehouseError, 500),
]


class SignInNeeded(Exception):
    """No valid sign-in: answer with the sign-in page and nothing else."""


def human_size(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, s = divmod(int(seconds), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours}h{m:02d}m{s:02d}s" if hours else f"{m}m{s:02d}s"


_env = jinja2.Environment(
    loader=jinja2.PackageLoader("warehouse.web", "templates"),
    autoescape=True,  # every name is shown as text, whatever it holds
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_env.filters.update(
    size=human_size,
    when=_when,
    duration=_duration,
    urlpath=lambda s: quote(str(s), safe="/"),
    q=lambda s: quote(str(s), safe=""),
)
_env.globals.update(prefix=PREFIX, urlencode=urlencode)


def render(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    user = getattr(request.state, "web_user", None)
    html = _env.get_template(template).render(request=request, user=user, **context)
    return HTMLResponse(html, status_code=status)


@dataclass(frozen=True)
class Page:
    """One page of a longer list."""

    items: Sequence[Any]
    number: int  # 1-based
    per_page: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.per_page))

    @property
    def first(self) -> int:
        return (self.number - 1) * self.per_page


def paginate(items: Sequence[Any], page: int, per_page: int) -> Page:
    """``items[...]`` for page ``page`` (clamped to the pages there are)."""
    pages = max(1, -(-len(items) // per_page))
    number = min(max(page, 1), pages)
    start = (number - 1) * per_page
    return Page(items[start : start + per_page], number, per_page, len(items))


def _signin(request: Request) -> HTMLResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    response = render(request, "signin.html", 401, next=target, error=None)
    response.headers["Cache-Control"] = "no-store"
    return response


def _bad_address(error: RequestValidationError) -> str:
    first = error.errors()[0] if error.errors() else {}
    field = str(first.get("loc", ("", "address"))[-1])
    return f"bad address: {field}: {first.get('msg', 'not understood')}"


NUL_REFUSED = "it holds a NUL character, which no name, path or value may hold"


def _holds_nul(request: Request) -> bool:
    # PostgreSQL refuses text with NUL (a 500): refused here, on every backend alike.
    return "\x00" in request.url.path or "\x00" in unquote(request.url.query)


class PageRoute(APIRoute):
    """Library errors as HTML pages; missing sign-in as the sign-in page; timing."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def page(request: Request) -> Response:
            start = time.perf_counter()
            try:
                if _holds_nul(request):
                    raise errors.UsageError(f"bad address: {NUL_REFUSED}")
                response = await handle(request)
            except SignInNeeded:
                response = _signin(request)
            except errors.WarehouseError as e:
                status = next(code for cls, code in _STATUS if isinstance(e, cls))
                response = render(request, "error.html", status, message=str(e))
            except RequestValidationError as e:
                # A page's address with a bad part (/web/jobs/abc): a page, not JSON.
                response = render(request, "error.html", 400, message=_bad_address(e))
            spent = (time.perf_counter() - start) * 1000
            response.headers["Server-Timing"] = f"app;dur={spent:.1f}"
            response.headers.setdefault("X-Content-Type-Options", "nosniff")
            response.headers.setdefault("X-Frame-Options", "DENY")
            response.headers.setdefault("Content-Security-Policy", CSP)
            if response.headers.get("content-type", "").startswith("text/html"):
                # A page shows what only a signed-in user may see: kept by no
                # cache, it is not shown again by Back after signing out.
                response.headers.setdefault("Cache-Control", "no-store")
            return response

        return page
