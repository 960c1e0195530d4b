"""HTTP(S) for block bodies: the standard library's http.client, kept-alive per server.

Blocks are up to 64 MiB. Measured on loopback, httpx spends 0.25–0.5 s
sending one such body (it goes through h11 in Python-sized pieces) where
http.client's sendall takes 0.02 s, and reading is alike; the JSON API keeps
using httpx, block transfers use this. ``https://`` servers are reached over
TLS with their certificate and host name verified (``remote.tls``).
"""

from __future__ import annotations

import http.client
import ssl
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from warehouse.remote.tls import client_context

__all__ = ["IDLE_SECONDS", "REPLY_LIMIT", "BlockHttp", "Reply", "TransportError"]

# How long a client keeps an idle connection: well below the servers'
# keep-alive (server.serving.KEEPALIVE_SECONDS), so we never reuse one the
# server is closing at that moment.
IDLE_SECONDS = 10.0
# The most of a reply's body read when the caller says nothing: replies other
# than a block's bytes (a locator, an error) are short.
REPLY_LIMIT = 1 << 16


_Where = tuple[str, str, int]  # scheme, host, port


class TransportError(Exception):
    """The server could not be reached, or the connection broke."""


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
        # Idle connections per server, each with when it became idle.
        self._idle: dict[_Where, list[tuple[float, http.client.HTTPConnection]]] = {}
        self._tls: ssl.SSLContext | None = None  # made at the first https request
        self._lock = threading.Lock()
        self._closed = False

    def request(
        self,
        method: str,
        url: str,
        body: bytes | bytearray | memoryview | None = None,
        *,
        limit: int = REPLY_LIMIT,
    ) -> Reply:
        """The server's reply; of its body at most ``limit`` + 1 bytes are read
        (one more than the caller can want: a body that long is wrong, and a
        server sending without end must not fill the memory)."""
        parts = urlsplit(url)
        https = parts.scheme == "https"
        where = (parts.scheme, parts.hostname or "", parts.port or (443 if https else 80))
        path = parts.path or "/"
        headers = dict(self.headers)
        if body is not None:
            headers["Content-Length"] = str(len(body))
        # A kept-alive connection the server closed meanwhile fails at once:
        # one fresh retry tells that apart from a server that is down.
        for fresh in (False, True):
            conn = self._take(where, fresh)
            try:
                conn.request(method, path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read(limit + 1)
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                if fresh:
                    raise TransportError(f"{method} {url}: {e}") from None
                continue
            if len(data) > limit or not resp.isclosed():
                conn.close()  # the rest of the body is left unread: never reused
            elif resp.will_close:
                conn.close()
            else:
                self._give(where, conn)
            return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        raise AssertionError("unreachable")

    def _take(self, where: _Where, fresh: bool) -> http.client.HTTPConnection:
        stale: list[http.client.HTTPConnection] = []
        found = None
        if not fresh:
            with self._lock:
                idle = self._idle.get(where, [])
                now = time.monotonic()
                while idle and found is None:
                    since, conn = idle.pop()
                    if now - since < IDLE_SECONDS:
                        found = conn
                    else:
                        stale.append(conn)
        for conn in stale:
            conn.close()
        if found is not None:
            return found
        scheme, host, port = where
        if scheme == "https":
            with self._lock:
                if self._tls is None:
                    self._tls = client_context()
                tls = self._tls
            return http.client.HTTPSConnection(host, port, timeout=self.timeout, context=tls)
        return http.client.HTTPConnection(host, port, timeout=self.timeout)

    def _give(self, where: _Where, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if self._closed:
                conn.close()
            else:
                self._idle.setdefault(where, []).append((time.monotonic(), conn))

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for _, conn in conns:
                conn.close()
