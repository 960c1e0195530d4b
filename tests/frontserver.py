"""A server of a test's own put before a real controller: it passes every
request on to the controller behind it, unless the test's subclass answers
some request itself (a hostile, broken or older controller's answer)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TypeVar
from urllib.parse import urlsplit

import httpx

# What the front sends: status, content type, body, and whether it says a
# longer body than it sends (a body that stops midway).
Answer = tuple[int, str, bytes, bool]


class Front(ThreadingHTTPServer):
    """Relays everything; a subclass overrides ``reply`` to answer otherwise."""

    daemon_threads = True

    def __init__(self, behind: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.behind = behind
        self.cut_short = 0  # answers the client stopped reading before their end

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def reply(self, command: str, path: str, relay: Callable[[], Answer]) -> Answer:
        """The answer to ``command`` of ``path`` (no query); ``relay()``
        asks the controller behind."""
        return relay()

    def headers(self, command: str, path: str, status: int) -> dict[str, str]:
        """Headers of the answer to ``command`` of ``path`` besides its type
        and length (a relayed answer's Retry-After is passed on too)."""
        return {}


class _Handler(BaseHTTPRequestHandler):
    server: Front
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _relay(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        passed: dict[str, str] = {}

        def relay() -> Answer:
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            resp = httpx.request(
                self.command, self.server.behind + self.path, headers=headers, content=body
            )
            if "retry-after" in resp.headers:
                passed["Retry-After"] = resp.headers["retry-after"]
            return (resp.status_code, resp.headers.get("content-type", ""), resp.content, False)

        path = self.path.split("?")[0]
        status, kind, sent, short = self.server.reply(self.command, path, relay)
        self.send_response(status)
        self.send_header("Content-Type", kind)
        for name, value in {**passed, **self.server.headers(self.command, path, status)}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(sent) + (100 if short else 0)))
        if short:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            try:
                self.wfile.write(sent)
                self.wfile.flush()
            except OSError:
                self.server.cut_short += 1
        if short:
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _relay


F = TypeVar("F", bound=Front)


@contextmanager
def serving(server: F) -> Iterator[F]:
    """``server`` answering on a thread of its own until the block ends."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def begin_put(url: str, token: str, length: int, sent: int) -> socket.socket:
    """A streamed put (POST /api/v1/collections/text) to the controller at
    ``url``, begun and not ended: its body said to be ``length`` bytes (a
    manifest of all but 2, a listing of 2) and ``sent`` of them sent. The
    put holds what it takes on the controller until the socket is closed."""
    where = urlsplit(url)
    s = socket.create_connection((where.hostname, where.port))
    s.sendall(
        (
            f"POST /api/v1/collections/text?manifest_size={length - 2}&listing_size=2 "
            f"HTTP/1.1\r\nHost: {where.netloc}\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Length: {length}\r\n\r\n"
        ).encode()
        + b"x" * sent
    )
    return s
