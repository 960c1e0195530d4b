"""Waiting, a bounded time, for a controller that is still starting.

`wh serve ... &` returns at once; a command run right after it would find
nothing listening yet, or a controller whose keep servers have not
registered. Clients wait for ``/api/v1/health`` to say "ok", at most
``$WH_WAIT`` seconds (default 30; 0: do not wait), and say so on stderr.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import time

from warehouse.errors import UsageError, WarehouseError
from warehouse.remote.httpconn import open_connection, where_of
from warehouse.remote.tls import tls_failure

__all__ = ["DEFAULT_WAIT", "controller_status", "wait_seconds", "wait_until_ready"]

DEFAULT_WAIT = 30.0
_POLL = 0.2


def wait_seconds() -> float:
    """``$WH_WAIT``: how long a client waits for a starting controller."""
    raw = os.environ.get("WH_WAIT", "").strip()
    if not raw:
        return DEFAULT_WAIT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise UsageError(f"WH_WAIT must be seconds from 0 to 3600, not {raw!r}")
    return value


HEALTH_LIMIT = 64 << 10


def controller_status(url: str, timeout: float = 5.0) -> str:
    """What ``/api/v1/health`` says ("ok" or "starting"); raises OSError or
    http.client's errors when it cannot ask, ValueError for another answer."""
    where, path = where_of(url.rstrip("/") + "/api/v1/health")
    if where[0] not in ("http", "https") or not where[1]:
        raise ValueError("not an http:// or https:// URL")
    conn = open_connection(where, timeout)
    try:
        conn.request("GET", path, headers={"Accept": "*/*"})
        resp = conn.getresponse()
        if not 200 <= resp.status < 300:
            raise ValueError(f"it answered {resp.status} {resp.reason}")
        # A health answer is a few bytes: one byte past the bound is enough to refuse.
        body = resp.read(HEALTH_LIMIT + 1)
        if len(body) > HEALTH_LIMIT:
            raise ValueError(f"a health answer over {HEALTH_LIMIT} bytes")
    finally:
        conn.close()
    status = json.loads(body).get("status")
    return str(status)


def wait_until_ready(url: str, seconds: float | None = None) -> None:
    """Return once the controller at ``url`` is up and started, or fail after ``seconds``."""
    limit = wait_seconds() if seconds is None else seconds
    deadline = time.monotonic() + limit
    said = False
    while True:
        try:
            status = controller_status(url)
            problem = "it is still starting its keep servers"
        except (OSError, http.client.HTTPException, ValueError, AttributeError) as e:
            status, problem = "", str(e) or type(e).__name__
            if tls_failure(e) is not None:
                # Something answered and its certificate was refused: that does not pass.
                raise WarehouseError(f"cannot reach the controller at {url}: {problem}") from None
        if status == "ok":
            return
        if time.monotonic() >= deadline:
            raise WarehouseError(
                f"cannot reach the controller at {url}: {problem}"
                + (f" (waited {limit:g} s; $WH_WAIT)" if limit else "")
            )
        if not said:
            print(
                f"waiting up to {limit:g} s for the controller at {url} to start ($WH_WAIT)",
                file=sys.stderr,
                flush=True,
            )
            said = True
        time.sleep(_POLL)
