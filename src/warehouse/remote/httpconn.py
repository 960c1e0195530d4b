"""Kept-alive HTTP(S) connections per server, over the standard library's http.client.

Both clients of ours use these: block transfers (``remote.blockhttp``) and
the controller's JSON API (``remote.api``). ``https://`` servers are reached
over TLS with their certificate and host name verified (``remote.tls``); the
context (loading the CAs costs a tenth of a second) is made at the first
``https`` connection, never for plain HTTP.
"""

from __future__ import annotations

import contextlib
import http.client
import select
import ssl
import threading
import time
from urllib.parse import urlsplit

from warehouse.remote.tls import client_context

__all__ = ["IDLE_SECONDS", "Connections", "Where", "open_connection", "where_of"]

# How long a client keeps an idle connection: well below the servers'
# keep-alive (server.serving.KEEPALIVE_SECONDS), so we never reuse one the
# server is closing at that moment.
IDLE_SECONDS = 10.0

Where = tuple[str, str, int]  # scheme, host, port


def where_of(url: str) -> tuple[Where, str]:
    """The server of ``url`` and the path (with its query) to ask it."""
    parts = urlsplit(url)
    https = parts.scheme == "https"
    where = (parts.scheme, parts.hostname or "", parts.port or (443 if https else 80))
    path = parts.path or "/"
    return where, path + (f"?{parts.query}" if parts.query else "")


def open_connection(
    where: Where, timeout: float, tls: ssl.SSLContext | None = None
) -> http.client.HTTPConnection:
    """A new connection to ``where``, not yet connected (``tls``: the context
    for https, made here when not given)."""
    scheme, host, port = where
    if scheme == "https":
        return http.client.HTTPSConnection(
            host, port, timeout=timeout, context=tls or client_context()
        )
    return http.client.HTTPConnection(host, port, timeout=timeout)


def _closed_by_server(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle connection has something to read: the server closed
    it (or sent what nobody asked for), so it cannot carry a request."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class Connections:
    """Idle connections per server, each dropped after IDLE_SECONDS. Thread-safe:
    a connection is used by one request at a time, taken and given back."""

    def __init__(self) -> None:
        # Idle connections per server, each with when it became idle.
        self._idle: dict[Where, list[tuple[float, http.client.HTTPConnection]]] = {}
        self._tls: ssl.SSLContext | None = None  # made at the first https connection
        self._lock = threading.Lock()
        self._closed = False

    def take(self, where: Where, timeout: float, fresh: bool = False) -> http.client.HTTPConnection:
        """An idle connection to ``where`` (unless ``fresh``), or a new one not
        yet connected; ``timeout`` is a new one's."""
        stale: list[http.client.HTTPConnection] = []
        found = None
        if not fresh:
            with self._lock:
                idle = self._idle.get(where, [])
                now = time.monotonic()
                while idle and found is None:
                    since, conn = idle.pop()
                    if now - since < IDLE_SECONDS and not _closed_by_server(conn):
                        found = conn
                    else:
                        stale.append(conn)
        for conn in stale:
            conn.close()
        if found is not None:
            return found
        tls = None
        if where[0] == "https":
            with self._lock:
                if self._tls is None:
                    self._tls = client_context()
                tls = self._tls
        return open_connection(where, timeout, tls)

    def give(self, where: Where, conn: http.client.HTTPConnection) -> None:
        """Keep ``conn``, whose last reply was read whole, for the next request."""
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
                with contextlib.suppress(OSError):
                    conn.close()
