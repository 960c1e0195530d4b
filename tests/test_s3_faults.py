"""S3 volumes when the store misbehaves: a small proxy between the volume
and SeaweedFS answers 503 SlowDown or 500, or hangs up, for as many
requests as a test says. Retries are bounded, the final error names the
volume, and a put that fails stores nothing."""

from __future__ import annotations

import hashlib
import http.client
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from cluster import WH_BIN, _listening
from s3_helpers import S3Server, s3_server, s3_spec, s3_specs  # noqa: F401 (fixtures)
from warehouse.blocks.volume import LocalVolume
from warehouse.volumes.base import open_volume

_SLOWDOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)
_INTERNAL = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>InternalError</Code>'
    b"<Message>We encountered an internal error.</Message></Error>"
)


_NO_BUCKET = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>NoSuchBucket</Code>'
    b"<Message>The specified bucket does not exist</Message></Error>"
)
_FAULTS = {
    "slowdown": (503, _SLOWDOWN),
    "internal": (500, _INTERNAL),
    "nobucket": (404, _NO_BUCKET),
}


class FaultProxy:
    """Forwards requests to the store unchanged (so signatures hold), except
    that the next ``failures`` requests whose method is in ``methods`` get
    ``fault``: "slowdown" (503), "internal" (500), "nobucket" (404, what a
    store answers once the bucket is deleted) or "hangup"."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.split("://", 1)[1]
        self.fault = "slowdown"
        self.failures = 0
        self.methods = {"GET", "PUT", "HEAD", "POST", "DELETE"}
        self.seen: list[str] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with proxy.lock:
                    proxy.seen.append(f"{self.command} {self.path}")
                    fail = proxy.failures > 0 and self.command in proxy.methods
                    if fail:
                        proxy.failures -= 1
                if fail and proxy.fault == "hangup":
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if fail:
                    status, text = _FAULTS[proxy.fault]
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(text)
                    return
                conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items()}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    got = conn.getresponse()
                    data = got.read()
                finally:
                    conn.close()
                self.send_response(got.status)
                for k, v in got.getheaders():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                # A HEAD's answer has no body but the object's length.
                length = got.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def fail(self, fault: str, count: int, methods: set[str] | None = None) -> None:
        with self.lock:
            self.fault, self.failures = fault, count
            self.methods = methods or {"GET", "PUT", "HEAD", "POST", "DELETE"}
            self.seen.clear()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[FaultProxy]:  # noqa: F811
    p = FaultProxy(s3_server.endpoint)
    yield p
    p.close()


@pytest.fixture
def spec(s3_spec: str, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch) -> str:  # noqa: F811
    """The test's volume, reached through the proxy, with three attempts a request."""
    monkeypatch.setenv("WH_S3_MAX_ATTEMPTS", "3")
    return s3_spec.split("?")[0] + f"?endpoint={proxy.url}"


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@pytest.mark.parametrize("fault", ["slowdown", "internal", "hangup"])
def test_passing_faults_are_retried(spec: str, proxy: FaultProxy, fault: str) -> None:
    volume = open_volume(spec)
    data = os.urandom(5000)
    proxy.fail(fault, 2)
    assert volume.put(md5(data), data) is True
    proxy.fail(fault, 2)
    assert volume.get(md5(data)) == data
    assert len(proxy.seen) == 3, "two failed attempts, then the one that worked"


def test_a_lasting_slowdown_is_a_clear_error_after_bounded_retries(
    spec: str, proxy: FaultProxy
) -> None:
    volume = open_volume(spec)
    data = b"held back"
    proxy.fail("slowdown", 100)
    with pytest.raises(OSError) as caught:
        volume.put(md5(data), data)
    name = f"S3 volume {spec.split('?')[0]}"
    assert f"{name}: HEAD {md5(data)}: Service Unavailable (HTTP 503)" in str(caught.value)
    assert len(proxy.seen) == 3, "three attempts, no more"
    proxy.fail("slowdown", 0)
    assert volume.stat(md5(data)) is None
    volume.put(md5(data), data)
    proxy.fail("slowdown", 100)
    with pytest.raises(OSError) as caught:
        volume.get(md5(data))
    assert f"{name}: GET {md5(data)}: SlowDown (HTTP 503)" in str(caught.value)
    assert len(proxy.seen) == 3


def test_a_keep_server_put_that_fails_in_the_store_stores_nothing(
    tmp_path: Path, spec: str, proxy: FaultProxy
) -> None:
    (tmp_path / "admin.token").write_text("admin-token")
    argv = [WH_BIN, "keepd", "--volume", spec, "--listen", "127.0.0.1:0"]
    argv += ["--admin-token-file", str(tmp_path / "admin.token")]
    env = {**os.environ, "WH_S3_MAX_ATTEMPTS": "2"}
    server = _listening(
        tmp_path, subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env), argv
    )
    try:
        auth = {"Authorization": "Bearer admin-token"}
        data = os.urandom(200_000)
        for fault in ("internal", "hangup"):
            proxy.fail(fault, 100, {"PUT"})
            put = httpx.put(f"{server.url}/{md5(data)}", content=data, headers=auth, timeout=120)
            assert put.status_code == 503, put.text
            assert "S3 volume" in put.text
            proxy.fail(fault, 0)
            head = httpx.head(f"{server.url}/{md5(data)}+{len(data)}", headers=auth)
            assert head.status_code == 404, "nothing half-recorded"
            assert httpx.get(f"{server.url}/index", headers=auth).text == "\n"
        put = httpx.put(f"{server.url}/{md5(data)}", content=data, headers=auth, timeout=120)
        assert put.status_code == 200
        got = httpx.get(f"{server.url}/{md5(data)}+{len(data)}", headers=auth)
        assert got.content == data
    finally:
        server.stop()


def test_a_gone_bucket_refuses_puts_and_the_disk_still_reads(
    tmp_path: Path, proxy: FaultProxy, spec: str
) -> None:
    """A keep server whose bucket is deleted while it runs (the store then
    answers NoSuchBucket) answers a PUT 503 naming the volume, so the client
    writes to another keep server; it neither says 200 for a block it did
    not store nor falls back to its disk. Blocks on its disk still read."""
    disk = tmp_path / "disk"
    old = os.urandom(5000)
    LocalVolume(disk).put(md5(old), old)
    root = tmp_path / "k"
    root.mkdir()
    (root / "signing.key").write_bytes(os.urandom(32).hex().encode())
    (root / "admin.token").write_text("admin-" + os.urandom(16).hex())
    argv = [WH_BIN, "keepd", "--listen", "127.0.0.1:0", "--volume", str(disk), "--volume", spec]
    argv += ["--signing-key-file", str(root / "signing.key")]
    argv += ["--admin-token-file", str(root / "admin.token")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    url = _listening(root, proc, argv).url
    auth = {"Authorization": f"Bearer {(root / 'admin.token').read_text()}"}
    try:
        proxy.fail("nobucket", 1000)
        data = os.urandom(3000)
        refused = httpx.put(f"{url}/{md5(data)}", content=data, headers=auth, timeout=120)
        assert refused.status_code == 503, refused.text
        assert spec.split("?")[0] in refused.text and "NoSuchBucket" in refused.text
        assert LocalVolume(disk).stat(md5(data)) is None
        got = httpx.get(f"{url}/{md5(old)}+5000", headers=auth, timeout=120)
        assert got.status_code == 200 and got.content == old
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stdout:
            proc.stdout.close()
