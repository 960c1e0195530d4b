"""Attacks on the wire, tried as a plain user against real servers.

Forged md5sum listings, signatures stretched to another block size, slow and
oversized request bodies, and traffic without TLS (docs/security.md).
Each test performs the attack and fails if the defence is taken away.
"""

from __future__ import annotations

import hashlib
import os
import re
import select
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from certs import self_signed
from cluster import (
    WH_BIN,
    Controller,
    KeepPool,
    admin_and_alice,
    controller,
    keep_pool,
    listening,
    wh_serve,
)
from conftest import Runner
from warehouse import catalog
from warehouse.blocks import Locator
from warehouse.blocks.signing import legacy_signature
from warehouse.collection.writer import write_tree
from warehouse.remote.warehouse import RemoteWarehouse

MIB64 = 64 * 1024 * 1024


@pytest.fixture
def ctl(tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(tmp_path / "c.db", keep_servers) as c:
        yield c


def post(ctl: Controller, token: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(
        ctl.url + "/api/v1/collections",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        verify=False,
    )


def listing(out: str) -> dict[str, str]:
    pairs = (line.split("  ", 1) for line in out.splitlines())
    return {path: md5 for md5, path in pairs}


def small_tree(root: Path) -> Path:
    (root / "d").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"the true a\n")
    (root / "d" / "b.txt").write_bytes(b"the true b\n")
    return root


TRUE = {
    "a.txt": hashlib.md5(b"the true a\n").hexdigest(),
    "d/b.txt": hashlib.md5(b"the true b\n").hexdigest(),
}


# -- hole 2: forged md5sum listings ----------------------------------------


def test_another_users_forged_listing_is_never_printed(
    tmp_path: Path, ctl: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = small_tree(tmp_path / "src")
    alice, bob = ctl.user("alice"), ctl.user("bob")
    # Bob, guessing data Alice will store, stores it first with a forged listing.
    with RemoteWarehouse(ctl.url, bob) as as_bob:
        written = write_tree(as_bob.store, [src])
    forged = dict.fromkeys(TRUE, "0" * 32)
    text = written.manifest.format()
    for bad in (
        {"a.txt": "0" * 32, "d/b.txt": "0" * 31 + "\n"},  # not 32 lowercase hex digits
        {"a.txt": "A" * 32, "d/b.txt": "0" * 32},
        {"a.txt": "0" * 32},  # a file without a digest
        {**forged, "extra": "0" * 32},  # a digest for no file
    ):
        resp = post(ctl, bob, {"manifest_text": text, "file_md5s": bad})
        assert resp.status_code == 400, resp.text
        assert "file_md5s" in resp.json()["error"]
    assert catalog.list_collections(ctl.state.engine) == []
    resp = post(ctl, bob, {"manifest_text": text, "file_md5s": forged})
    assert resp.status_code == 200, resp.text
    assert resp.json()["file_md5s"] == forged  # his own claim, shown to him
    pdh = resp.json()["pdh"]

    run = Runner()
    monkeypatch.setenv("WH_URL", ctl.url)
    monkeypatch.setenv("WH_HOME", str(tmp_path / "home"))
    # Alice reads it before and after storing the same files herself.
    monkeypatch.setenv("WH_TOKEN", alice)
    assert listing(run("get", pdh, "--no-write").output) == TRUE
    assert run("put", str(src)).output.strip() == pdh
    assert listing(run("get", pdh, "--no-write").output) == TRUE
    assert listing(run("get", pdh, str(tmp_path / "out")).output) == TRUE
    # Bob's own get prints his claim; rehashing shows him it is false.
    monkeypatch.setenv("WH_TOKEN", bob)
    assert listing(run("get", pdh, "--no-write").output) == forged
    assert listing(run("get", pdh, "--no-write", "--rehash").output) == TRUE


# -- hole 4: a signature for one size passed off for another -------------------


def test_a_signature_does_not_stretch_to_another_size(
    ctl: Controller, keep_servers: KeepPool
) -> None:
    bob = ctl.user("bob")
    data = b"sixteen bytes!!\n"
    keepd = keep_servers.servers[0].url
    md5 = hashlib.md5(data).hexdigest()
    put = httpx.put(
        f"{keepd}/{md5}", content=data, headers={"Authorization": f"Bearer {bob}"}, verify=False
    )
    signed = Locator.parse(put.text.strip())
    assert signed.size == 16
    sig = signed.hint("A")
    huge = f"{md5}+{MIB64}+A{sig}"
    resp = post(ctl, bob, {"manifest_text": f". {huge} 0:{MIB64}:big\n"})
    assert resp.status_code == 403, resp.text
    assert f"{md5}+{MIB64}" in resp.json()["error"]
    assert catalog.list_collections(ctl.state.engine) == []
    # The true size is accepted.
    ok = post(ctl, bob, {"manifest_text": f". {signed} 0:16:small\n"})
    assert ok.status_code == 200, ok.text

    # A signature of the old format (no size in it) still reads until it
    # expires, but its size is checked against what is stored.
    expiry = int(time.time()) + 3600
    ttl = ctl.state.config.signature_ttl
    old = legacy_signature(md5, bob, expiry, keep_servers.signing_key, ttl)
    got = httpx.get(
        f"{keepd}/{md5}+16+A{old}@{expiry:08x}",
        headers={"Authorization": f"Bearer {bob}"},
        verify=False,
    )
    assert got.status_code == 200 and got.content == data
    stretched = f"{md5}+{MIB64}+A{old}@{expiry:08x}"
    resp = post(ctl, bob, {"manifest_text": f". {stretched} 0:{MIB64}:big\n"})
    assert resp.status_code == 400, resp.text
    assert f"{md5}+{MIB64}" in resp.json()["error"]
    fine = post(ctl, bob, {"manifest_text": f". {md5}+16+A{old}@{expiry:08x} 0:16:again\n"})
    assert fine.status_code == 200, fine.text


# -- hole 6: one user's requests cannot take the servers' memory or sockets --


def test_a_manifest_over_the_limit_is_refused_before_parsing(
    tmp_path: Path, keep_servers: KeepPool
) -> None:
    with controller(tmp_path / "c.db", keep_servers, max_manifest=100_000) as ctl:
        bob = ctl.user("bob")
        names = " ".join(f"0:0:f{i}" for i in range(20_000))
        text = f". d41d8cd98f00b204e9800998ecf8427e+0 {names}\n"
        assert 100_000 < len(text) < ctl.state.config.max_body
        resp = post(ctl, bob, {"manifest_text": text})
        assert resp.status_code == 413, resp.text
        assert "manifest_text" in resp.json()["error"]
        assert catalog.list_collections(ctl.state.engine) == []
        small = post(ctl, bob, {"manifest_text": ". d41d8cd98f00b204e9800998ecf8427e+0 0:0:f\n"})
        assert small.status_code == 200, small.text


# The client's own wait, far above the servers' body timeout: a server that
# held a slow body would still have it open when the client gives up
# (socket.timeout, the test fails). No elapsed time is asserted.
CLIENT_WAIT = 60


def _partial_request(url: str, head: str, body: bytes) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=CLIENT_WAIT)
    sock.sendall(head.encode() + body)
    return sock


def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (before
    CLIENT_WAIT, or socket.timeout fails the test)."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    sock.close()
    return b"".join(chunks)


@pytest.mark.slow
def test_slow_bodies_are_cut_off(tmp_path: Path) -> None:
    with keep_pool(tmp_path / "keep", 1, "--body-timeout", "1") as pool:
        keepd = pool.servers[0]
        md5 = hashlib.md5(b"x").hexdigest()
        head = (
            f"PUT /{md5} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer bob\r\n"
            f"Content-Length: {MIB64}\r\n\r\n"
        )
        # Partial 64 MiB PUTs, then silence: each must be answered and closed
        # by the server.
        socks = [_partial_request(keepd.url, head, os.urandom(100_000)) for _ in range(8)]
        answers = [_answer(s) for s in socks]
        assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), answers[0][:200]
        # A body trickled in is cut off too, at its deadline (1 s + length / 64 KiB/s).
        # Four bytes a second until the server answers or closes (the body
        # would take 500 s): a server that only timed out silence never would.
        trickle = _partial_request(keepd.url, head.replace(str(MIB64), "2000"), b"a")
        given_up = time.monotonic() + CLIENT_WAIT
        while not select.select([trickle], [], [], 0.25)[0]:
            assert time.monotonic() < given_up, "a trickled body was never cut off"
            try:
                trickle.sendall(b"a")
            except OSError:  # closed by the server between two bytes
                break
        assert _answer(trickle).startswith(b"HTTP/1.1 408 ")
        # No partial block is left behind.
        assert not [p for p in keepd.volume.rglob("*") if p.is_file()]

    with (
        keep_pool(tmp_path / "keep2", 1) as pool,
        controller(tmp_path / "c.db", pool, body_timeout=1.0) as ctl,
    ):
        bob = ctl.user("bob")
        head = (
            f"POST /api/v1/collections HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {bob}\r\n"
            "Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
        )
        socks = [_partial_request(ctl.url, head, b'{"manifest_text": "') for _ in range(4)]
        assert all(_answer(s).startswith(b"HTTP/1.1 408 ") for s in socks)


# -- hole 7: TLS and the access log --------------------------------------------


@pytest.mark.slow
def test_serve_over_tls_with_an_access_log(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    log = tmp_path / "access.log"
    env = {**os.environ, "WH_HOME": str(tmp_path / "home"), "WH_CA_BUNDLE": str(cert)}
    env.pop("WH_URL", None)
    server = wh_serve(
        env,
        *("--keep", "2", "--executor", "none"),
        *("--tls-cert", str(cert), "--tls-key", str(key), "--access-log", str(log)),
    )
    try:
        url, keeps = listening(server, keep=2, scheme="https")
        remote = admin_and_alice(env, url)
        token = remote["WH_TOKEN"]

        def wh(*args: str, env: dict[str, str] = remote) -> subprocess.CompletedProcess[str]:
            return subprocess.run([WH_BIN, *args], env=env, capture_output=True, text=True)

        src = small_tree(tmp_path / "src")
        put = wh("put", str(src))
        assert put.returncode == 0, put.stderr
        pdh = put.stdout.strip()
        got = wh("get", pdh, str(tmp_path / "out"))
        assert got.returncode == 0, got.stderr
        assert listing(got.stdout) == TRUE
        assert (tmp_path / "out" / "d" / "b.txt").read_bytes() == b"the true b\n"

        # A client that does not trust the certificate is refused, JSON and blocks alike.
        untrusting = {k: v for k, v in remote.items() if k != "WH_CA_BUNDLE"}
        refused = wh("get", pdh, "--no-write", env=untrusting)
        assert refused.returncode != 0
        assert "certificate" in refused.stderr.lower(), refused.stderr
        # Refused at once: a certificate does not get trusted by waiting ($WH_WAIT).
        assert "waiting up to" not in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
        keepd_url = keeps[0]
        md5 = hashlib.md5(b"x").hexdigest()
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.put(
                f"{keepd_url}/{md5}", content=b"x", headers={"Authorization": f"Bearer {token}"}
            )
        from warehouse.remote.blockhttp import BlockHttp, TransportError

        blocks = BlockHttp(token, 10)
        with pytest.raises(TransportError, match="CERTIFICATE_VERIFY_FAILED"):
            blocks.request("PUT", f"{keepd_url}/{md5}", b"x")
        blocks.close()
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(30) == 0
        if server.stdout:
            server.stdout.close()

    lines = log.read_text().splitlines()
    blocks_put = [ln for ln in lines if " PUT /" in ln and " 200 " in ln and "user=alice" in ln]
    assert blocks_put, lines
    assert any(" GET /" in ln and "+A…" in ln for ln in lines), lines
    # The put's collection, streamed (docs/server.md), its sizes in the query.
    recorded = " POST /api/v1/collections/text?manifest_size="
    assert any(recorded in ln and " 200 " in ln and "user=alice" in ln for ln in lines), lines
    text = log.read_text()
    assert token not in text and remote["WH_TOKEN"] not in text
    assert "Bearer" not in text
    assert not re.search(r"\+A[0-9a-f]{8,}", text), "a signature in the access log"


def test_the_access_log_path_keeps_no_secret_and_no_line_break() -> None:
    from warehouse.server.accesslog import redact

    sig = "A" + "0f" * 32 + "@6b169449"
    assert redact(f"/{'a' * 32}+3+{sig}+K03@local") == f"/{'a' * 32}+3+A…+K03@local"
    shown = redact(
        "/x\nforged 200",
        f"token=s3cret&api_token=t&pdh=abc+3&loc=b+{sig}&enc=b%2B{sig.replace('@', '%40')}&flag",
    )
    assert "\n" not in shown and "s3cret" not in shown and "0f0f" not in shown
    assert shown == "/x%0Aforged%20200?token=…&api_token=…&pdh=abc+3&loc=b+A…&enc=b+A…&flag"
