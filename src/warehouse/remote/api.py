"""A small client for the controller's JSON API; HTTP errors become library errors.

It speaks HTTP with the standard library's http.client, on the kept-alive
connections of ``remote.httpconn`` that block transfers use too, not with
httpx: importing httpx, httpcore and h11 was about 45 ms of CPU of every
``wh ls NAME`` or ``wh name ls`` through a controller (0.20 s in all;
docs/latency.md).
"""

from __future__ import annotations

import http.client
import json as jsonlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from email.utils import parsedate_to_datetime
from typing import Any, Protocol
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from warehouse.errors import (
    ConflictError,
    CorruptDataError,
    ForbiddenError,
    NotFoundError,
    UsageError,
    WarehouseError,
)
from warehouse.remote.httpconn import Connections, Where, where_of
from warehouse.remote.tls import tls_failure

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


class _Answered(Protocol):
    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, str]: ...


def retry_after(resp: _Answered) -> float | None:
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


# Bytes of a reply read at most (docs/server.md, "Reply bounds"): a reply
# that goes on past them is refused, so a controller (or another cluster)
# sending without end cannot fill the client's memory. A JSON reply is one
# object or one page of a list; a collection's manifest has its own bound
# (its size is in its PDH). An error's message is cut at ERROR_LIMIT.
REPLY_LIMIT = 256 << 20
ERROR_LIMIT = 64 << 10


# A query's values as httpx encoded them: a list repeats its key, booleans
# are JSON's true and false, None is empty.
Params = Mapping[str, Any] | Sequence[tuple[str, Any]]

# Seconds to connect (and for TLS, to shake hands); then ``timeout`` applies.
CONNECT_TIMEOUT = 10.0
_PIECE = 1 << 16  # bytes read from a reply at a time
# What a path may hold unescaped (an escape already made stays as it is).
_PATH_SAFE = "/:@!$&'()*+,;=%~"


def _value(v: object) -> str:
    return "true" if v is True else "false" if v is False else "" if v is None else str(v)


def query_string(params: Params) -> str:
    """``params`` in a URL's query, each key's values together."""
    items = params.items() if isinstance(params, Mapping) else params
    grouped: dict[str, list[str]] = {}
    for key, v in items:
        values = v if isinstance(v, list | tuple) else [v]
        grouped.setdefault(str(key), []).extend(_value(x) for x in values)
    return urlencode([(k, x) for k, xs in grouped.items() for x in xs])


def _next_link(value: str) -> str | None:
    """The URL of a Link header's ``rel="next"``, if it names one."""
    for link in value.split(","):
        url, _, params = link.partition(";")
        for param in params.split(";"):
            key, _, v = param.partition("=")
            if key.strip().lower() == "rel" and "next" in v.strip(" '\"").split():
                return url.strip(" <>'\"")
    return None


class _BodyFailed(Exception):
    """Reading the caller's body failed (its cause), not the connection."""


def _pieces(body: Iterable[bytes]) -> Iterator[bytes]:
    try:
        yield from body
    except Exception as e:
        raise _BodyFailed() from e


class _Reply:
    """A reply: its status, headers (names in lower case) and body, read
    whole into ``content`` or still on its connection (``pieces``)."""

    def __init__(
        self, conns: Connections, where: Where, conn: http.client.HTTPConnection
    ) -> None:
        resp = conn.getresponse()
        self.status_code = resp.status
        headers: dict[str, str] = {}
        for k, v in resp.getheaders():
            k = k.lower()
            headers[k] = f"{headers[k]}, {v}" if k in headers else v
        self.headers = headers
        self.content = b""
        self._conns, self._where, self._conn, self._resp = conns, where, conn, resp
        self._open = True

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return jsonlib.loads(self.content)

    def pieces(self) -> Iterator[bytes]:
        while piece := self._resp.read(_PIECE):
            yield piece
        # http.client ends a body the server cut short of its Content-Length
        # as if it were whole: it is not.
        if self._resp.length:
            raise http.client.IncompleteRead(b"", self._resp.length)

    def close(self) -> None:
        """Done with the body: the connection is kept for the next request
        when the body was read to its end, else closed."""
        if not self._open:
            return
        self._open = False
        if self._resp.isclosed() and not self._resp.will_close:
            self._conns.give(self._where, self._conn)
        else:
            self._conn.close()


class ApiClient:
    """Thread-safe: each request takes an idle connection, or opens one."""

    def __init__(self, url: str, token: str, *, timeout: float = 300.0) -> None:
        self.url = url.rstrip("/")
        token = check_token(token)
        # A refused connection is waited out once: the controller may be starting.
        self._may_wait = True
        self.timeout = timeout
        try:
            self._where, self._base = where_of(self.url + "/api/v1")
        except ValueError as e:  # a port that is no number, an unclosed [
            raise UsageError(f"the controller's URL {self.url!r} is not one: {e}") from None
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "*/*"}
        self._conns = Connections()

    def close(self) -> None:
        self._conns.close()

    def call(self, method: str, path: str, *, limit: int = REPLY_LIMIT, **kw: Any) -> Any:
        """The JSON of the reply, which may be ``limit`` bytes at most."""
        return self._json(method, path, self._send(method, path, limit=limit, **kw))

    def _json(self, method: str, path: str, resp: _Reply) -> Any:
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

    def _garbage(self, method: str, path: str, resp: _Reply, what: str) -> WarehouseError:
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
            pieces = resp.pieces()
            while True:
                try:
                    piece = next(pieces, None)
                except (OSError, http.client.HTTPException) as e:
                    # Part of the body is written: it is not tried again.
                    raise self._unreachable(e) from None
                if piece is None:
                    return True
                got += len(piece)
                if limit is not None and got > limit:
                    raise WarehouseError(
                        f"the controller at {self.url} answered GET {path} "
                        f"with more than the {limit} bytes it can be"
                    )
                write(piece)
        finally:
            resp.close()

    def _unreachable(self, e: Exception) -> WarehouseError:
        return WarehouseError(f"cannot reach the controller at {self.url}: {e}")

    def _bounded(
        self, method: str, path: str, resp: _Reply, limit: int, *, cut: bool = False
    ) -> None:
        """``resp``'s body read whole into its ``content``, ``limit`` bytes at
        most: more is an error, or with ``cut`` left unread (an error's message)."""
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
            for piece in resp.pieces():
                got += len(piece)
                if got > limit:
                    if not cut:
                        raise refused
                    pieces.append(piece[: len(piece) - (got - limit)])
                    break
                pieces.append(piece)
        finally:
            resp.close()
        resp.content = b"".join(pieces)

    def _target(self, path: str, params: Params | None) -> str:
        target = self._base + quote(path, safe=_PATH_SAFE)
        if params:
            target += ("&" if "?" in target else "?") + query_string(params)
        return target

    def _send(
        self,
        method: str,
        path: str,
        *,
        stream: bool = False,
        limit: int = REPLY_LIMIT,
        params: Params | None = None,
        json: Any = None,
        content: bytes | Iterable[bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> _Reply:
        if self._where[0] not in ("http", "https") or not self._where[1]:
            raise WarehouseError(
                f"cannot reach the controller at {self.url}: not an http:// or https:// URL"
            )
        target = self._target(path, params)
        sent = dict(self._headers)
        if json is not None:
            content = jsonlib.dumps(
                json, ensure_ascii=False, separators=(",", ":"), allow_nan=False
            ).encode("utf-8")
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        wait_read = self.timeout if timeout is None else timeout
        # A GET changes nothing, so a connection that broke under it (a kept-
        # alive one the server closed) earns it one more try, on a new one; not
        # a timeout, and not other methods, which may have taken effect. A
        # refused connection waits (bounded) for a controller that is starting.
        tries = 2 if method == "GET" else 1
        attempt = 0
        busy = 0  # answers "busy, ask again later" so far
        waited = 0.0
        fresh = False
        while True:
            conn = self._conns.take(self._where, CONNECT_TIMEOUT, fresh)
            try:
                if conn.sock is None:
                    conn.connect()
                conn.sock.settimeout(wait_read)
            except OSError as e:
                conn.close()
                # Nothing was sent, so any method may be tried again; not
                # past a timeout, nor a certificate refused.
                if (
                    isinstance(e, TimeoutError)
                    or not self._may_wait
                    or tls_failure(e) is not None
                ):
                    raise self._unreachable(e) from None
                self._may_wait = False
                self.wait_until_ready()
                continue
            try:
                # A streamed body is read from its start at each try.
                body = content if isinstance(content, bytes | None) else _pieces(content)
                conn.request(method, target, body=body, headers=sent)
                resp = _Reply(self._conns, self._where, conn)
                # Always read here with a bound (REPLY_LIMIT), unless streamed.
                # A busy controller did nothing of the request: it is sent
                # again (a streamed body is re-read from its start).
                wait = retry_after(resp)
                if wait is None or busy >= BUSY_TRIES or waited + wait > BUSY_WAIT:
                    if resp.status_code >= 400:
                        self._bounded(method, path, resp, ERROR_LIMIT, cut=True)
                    elif not stream:
                        self._bounded(method, path, resp, limit)
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
            except _BodyFailed as e:
                conn.close()
                raise e.__cause__ or e from None
            except TimeoutError as e:
                conn.close()
                raise self._unreachable(e) from None
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                attempt += 1
                if attempt == tries:
                    raise self._unreachable(e) from None
                fresh = True
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
        while (following := _next_link(resp.headers.get("link", ""))) is not None:
            # Only the link's query is taken: the path, host and token stay ours.
            query = urlsplit(following).query
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
        timeout = self.timeout + length / 1e6
        return self.call(
            "POST", path, content=body, headers=headers, params=params, timeout=timeout
        )

    def post(self, path: str, body: Any) -> Any:
        return self.call("POST", path, json=body)

    def put(self, path: str, body: Any) -> Any:
        return self.call("PUT", path, json=body)
