"""Bounded list routes: ``limit`` rows a page, and a link to the next page.

A list route answers at most ``limit`` rows (default ``DEFAULT_LIMIT``, at
most ``MAX_LIMIT``), as ``/collections`` and ``/workflow-runs`` do. A full
page carries ``Link: <…&after=KEY>; rel="next"`` naming the last row's key,
so a client asks for the rows after it (``remote.api`` follows these links
for callers that give no ``limit``). Keys, not offsets: a row added or
removed meanwhile neither repeats nor hides another (docs/server.md).
"""

from __future__ import annotations

from fastapi import Request, Response

__all__ = ["DEFAULT_LIMIT", "MAX_ID", "MAX_INT", "MAX_LIMIT", "bounded", "link_next"]

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
