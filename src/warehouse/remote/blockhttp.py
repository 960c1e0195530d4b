"""HTTP(S) for block bodies: the standard library's http.client, kept-alive per server.

Blocks are up to 64 MiB. Measured on loopback, httpx spends 0.25–0.5 s
sending one such body (it goes through h11 in Python-sized pieces) where
http.client's sendall takes 0.02 s, and reading is alike. The connections
are kept by ``remote.httpconn`` (shared with the JSON API's client):
``https://`` servers are reached over TLS with their certificate and host
name verified (``remote.tls``).

Every request has two limits (docs/storage.md, "Keep server timeouts"): the
server may send (or take) nothing for ``timeout`` seconds, and the whole
request must be over within ``timeout`` plus one second per 64 KiB it moves
(the body sent and the most of the reply read), however the server trickles.
"""

from __future__ import annotations

import contextlib
import errno
import heapq
import http.client
import itertools
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from warehouse.remote.httpconn import IDLE_SECONDS, Connections, where_of

__all__ = [
    "DEFAULT_TIMEOUT",
    "IDLE_SECONDS",
    "MIN_RATE",
    "REPLY_LIMIT",
    "BlockHttp",
    "Body",
    "DeadlineError",
    "FileRange",
    "Reply",
    "TransportError",
    "keep_timeout",
    "request_budget",
]

# The most of a reply's body read when the caller says nothing: replies other
# than a block's bytes (a locator, an error) are short.
REPLY_LIMIT = 1 << 16
# Seconds a keep server may send (or take) nothing: $WH_KEEP_TIMEOUT.
DEFAULT_TIMEOUT = 60.0
MAX_TIMEOUT = 3600.0
# Bytes a second a request must average on top of that: the rule keep
# servers apply to PUT bodies (server.bodytimeout.MIN_BODY_RATE), so a 64 MiB
# block may take up to about 17 minutes, and no server holds a client longer.
MIN_RATE = 64 * 1024
# A body is sent in pieces of ``timeout`` seconds at MIN_RATE (3.75 MiB by
# default), at least this: each piece, not the whole body, must go within the
# timeout (a socket's timeout bounds a whole sendall), which asks no more than
# the rate of the whole-request rule; few pieces, few GIL hand-overs.
_MIN_PIECE = 1 << 20
# A file range is read and sent a piece of this at a time (each within the
# timeout as a larger piece would be).
_RANGE_PIECE = 1 << 20


def keep_timeout() -> float:
    """The setting ``keep_timeout`` ($WH_KEEP_TIMEOUT, checked by ``settings``)."""
    try:
        value = float(os.environ.get("WH_KEEP_TIMEOUT") or DEFAULT_TIMEOUT)
    except ValueError:
        return DEFAULT_TIMEOUT
    return value if 0 < value <= MAX_TIMEOUT else DEFAULT_TIMEOUT


def request_budget(timeout: float, nbytes: int) -> float:
    """Seconds a whole request moving ``nbytes`` may take."""
    return timeout + nbytes / MIN_RATE


class TransportError(Exception):
    """The server could not be reached, or the connection broke."""


class DeadlineError(TransportError):
    """The request was not over within its whole-request deadline: the server
    is too slow or stalled, and is not asked again for the same thing."""


class _Timed:
    __slots__ = ("conn", "fired", "over")

    def __init__(self, conn: http.client.HTTPConnection) -> None:
        self.conn: http.client.HTTPConnection | None = conn
        self.fired = False  # the deadline passed and the socket was shut
        self.over = False  # the request ended first


class _Watchdog:
    """Shuts the socket of a request still going at its deadline, which ends
    whatever read or write it is blocked in. One thread, started at first use."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: list[tuple[float, int, _Timed]] = []
        self._count = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def arm(self, conn: http.client.HTTPConnection, deadline: float) -> _Timed:
        timed = _Timed(conn)
        with self._cond:
            heapq.heappush(self._due, (deadline, next(self._count), timed))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="wh-keep-deadline", daemon=True
                )
                self._thread.start()
            self._cond.notify()
        return timed

    def disarm(self, timed: _Timed) -> bool:
        """End the watch; whether the deadline had passed first."""
        with self._cond:
            timed.over = True
            timed.conn = None  # kept no longer than the request
            return timed.fired

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                while self._due and self._due[0][2].over:
                    heapq.heappop(self._due)
                if not self._due:
                    self._cond.wait()
                    continue
                deadline, _, timed = self._due[0]
                left = deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                heapq.heappop(self._due)
                timed.fired = True
                sock = None if timed.conn is None else timed.conn.sock
                if sock is not None:
                    # The plain socket's shutdown, also under TLS: the TLS
                    # wrapper's would drop its state under the reading thread.
                    with contextlib.suppress(OSError):
                        socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def close(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()


@dataclass(frozen=True, slots=True)
class FileRange:
    """A body of ``size`` bytes of the open file ``fd`` from ``offset``,
    sent as read, a piece at a time (each send reads it again: a request
    tried once more, or a copy to another server, needs no copy kept)."""

    fd: int
    offset: int
    size: int

    def __len__(self) -> int:
        return self.size

    def pieces(self, size: int) -> Iterator[bytes]:
        at, end = self.offset, self.offset + self.size
        while at < end:
            piece = os.pread(self.fd, min(size, end - at), at)
            if not piece:
                raise OSError(errno.EIO, f"a file ends at {at} bytes, before {end}")
            at += len(piece)
            yield piece


Body = bytes | bytearray | memoryview | FileRange


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class BlockHttp:
    """Thread-safe: each request takes an idle connection to its server, or opens one."""

    def __init__(self, token: str, timeout: float) -> None:
        self.headers = {"Authorization": f"Bearer {token}"}
        self.timeout = timeout
        self._conns = Connections()
        self._watchdog = _Watchdog()

    def request(
        self,
        method: str,
        url: str,
        body: Body | None = None,
        *,
        limit: int = REPLY_LIMIT,
    ) -> Reply:
        """The server's reply; of its body at most ``limit`` + 1 bytes are read
        (one more than the caller can want: a body that long is wrong, and a
        server sending without end must not fill the memory).

        Raises DeadlineError when the whole request is not over within
        ``request_budget`` of what it moves, TransportError on other failures.
        """
        where, path = where_of(url)
        headers = dict(self.headers)
        size = 0 if body is None else len(body)
        if body is not None:
            headers["Content-Length"] = str(size)
        budget = request_budget(self.timeout, size + limit)
        piece = max(_MIN_PIECE, int(self.timeout * MIN_RATE))
        deadline = time.monotonic() + budget
        # A kept-alive connection the server closed meanwhile fails at once:
        # one fresh retry tells that apart from a server that is down.
        for fresh in (False, True):
            conn = self._conns.take(where, self.timeout, fresh)
            timed = self._watchdog.arm(conn, deadline)
            try:
                conn.request(method, path, headers=headers)
                if isinstance(body, FileRange):
                    for data in body.pieces(_RANGE_PIECE):
                        conn.send(data)
                elif body is not None:
                    view = memoryview(body).cast("B")
                    for at in range(0, size, piece):
                        conn.send(view[at : at + piece])
                resp = conn.getresponse()
                data = resp.read(limit + 1)
            except (OSError, http.client.HTTPException) as e:
                late = self._watchdog.disarm(timed)
                conn.close()
                if late:
                    raise DeadlineError(_late(method, url, budget)) from None
                if fresh:
                    raise TransportError(f"{method} {url}: {e}") from None
                continue
            if self._watchdog.disarm(timed):
                conn.close()
                raise DeadlineError(_late(method, url, budget))
            if len(data) > limit or not resp.isclosed():
                conn.close()  # the rest of the body is left unread: never reused
            elif resp.will_close:
                conn.close()
            else:
                self._conns.give(where, conn)
            return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._conns.close()
        self._watchdog.close()


def _late(method: str, url: str, budget: float) -> str:
    return f"{method} {url}: not over within {budget:.0f} s (docs/storage.md, keep_timeout)"
