"""The submit page: choose a function (a built-in or a git repository), a revision,
an input from the names, and parameters; the job is queued and a manager started."""

from __future__ import annotations

import json
import math
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from warehouse import catalog, jobs
from warehouse.errors import UsageError, WarehouseError
from warehouse.jobs.functions import builtin_dir
from warehouse.web import queries
from warehouse.web.auth import SignedIn, read_form, site_of
from warehouse.web.pages import PREFIX, PageRoute, render
from warehouse.web.site import Site

__all__ = ["builtins", "function_spec", "parse_params", "router"]

NAMES_OFFERED = 1000

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)


def builtins() -> list[str]:
    return sorted(p.stem for p in builtin_dir().glob("*.py") if not p.name.startswith("_"))


def function_spec(form: dict[str, str]) -> str:
    """``builtin:NAME``, ``git:REPOSITORY@REVISION:PATH`` or ``PDH/PATH`` from the form."""
    choice = form.get("function", "")
    if choice.startswith("builtin:"):
        return choice
    if choice == "git":
        repo = form.get("repository", "").strip()
        revision = form.get("revision", "").strip() or "HEAD"
        path = form.get("path", "").strip()
        if not repo or not path:
            raise UsageError("a git function needs a repository and a path in it")
        return f"git:{repo}@{revision}:{path}"
    if choice == "spec" and form.get("spec", "").strip():
        return form["spec"].strip()
    raise UsageError("choose a function")


def _not_json(word: str) -> Any:
    raise ValueError(f"{word} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e999: no JSON number can hold it
        raise ValueError(f"{text} is too big")
    return value


def _value(key: str, text: str) -> Any:
    """JSON if it is strict JSON (no NaN, no number past a float), else the string."""
    try:
        return json.loads(text, parse_constant=_not_json, parse_float=_finite)
    except ValueError:
        return text
    except RecursionError:
        raise UsageError(f"parameter {key!r} is nested too deeply") from None


def parse_params(text: str) -> dict[str, Any]:
    """One ``KEY=VALUE`` a line; a value is JSON if it parses, else a string."""
    params: dict[str, Any] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, eq, value = line.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"parameter line {line[:80]!r} is not KEY=VALUE")
        params[key.strip()] = _value(key.strip(), value)
    return params


def _number(form: dict[str, str], field: str, default: int) -> int:
    text = form.get(field, "").strip()
    if not text:
        return default
    digits = text[1:] if text[:1] in "+-" else text
    if not (digits.isascii() and digits.isdigit()):
        raise UsageError(f"{field} must be a whole number, not {text[:20]!r}")
    return int(text)


def _form_page(
    request: Request, site: Site, values: dict[str, str], error: str | None, status: int = 200
) -> Response:
    return render(
        request,
        "submit.html",
        status,
        builtins=builtins(),
        repositories=queries.git_repositories(site.engine),
        names=queries.names_page(site.engine, "", 0, NAMES_OFFERED),
        values=values,
        error=error,
        enabled=site.runs_jobs,
    )


@router.get("/submit")
def submit_form(request: Request, user: SignedIn, input: str = "") -> Response:
    values = {"function": "builtin:zhash", "input": input, "revision": "HEAD", "reuse": "on"}
    return _form_page(request, site_of(request), values, None)


def _submit(site: Site, form: dict[str, str], user: catalog.User) -> int:
    request = jobs.JobRequest(
        function_spec(form),
        form.get("input", "").strip(),
        parse_params(form.get("params", "")),
        reuse=form.get("reuse") == "on",
        priority=_number(form, "priority", 0),
        cpus=_number(form, "cpus", 1),
        max_attempts=_number(form, "attempts", 3),
    )
    if not request.input:
        raise UsageError("choose an input: a name or a PDH")
    return site.submit(request, user).id


@router.post("/submit")
async def submit_job(request: Request, user: SignedIn) -> Response:
    form = await read_form(request)
    site = site_of(request)
    try:
        job_id = await run_in_threadpool(_submit, site, form, user)
    except WarehouseError as e:
        page = await run_in_threadpool(_form_page, request, site, form, str(e), 400)
        return page
    return RedirectResponse(f"{PREFIX}/jobs/{job_id}", status_code=303)
