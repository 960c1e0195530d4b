"""The JSON API's client over http.client (remote/api.py): what it promised
over httpx, against a small real HTTP server on 127.0.0.1 whose answers a
test chooses (a query echoed, a connection dropped, pages, busy answers).
What a real controller answers is tested beside it (test_api, test_remote*,
test_security_replies, test_security_wire)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from warehouse.errors import UsageError, WarehouseError
from warehouse.remote.api import ApiClient


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.connections = 0
        self.seen: list[tuple[str, str, bytes]] = []  # method, path with query, body
        self.drop_next = 0  # requests read and then left unanswered, the connection closed
        self.busy_next = 0  # requests answered 503 with Retry-After: 0
        self.closed = threading.Event()  # a connection closed after its answer

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections += 1

    def _answer(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        with self.server.lock:
            self.server.seen.append((self.command, self.path, body))
            drop = self.server.drop_next > 0
            self.server.drop_next -= drop
            busy = not drop and self.server.busy_next > 0
            self.server.busy_next -= busy
        if drop:
            self.close_connection = True
            return
        if busy:
            self._answer(503, {"error": "busy"}, {"Retry-After": "0"})
            return
        path, _, query = self.path.partition("?")
        if path == "/api/v1/pages":
            # Three pages of one row; each full one links to the next on another host,
            # whose path and host the client must not take.
            after = int(dict(p.split("=") for p in query.split("&") if p).get("after", "0"))
            following = f"http://elsewhere.invalid/x?after={after + 1}"
            link = {} if after >= 2 else {"Link": f'<{following}>; rel="next"'}
            rows = [after + 1]
            self._answer(200, rows, link)
        elif path == "/api/v1/close-after":
            # Answered as if the connection stayed open, then closed.
            self._answer(200, {})
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            self.server.closed.set()
        elif path == "/api/v1/loop":
            self._answer(200, [1], {"Link": '<http://h/x?after=1>; rel="next"'})
        else:
            self._answer(200, {"path": path, "query": query, "body": body.decode()})

    do_GET = _handle
    do_POST = _handle
    do_DELETE = _handle


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server()
    thread = threading.Thread(target=s.serve_forever, daemon=True)
    thread.start()
    try:
        yield s
    finally:
        s.shutdown()
        s.server_close()
        thread.join()


@pytest.fixture
def api(server: _Server) -> Iterator[ApiClient]:
    client = ApiClient(server.url, "whtesttoken")
    try:
        yield client
    finally:
        client.close()


def test_query_values_are_encoded_as_httpx_did(api: ApiClient) -> None:
    out = api.get("/echo", on=True, off=False, none=None, many=["a", "b c"], n=3)
    assert out["query"] == "on=true&off=false&none=&many=a&many=b+c&n=3"
    assert api.call("DELETE", "/echo", params={"k": "x/y"})["query"] == "k=x%2Fy"
    # A path is sent escaped where it must be, as it was.
    assert api.get("/names/a b")["path"] == "/api/v1/names/a%20b"


def test_requests_share_one_kept_alive_connection(api: ApiClient, server: _Server) -> None:
    for _ in range(3):
        api.get("/echo")
    api.post("/echo", {"a": 1})
    assert server.connections == 1
    assert server.seen[-1][2] == b'{"a":1}'


def test_a_get_on_a_dropped_connection_is_asked_once_more(
    api: ApiClient, server: _Server
) -> None:
    api.get("/echo")
    server.drop_next = 1
    assert api.get("/echo", q=1)["query"] == "q=1"
    assert [s[1] for s in server.seen[-2:]] == ["/api/v1/echo?q=1"] * 2
    server.drop_next = 2  # twice in a row: an error, not a third try
    with pytest.raises(WarehouseError, match="cannot reach the controller"):
        api.get("/echo")
    assert len(server.seen) == 5


def test_a_post_on_a_dropped_connection_is_not_sent_again(
    api: ApiClient, server: _Server
) -> None:
    server.drop_next = 1
    with pytest.raises(WarehouseError, match="cannot reach the controller"):
        api.post("/echo", {"once": True})
    assert [s[0] for s in server.seen] == ["POST"]


def test_a_connection_the_server_closed_while_idle_is_not_reused(
    api: ApiClient, server: _Server
) -> None:
    """A POST (never tried twice) after the server closed the idle
    connection, without having said it would, goes on a new one."""
    api.get("/close-after")
    assert server.closed.wait(60)
    assert api.post("/echo", {"after": "close"})["body"] == '{"after":"close"}'
    assert server.connections == 2


def test_every_page_is_read_by_its_query_alone(api: ApiClient, server: _Server) -> None:
    assert api.get("/pages") == [1, 2, 3]
    assert [s[1] for s in server.seen] == [
        "/api/v1/pages",
        "/api/v1/pages?after=1",
        "/api/v1/pages?after=2",
    ]
    assert api.get("/pages", limit=1) == [1]  # a limit: that page alone
    with pytest.raises(WarehouseError, match="a next page it already gave"):
        api.get("/loop")


def test_a_streamed_body_is_sent_whole_again_after_a_busy_answer(
    api: ApiClient, server: _Server
) -> None:
    body = [b"abc", b"def"]
    server.busy_next = 1
    out = api.post_stream("/echo", body, 6, kind="x")
    assert out["body"] == "abcdef" and out["query"] == "kind=x"
    assert [(s[0], s[2]) for s in server.seen] == [("POST", b"abcdef")] * 2


def test_a_failing_body_is_its_own_error(api: ApiClient) -> None:
    def pieces() -> Iterator[bytes]:
        yield b"abc"
        raise OSError("the file went away")

    class Body:
        def __iter__(self) -> Iterator[bytes]:
            return pieces()

    with pytest.raises(OSError, match="the file went away"):
        api.post_stream("/echo", Body(), 6)


def test_a_url_that_is_not_http_is_one_error() -> None:
    # Not host "localhost" port 1: a scheme "localhost" (and no host at all).
    api = ApiClient("localhost:1", "whtesttoken")
    with pytest.raises(WarehouseError, match="not an http:// or https:// URL"):
        api.get("/x")
    for url in ("http://[::1", "http://127.0.0.1:port", "http://127.0.0.1:99999"):
        with pytest.raises(UsageError, match="is not one"):
            ApiClient(url, "whtesttoken")
