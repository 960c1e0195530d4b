"""A small client for the controller's JSON API; HTTP errors become library errors."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from warehouse.errors import (
    ConflictError,
    CorruptDataError,
    ForbiddenError,
    NotFoundError,
    UsageError,
    WarehouseError,
)
from warehouse.remote.blockhttp import IDLE_SECONDS
from warehouse.remote.httpxload import httpx
from warehouse.remote.tls import tls_failure, verify_for

__all__ = [
    "BUSY_TRIES",
    "BUSY_WAIT",
    "BUSY_WAIT_CAP",
    "ERROR_LIMIT",
    "NO_TOKEN",
    "REPLY_LIMIT",
    "ApiClient",
    "AuthError",
    "BusyError",
    "MethodNotAllowed",
    "check_token",
]

NO_TOKEN = "no token: set WH_TOKEN (`wh user add` and `wh token create` print one)"


def check_token(token: str) -> str:
    """The token as sent, or one clear error: none, or one no header can carry."""
    token = token.strip()
    if not token:
        raise UsageError(NO_TOKEN)
    if not token.isascii() or not token.isprintable() or " " in token:
        raise UsageError("WH_TOKEN is not a token: it holds spaces or unprintable characters")
    return token


class AuthError(ForbiddenError):
    """No token, or one the controller does not know (HTTP 401)."""


class MethodNotAllowed(WarehouseError):
    """HTTP 405: a route this controller does not have (an older version)."""


class BusyError(WarehouseError):
    """HTTP 503 or 429: the controller refused the request for now (it runs
    its most streamed puts at once, or the caller's own take their share of
    its disk); still so after the waits it asked for (docs/server.md). Exit
    code 1 (docs/cli.md, "Exit codes")."""


# A controller that answers 503 (or 429) with Retry-After is asked again
# after that many seconds, at most BUSY_WAIT_CAP per wait, at most
# BUSY_TRIES times and BUSY_WAIT seconds in all (docs/server.md, "Busy").
BUSY_WAIT_CAP = 30.0
BUSY_TRIES = 10
BUSY_WAIT = 300.0

_ERRORS: dict[int, type[WarehouseError]] = {
    400: UsageError,
    401: AuthError,
    403: ForbiddenError,
    404: NotFoundError,
    405: MethodNotAllowed,
    409: ConflictError,
    413: UsageError,
    429: BusyError,
    502: CorruptDataError,
    503: BusyError,
}


def retry_after(resp: httpx.Response) -> float | None:
    """The seconds a 503 or 429 asks the client to wait before it asks
    again (its Retry-After, seconds or a date), at most BUSY_WAIT_CAP;
    None when it does not say (the refusal is final)."""
    if resp.status_code not in (429, 503):
        return None
    raw = resp.headers.get("retry-after", "").strip()
    if raw.isdigit():
        return min(float(raw), BUSY_WAIT_CAP)
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return min(max(when.timestamp() - time.time(), 0.0), BUSY_WAIT_CAP)


_BROKEN = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)

# Bytes of a reply read at most (docs/server.md, "Reply bounds"): a reply
# that goes on past them is refused, so a controller (or another cluster)
# sending without end cannot fill the client's memory. A JSON reply is one
# object or one page of a list; a collection's manifest has its own bound
# (its size is in its PDH). An error's message is cut at ERROR_LIMIT.
REPLY_LIMIT = 256 << 20
ERROR_LIMIT = 64 << 10


class ApiClient:
    def __init__(self, url: str, token: str, *, timeout: float = 300.0) -> None:
        self.url = url.rstrip("/")
        token = check_token(token)
        # A refused connection is waited out once: the controller may be starting.
        self._may_wait = True
        self.http = httpx.Client(
            base_url=self.url + "/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(timeout, connect=10.0),
            limits=httpx.Limits(keepalive_expiry=IDLE_SECONDS),
            verify=verify_for(self.url),
        )

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, path: str, *, limit: int = REPLY_LIMIT, **kw: Any) -> Any:
        """The JSON of the reply, which may be ``limit`` bytes at most."""
        return self._json(method, path, self._send(method, path, limit=limit, **kw))

    def _json(self, method: str, path: str, resp: httpx.Response) -> Any:
        if resp.status_code == 204:
            return None
        try:
            return resp.json()
        except ValueError:
            raise self._garbage(method, path, resp, "not JSON") from None

    def call_object(
        self, method: str, path: str, *, limit: int = REPLY_LIMIT, **kw: Any
    ) -> dict[str, Any]:
        """Like ``call``, for a request answered with a JSON object."""
        out = self.call(method, path, limit=limit, **kw)
        if not isinstance(out, dict):
            raise WarehouseError(
                f"the controller at {self.url} answered {method} {path} "
                f"with {type(out).__name__}, not an object"
            )
        return out

    def _garbage(self, method: str, path: str, resp: httpx.Response, what: str) -> WarehouseError:
        start = resp.text[:80]
        return WarehouseError(
            f"the controller at {self.url} answered {method} {path} with {what}: {start!r}"
        )

    def get_bytes(self, path: str) -> bytes | None:
        """The body of a GET that answers other than JSON; None for no content (204)."""
        resp = self._send("GET", path)
        return None if resp.status_code == 204 else resp.content

    def get_into(
        self, path: str, write: Callable[[bytes], object], limit: int | None = None
    ) -> bool:
        """Like ``get_bytes``, but the body goes to ``write`` a piece at a
        time as it arrives, not held; False for no content (204). A body
        longer than ``limit`` is cut off there, an error."""
        resp = self._send("GET", path, stream=True)
        try:
            if resp.status_code == 204:
                return False
            got = 0
            try:
                for piece in resp.iter_bytes():
                    got += len(piece)
                    if limit is not None and got > limit:
                        raise WarehouseError(
                            f"the controller at {self.url} answered GET {path} "
                            f"with more than the {limit} bytes it can be"
                        )
                    write(piece)
            except httpx.TransportError as e:
                # Part of the body is written: it is not tried again.
                raise self._unreachable(e) from None
            return True
        finally:
            resp.close()

    def _unreachable(self, e: Exception) -> WarehouseError:
        return WarehouseError(f"cannot reach the controller at {self.url}: {e}")

    def _bounded(
        self, method: str, path: str, resp: httpx.Response, limit: int, *, cut: bool = False
    ) -> httpx.Response:
        """``resp`` (streamed) read whole, ``limit`` bytes at most: more is
        an error, or with ``cut`` left unread (an error's message)."""
        refused = WarehouseError(
            f"the controller at {self.url} answered {method} {path} with more than "
            f'{limit} bytes: refused (docs/server.md, "Reply bounds")'
        )
        try:
            length = int(resp.headers.get("content-length") or 0)
        except ValueError:
            length = 0
        pieces: list[bytes] = []
        got = 0
        try:
            if length > limit and not cut:
                raise refused
            for piece in resp.iter_bytes():
                got += len(piece)
                if got > limit:
                    if not cut:
                        raise refused
                    pieces.append(piece[: len(piece) - (got - limit)])
                    break
                pieces.append(piece)
        finally:
            resp.close()
        # As read (decoded): its length is what it holds now.
        gone = ("content-encoding", "content-length", "transfer-encoding")
        headers = [(k, v) for k, v in resp.headers.items() if k.lower() not in gone]
        return httpx.Response(
            resp.status_code, headers=headers, content=b"".join(pieces), request=resp.request
        )

    def _send(
        self,
        method: str,
        path: str,
        *,
        stream: bool = False,
        limit: int = REPLY_LIMIT,
        **kw: Any,
    ) -> httpx.Response:
        # A GET changes nothing, so a connection that broke under it (a kept-
        # alive one the server closed) earns it one more try; not a timeout, and
        # not other methods, which may have taken effect. A refused connection
        # waits (bounded) for a controller that is starting.
        tries = 2 if method == "GET" else 1
        attempt = 0
        busy = 0  # answers "busy, ask again later" so far
        waited = 0.0
        while True:
            try:
                # Always streamed, then read here with a bound (REPLY_LIMIT).
                resp = self.http.send(self.http.build_request(method, path, **kw), stream=True)
                # A busy controller did nothing of the request: it is sent
                # again (a streamed body is re-read from its start).
                wait = retry_after(resp)
                if wait is None or busy >= BUSY_TRIES or waited + wait > BUSY_WAIT:
                    if resp.status_code >= 400:
                        resp = self._bounded(method, path, resp, ERROR_LIMIT, cut=True)
                    elif not stream:
                        resp = self._bounded(method, path, resp, limit)
                    break
                resp.close()
                busy += 1
                waited += wait
                print(
                    f"the controller at {self.url} is busy ({resp.status_code}): "
                    f"asking again in {wait:.3g} s ({busy} of at most {BUSY_TRIES} tries)",
                    file=sys.stderr,
                    flush=True,
                )
                time.sleep(wait)
                continue
            except httpx.ConnectError as e:
                # Nothing was sent, so any method may be tried again.
                if not self._may_wait or tls_failure(e) is not None:
                    raise WarehouseError(
                        f"cannot reach the controller at {self.url}: {e}"
                    ) from None
                self._may_wait = False
                self.wait_until_ready()
                continue
            except _BROKEN as e:
                attempt += 1
                if attempt == tries:
                    raise WarehouseError(
                        f"cannot reach the controller at {self.url}: {e}"
                    ) from None
            except httpx.TransportError as e:
                raise WarehouseError(f"cannot reach the controller at {self.url}: {e}") from None
        if resp.status_code >= 400:
            try:
                body = resp.json()
            except ValueError:
                body = None
            # A proxy's page, or JSON of another shape, is shown as it came
            # (its first line: the message is one line).
            shown = next((x.strip() for x in resp.text.splitlines() if x.strip()), "")[:300]
            message = body.get("error", shown) if isinstance(body, dict) else shown
            message = str(message)
            error = _ERRORS.get(resp.status_code, WarehouseError)
            if error is BusyError:
                message = f"the controller at {self.url} is busy: {message}" + (
                    f" (asked {busy + 1} times over {waited:.3g} s)" if busy else ""
                )
            elif resp.status_code == 507:
                message = f"the controller at {self.url} has no room: {message}"
            elif resp.status_code == 413:
                # Over one of the controller's bounds, whatever sent it: said so.
                message = f"the controller at {self.url} refused it as too large: {message}"
            raise error(message)
        return resp

    def wait_until_ready(self) -> None:
        """Wait (bounded by $WH_WAIT) for a starting controller; see remote/wait.py."""
        from warehouse.remote.wait import wait_until_ready

        wait_until_ready(self.url)

    def get(self, path: str, **params: Any) -> Any:
        """The answer of GET ``path``. A list route answers a page at a time
        (docs/server.md): without a ``limit`` here, every page is read, by
        the ``rel="next"`` links the controller sends with a full page."""
        resp = self._send("GET", path, params=params or None)
        out = self._json("GET", path, resp)
        if "limit" in params or not isinstance(out, list):
            return out
        seen: set[str] = set()
        while (following := resp.links.get("next")) is not None:
            # Only the link's query is taken: the path, host and token stay ours.
            query = urlsplit(following.get("url", "")).query
            if query in seen:
                raise WarehouseError(
                    f"the controller at {self.url} answered GET {path} with a "
                    "next page it already gave"
                )
            seen.add(query)
            resp = self._send("GET", path, params=parse_qsl(query))
            page = self._json("GET", path, resp)
            if not isinstance(page, list):
                raise self._garbage("GET", path, resp, "a page that is not a list")
            out.extend(page)
        return out

    def post_stream(self, path: str, body: Iterable[bytes], length: int, **params: Any) -> Any:
        """POST ``body`` (of ``length`` bytes, read as it is sent: re-iterable,
        since a refused connection is tried again) with ``params``."""
        headers = {"Content-Length": str(length), "Content-Type": "application/octet-stream"}
        # The controller answers once it has checked and recorded the whole
        # body: its wait grows with the body (a second a megabyte: ten
        # million files' manifest and listing are about 750 MB).
        wait = self.http.timeout.read or 0.0
        timeout = httpx.Timeout(wait + length / 1e6, connect=10.0)
        return self.call(
            "POST", path, content=body, headers=headers, params=params, timeout=timeout
        )

    def post(self, path: str, body: Any) -> Any:
        return self.call("POST", path, json=body)

    def put(self, path: str, body: Any) -> Any:
        return self.call("PUT", path, json=body)
