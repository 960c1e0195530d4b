"""The keep client against keep servers that misbehave: each fake server here
is a small HTTP server of the test's own (not one of ours, mocked), answering
as a broken or hostile server could. Nothing wrong may be stored or returned."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from warehouse.blocks import Locator
from warehouse.errors import CorruptDataError, WarehouseError
from warehouse.manifest import Manifest
from warehouse.remote.keepclient import KeepClient, ReplicationError
from warehouse.remote.probe import Service
from warehouse.remote.warehouse import RemoteWarehouse


class _Server(ThreadingHTTPServer):
    """A fake server of the test's own on a free port of 127.0.0.1."""

    daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass


class FakeKeep(_Server):
    """A keep server holding blocks in memory; ``mode`` says how it misbehaves."""

    def __init__(self, mode: str) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.mode = mode
        self.blocks: dict[str, bytes] = {}
        self.stop = threading.Event()  # set at the end of the test: slow answers end
        self.gets = 0  # GET requests for a block held here


class Handler(_Quiet):
    server: FakeKeep

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _trickle(self, body: bytes) -> None:
        """200 and ``body`` one byte at a time, each well within the client's
        time for a read: a read timeout alone never ends it."""
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            for i in range(len(body)):
                if self.server.stop.wait(0.2):
                    return
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
        except OSError:
            return

    def do_PUT(self) -> None:
        data = self.rfile.read(int(self.headers["Content-Length"]))
        md5 = hashlib.md5(data).hexdigest()
        if self.server.mode == "trickle":
            # A locator at the end of a long reply, never reached.
            self._trickle(b" " * 65536 + f"{md5}+{len(data)}\n".encode())
            return
        self.server.blocks[md5] = data
        if self.server.mode == "wrong-locator":
            # Another block's locator: a client trusting it names bytes never stored.
            self._answer(200, f"{hashlib.md5(data + b'x').hexdigest()}+{len(data)}\n".encode())
        else:
            self._answer(200, f"{md5}+{len(data)}\n".encode())

    def do_HEAD(self) -> None:
        md5 = self.path.lstrip("/").split("+")[0]
        self.send_response(200 if md5 in self.server.blocks else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        md5 = self.path.lstrip("/").split("+")[0]
        data = self.server.blocks.get(md5)
        if data is None:
            self._answer(404, b"not found\n")
        elif self.server.mode == "redirect":
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:9/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.server.mode == "trickle":
            self.server.gets += 1
            self._trickle(data)
        elif self.server.mode == "endless":
            # 200 and no end: more bytes than the block has, without a length.
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b"\0" * 65536)
            except OSError:
                return
        else:
            self._answer(200, data)


@pytest.fixture
def servers(request: pytest.FixtureRequest) -> Iterator[list[FakeKeep]]:
    made = [FakeKeep(mode) for mode in request.param]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in made]
    for t in threads:
        t.start()
    yield made
    for s in made:
        s.stop.set()
        s.shutdown()
        s.server_close()


def client(
    servers: list[FakeKeep], replication: int = 1, timeout: float | None = None
) -> KeepClient:
    services = [Service(f"fake{i}", s.url) for i, s in enumerate(servers)]
    return KeepClient(
        services, "token", replication=replication, retries=1, backoff=0.0, timeout=timeout
    )


@pytest.mark.parametrize("servers", [["wrong-locator"]], indirect=True)
def test_a_put_answered_with_another_blocks_locator_is_not_a_copy(
    servers: list[FakeKeep],
) -> None:
    keep = client(servers)
    data = b"some bytes to keep\n" * 100
    try:
        with pytest.raises(ReplicationError):
            keep.put(data)
    finally:
        keep.close()


@pytest.mark.parametrize("servers", [["wrong-locator", "good"]], indirect=True)
def test_the_locator_returned_is_the_blocks_own(servers: list[FakeKeep]) -> None:
    keep = client(servers, replication=1)
    try:
        for n in range(8):  # blocks whose probe order puts either server first
            data = f"block {n}\n".encode() * 50
            stored = keep.put(data).locator
            assert (stored.md5, stored.size) == (hashlib.md5(data).hexdigest(), len(data))
            assert keep.get(stored) == data
    finally:
        keep.close()


@pytest.mark.parametrize("servers", [["endless"]], indirect=True)
def test_a_body_longer_than_the_block_is_cut_short_and_refused(servers: list[FakeKeep]) -> None:
    keep = client(servers)
    data = b"x" * 1000
    servers[0].blocks[hashlib.md5(data).hexdigest()] = data
    try:
        with pytest.raises(CorruptDataError, match=servers[0].url):
            keep.get(Locator(hashlib.md5(data).hexdigest(), len(data)))
    finally:
        keep.close()


@pytest.mark.parametrize("servers", [["endless", "good"]], indirect=True)
def test_a_body_without_end_is_passed_over_for_the_good_copy(servers: list[FakeKeep]) -> None:
    keep = client(servers)
    try:
        for n in range(8):  # blocks whose probe order puts either server first
            data = f"block {n}\n".encode() * 50
            md5 = hashlib.md5(data).hexdigest()
            for s in servers:
                s.blocks[md5] = data
            assert keep.get(Locator(md5, len(data))) == data
        assert {url for _, url in keep.stats.bad_copies} <= {servers[0].url}
    finally:
        keep.close()


@pytest.mark.parametrize("servers", [["redirect"]], indirect=True)
def test_a_redirect_is_said_as_such_not_taken_for_a_corrupt_copy(
    servers: list[FakeKeep],
) -> None:
    keep = client(servers)
    data = b"y" * 1000
    md5 = hashlib.md5(data).hexdigest()
    servers[0].blocks[md5] = data
    try:
        with pytest.raises(WarehouseError, match=f"{servers[0].url}: HTTP 302") as failed:
            keep.get(Locator(md5, len(data)))
        assert not isinstance(failed.value, CorruptDataError)
        assert keep.stats.bad_copies == []
    finally:
        keep.close()


class FakeController(_Server):
    """A controller answering each GET path from ``answers`` (status, body)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ControllerHandler)
        self.answers: dict[str, tuple[int, bytes]] = {}


class ControllerHandler(_Quiet):
    server: FakeController

    def do_GET(self) -> None:
        status, body = self.server.answers.get(self.path.split("?")[0], (404, b'{"error": "no"}'))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def fake_controller() -> Iterator[FakeController]:
    server = FakeController()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.answers["/api/v1/users/current"] = (200, b'{"name": "u"}')
    server.answers["/api/v1/keep_services"] = (
        200,
        json.dumps([{"id": "k", "url": "http://127.0.0.1:9"}]).encode(),
    )
    yield server
    server.shutdown()
    server.server_close()


def manifest_of(data: bytes, name: str) -> str:
    return f". {hashlib.md5(data).hexdigest()}+{len(data)} 0:{len(data)}:{name}\n"


def test_a_manifest_whose_pdh_is_not_the_one_asked_for_is_refused(
    fake_controller: FakeController,
) -> None:
    asked = Manifest.parse(manifest_of(b"what was stored", "a.txt"))
    other = manifest_of(b"something else", "a.txt")
    base = f"/api/v1/collections/{asked.pdh}"
    fake_controller.answers[base] = (200, json.dumps({"manifest_text": other}).encode())
    fake_controller.answers[base + "/manifest"] = (200, other.encode())
    wh = RemoteWarehouse(fake_controller.url, "token")
    try:
        with pytest.raises(CorruptDataError, match=fake_controller.url):
            wh.manifest(asked.pdh)
        with pytest.raises(CorruptDataError, match=fake_controller.url):
            wh.reader(asked.pdh, one_pass=True)
    finally:
        wh.close()


def test_an_answer_that_is_not_json_is_one_error(fake_controller: FakeController) -> None:
    pdh = Manifest.parse(manifest_of(b"x", "a")).pdh
    for status, body, said in (
        (200, b"<html>proxy error", fake_controller.url),
        (200, b'["a list"]', fake_controller.url),
        (500, b'["a list"]', "a list"),
    ):
        fake_controller.answers[f"/api/v1/collections/{pdh}"] = (status, body)
        wh = RemoteWarehouse(fake_controller.url, "token")
        try:
            with pytest.raises(WarehouseError, match=said):
                wh.manifest(pdh)
        finally:
            wh.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("servers", [["trickle", "good"]], indirect=True)
def test_a_copy_sent_one_byte_at_a_time_fails_and_the_next_is_read(
    servers: list[FakeKeep],
) -> None:
    """Each byte comes well within the client's 1 s for a read; the whole GET
    has 1 s plus a second per 64 KiB (docs/storage.md), so the slow copy
    fails and the good one is read."""
    keep = client(servers, timeout=1.0)
    try:
        for n in range(8):  # blocks whose probe order puts either server first
            data = f"block {n}\n".encode() * 50
            md5 = hashlib.md5(data).hexdigest()
            for s in servers:
                s.blocks[md5] = data
            assert keep.get(Locator(md5, len(data))) == data
        assert keep.stats.failovers > 0
        assert keep.stats.bad_copies == []  # slow, not corrupt
        # Once too slow, it is asked last: one deadline in all, not one a block.
        assert servers[0].gets == 1
    finally:
        keep.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("servers", [["trickle"]], indirect=True)
def test_a_get_from_a_trickling_server_ends_with_an_error(servers: list[FakeKeep]) -> None:
    keep = client(servers, timeout=1.0)
    data = b"z" * 1000
    md5 = hashlib.md5(data).hexdigest()
    servers[0].blocks[md5] = data
    try:
        with pytest.raises(WarehouseError, match=f"{servers[0].url}.*not over within 2 s"):
            keep.get(Locator(md5, len(data)))
    finally:
        keep.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("servers", [["trickle", "good"]], indirect=True)
def test_a_put_answered_one_byte_at_a_time_fails_and_the_next_server_takes_it(
    servers: list[FakeKeep],
) -> None:
    keep = client(servers, timeout=1.0)
    try:
        for n in range(8):  # blocks whose probe order puts either server first
            data = f"put {n}\n".encode() * 50
            stored = keep.put(data).locator
            assert hashlib.md5(data).hexdigest() in servers[1].blocks
            assert keep.get(stored) == data
    finally:
        keep.close()
    keep = client(servers[:1], timeout=1.0)
    try:
        with pytest.raises(ReplicationError, match=f"{servers[0].url}.*not over within"):
            keep.put(b"only the slow server\n")
    finally:
        keep.close()
