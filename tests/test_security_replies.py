"""A client reads every reply with a bound (docs/server.md, "Reply bounds"):
a controller, or another cluster, that answers without end is refused with
one clear error, never a MemoryError. The "controller" here is a small HTTP
server on 127.0.0.1 that sends an endless or oversized answer."""

from __future__ import annotations

import resource
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import wh_process
from warehouse.remote.api import REPLY_LIMIT

PIECE = b"0," * (32 << 10)


class _Endless(BaseHTTPRequestHandler):
    """Answers every request with ``status`` and a body that never ends
    (``length``: a Content-Length header claiming that many bytes)."""

    protocol_version = "HTTP/1.0"  # the body ends when the connection does
    status = 200
    length: int | None = None

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._endless()

    def do_POST(self) -> None:
        self._endless()

    def _endless(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        if self.length is not None:
            self.send_header("Content-Length", str(self.length))
        self.end_headers()
        try:
            self.wfile.write(b"[")
            while True:
                self.wfile.write(PIECE)
        except OSError:
            pass  # the client hung up: what it should do


def _serve(status: int, length: int | None = None) -> Iterator[str]:
    handler = type("Handler", (_Endless,), {"status": status, "length": length})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def endless() -> Iterator[str]:
    yield from _serve(200)


@pytest.fixture
def endless_error() -> Iterator[str]:
    yield from _serve(500)


@pytest.fixture
def claims_huge() -> Iterator[str]:
    yield from _serve(200, length=1 << 40)


def _memory_capped() -> None:
    # Without the bound the client would take all the machine's memory
    # before it failed; with it, it holds at most REPLY_LIMIT of a reply.
    cap = REPLY_LIMIT * 6
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _wh(url: str, tmp_path: Path, *args: str) -> tuple[int, str]:
    env = {"WH_URL": url, "WH_TOKEN": "whtesttoken", "WH_WAIT": "0"}
    done = wh_process(
        *args, home=tmp_path / "home", env=env, timeout=600, preexec_fn=_memory_capped
    )
    return done.returncode, done.stderr


@pytest.mark.parametrize("args", [("ls", "reads"), ("name", "ls"), ("job", "ls")])
def test_an_endless_reply_is_one_error_line(
    endless: str, tmp_path: Path, args: tuple[str, ...]
) -> None:
    code, said = _wh(endless, tmp_path, *args)
    assert code == 1, said
    assert said.startswith(f"Error: the controller at {endless} answered GET"), said
    assert f"with more than {REPLY_LIMIT} bytes: refused" in said
    assert said.count("\n") == 1 and "MemoryError" not in said


def test_a_reply_claiming_more_than_the_bound_is_refused_unread(
    claims_huge: str, tmp_path: Path
) -> None:
    code, said = _wh(claims_huge, tmp_path, "ls", "reads")
    assert code == 1 and f"with more than {REPLY_LIMIT} bytes: refused" in said, said
    assert said.count("\n") == 1


def test_an_endless_error_is_cut_to_its_first_line(endless_error: str, tmp_path: Path) -> None:
    code, said = _wh(endless_error, tmp_path, "ls", "reads")
    assert code == 1, said
    assert said.startswith("Error: [0,0,0,") and said.count("\n") == 1, said[:200]
    assert len(said) < 400


def _python(code: str) -> tuple[int, str]:
    """``code`` run by this Python in a process of its own, its memory capped."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=600,
        preexec_fn=_memory_capped,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_an_endless_health_answer_is_refused(endless: str) -> None:
    code, said = _python(
        "from warehouse.remote.wait import controller_status\n"
        "try:\n"
        f"    controller_status({endless!r})\n"
        "except ValueError as e:\n"
        "    print('refused:', e)\n"
    )
    assert code == 0 and "refused: a health answer over" in said, said[-500:]


def test_a_keep_server_reads_its_controllers_answer_with_a_bound(endless: str) -> None:
    code, said = _python(
        "from warehouse.server.keepd.controller import ControllerError, fetch_keep_config\n"
        "try:\n"
        f"    fetch_keep_config({endless!r}, 'whtesttoken')\n"
        "except ControllerError as e:\n"
        "    print('refused:', e)\n"
    )
    assert code == 0 and "refused: GET" in said and "answered over" in said, said[-500:]
