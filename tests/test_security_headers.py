"""Slow request headers are timed out (docs/security.md, request bounds).

Against a real `wh keepd` and a real `wh serve`, both started with
`--header-timeout 1`, over raw sockets: a connection that sends half a
request line and then nothing, one that dribbles header bytes, and one that
sends nothing at all are each answered 408 (or just closed) and closed
by the server, not held until the client gives up; a whole request on a new connection, and a
second one on a kept-alive connection after a pause longer than the
timeout, are still answered.
"""

from __future__ import annotations

import itertools
import os
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import keep_pool, listening, wh_serve

TIMEOUT = 1.0
# The client's own wait, far above the server's timeout: without the server's
# deadline each of these connections is still open when the client gives up
# (socket.timeout, the test fails); with it, the server closes it first,
# however loaded the machine. No elapsed time is asserted.
CLIENT_WAIT = 60.0


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=CLIENT_WAIT)


def _until_closed(sock: socket.socket) -> bytes:
    """What the server sent until it closed the connection: by a FIN, or by
    a reset (a server closing a socket with the client's bytes unread, as
    for the dribbling client, resets it). The client's own CLIENT_WAIT
    running out (socket.timeout) is not a close: it fails the test."""
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    return b"".join(chunks)


def _request(sock: socket.socket, path: str, auth: str) -> bytes:
    """One whole GET on a kept-alive connection: its whole answer."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    end = data.index(b"\r\n\r\n") + 4
    length = int(data[:end].decode().lower().split("content-length:")[1].split()[0])
    while len(data) < end + length:
        chunk = sock.recv(65536)
        assert chunk, data
        data += chunk
    return data


def _slow_clients_are_cut_off(url: str, path: str, auth: str = "") -> None:
    half_line = _connect(url)
    half_line.sendall(f"GET {path} HT".encode())
    half_headers = _connect(url)
    half_headers.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nX-Slow: ab".encode())
    silent = _connect(url)
    dribble = _connect(url)
    dribble.sendall(b"G")
    # Ten bytes a second, the header never ending, until the server answers or
    # closes: a server that only timed out silence would take them for ever.
    header = f"ET {path} HTTP/1.1\r\nHost: x\r\nX-Slow: ".encode()
    given_up = time.monotonic() + CLIENT_WAIT
    for sent in itertools.count():
        if select.select([dribble], [], [], 0.1)[0]:
            break
        assert time.monotonic() < given_up, "a dribbled header was never cut off"
        try:
            dribble.sendall(header[sent : sent + 1] or b"a")
        except OSError:  # closed by the server between two bytes
            break
    # Each read ends with the server closing the connection (EOF), not with
    # the client's CLIENT_WAIT running out (socket.timeout).
    answers = [_until_closed(s) for s in (half_line, half_headers, silent, dribble)]
    for answer in answers:
        assert answer == b"" or answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert answers[1].startswith(b"HTTP/1.1 408 "), answers[1][:200]

    # Whole requests still work, and a pause between two requests on one
    # connection is the keep-alive's business, not the header deadline's.
    kept = _connect(url)
    assert _request(kept, path, auth).startswith(b"HTTP/1.1 200 ")
    time.sleep(TIMEOUT * 2)
    assert _request(kept, path, auth).startswith(b"HTTP/1.1 200 ")
    kept.close()


@pytest.fixture
def serve_url(tmp_path: Path) -> Iterator[str]:
    env = {**os.environ, "WH_HOME": str(tmp_path / "home")}
    env.pop("WH_URL", None)
    server = wh_serve(
        env, "--executor", "none", "--header-timeout", str(TIMEOUT), "--access-log", "off"
    )
    try:
        yield listening(server)[0]
    finally:
        server.terminate()
        server.wait(30)
        if server.stdout:
            server.stdout.close()


def test_slow_headers_are_cut_off_by_keepd(tmp_path: Path) -> None:
    with keep_pool(tmp_path / "keep", 1, "--header-timeout", str(TIMEOUT)) as pool:
        auth = f"Authorization: Bearer {pool.admin_token}\r\n"
        _slow_clients_are_cut_off(pool.servers[0].url, "/status", auth)


def test_slow_headers_are_cut_off_by_the_controller(serve_url: str) -> None:
    _slow_clients_are_cut_off(serve_url, "/api/v1/health")
