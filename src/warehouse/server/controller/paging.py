"""Bounded list routes: ``limit`` rows a page, and a link to the next page.

A list route answers at most ``limit`` rows (default ``DEFAULT_LIMIT``, at
most ``MAX_LIMIT``), as ``/collections`` and ``/workflow-runs`` do. A full
page carries ``Link: <…&after=KEY>; rel="next"`` naming the last row's key,
so a client asks for the rows after it (``remote.api`` follows these links
for callers that give no ``limit``). Keys, not offsets: a row added or
removed meanwhile neither repeats nor hides another (docs/server.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from fastapi import Request, Response

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_ID",
    "MAX_INT",
    "MAX_LIMIT",
    "bounded",
    "filtered_page",
    "link_next",
]

Row = TypeVar("Row")
Key = TypeVar("Key")

DEFAULT_LIMIT = 1000
MAX_LIMIT = 10000
# The largest id an ``after`` may name (the catalogs' integer ids fit below).
MAX_ID = 2**63 - 1
# The largest step number or regol run id (INTEGER columns: 32 bits in PostgreSQL).
MAX_INT = 2**31 - 1


def bounded(limit: int) -> int:
    """``limit`` within 1..MAX_LIMIT (a negative LIMIT is none at all in SQLite)."""
    return min(max(limit, 1), MAX_LIMIT)


def link_next(request: Request, response: Response, rows: int, limit: int, after: object) -> None:
    """On a full page, the link to the rows after ``after`` (the last row's key)."""
    if rows < limit:
        return
    url = request.url.include_query_params(after=str(after), limit=limit)
    response.headers["Link"] = f'<{url}>; rel="next"'


def filtered_page(
    request: Request,
    response: Response,
    fetch: Callable[[Key, int], list[Row]],
    shown: Callable[[list[Row]], list[Row]],
    key: Callable[[Row], Key],
    after: Key,
    limit: int,
) -> list[Row]:
    """Up to ``limit`` rows that ``shown`` keeps, and the link to the next page.

    ``fetch(after, limit)`` reads the next raw rows in key order; ``shown``
    keeps those the caller may see. Raw pages are read until ``limit`` rows
    are kept or the rows run out, and the link names the last row *kept*, only
    under a full page: a row the caller may not see never reaches its answer,
    not even as the key of a link (docs/permissions.md).
    """
    kept: list[Row] = []
    while len(kept) < limit:
        raw = fetch(after, limit)
        if not raw:
            break
        for row in shown(raw):
            if len(kept) == limit:
                break
            kept.append(row)
        if len(raw) < limit:
            break
        after = key(raw[-1])
    link_next(request, response, len(kept), limit, key(kept[-1]) if kept else after)
    return kept
