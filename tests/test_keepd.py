"""The keep server over real HTTP: uvicorn in a thread on 127.0.0.1, real volumes.

Each test starts its own servers on port 0. A few tests speak raw HTTP over
a socket, to see what the server does before a body has been sent or when a
client hangs up halfway.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from warehouse.blocks.locator import MAX_BLOCK_SIZE, Locator
from warehouse.blocks.signing import Check, check_signature, sign
from warehouse.blocks.volume import LocalVolume
from warehouse.server.keepd import KeepConfig, KeepServer, StaticTokenChecker, create_app
from warehouse.server.serving import ServerThread

ADMIN = "admin-token"
USER = "user-token"
OTHER = "other-token"
KEY = b"test-signing-key"
TTL = 3600


class Keep:
    def __init__(self, url: str, roots: list[Path], server: KeepServer) -> None:
        self.url = url
        self.roots = roots
        self.server = server

    def client(self, token: str | None = USER) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=10)

    def put(self, data: bytes, token: str = USER) -> Locator:
        with self.client(token) as c:
            r = c.put(f"/{hashlib.md5(data).hexdigest()}", content=data)
        assert r.status_code == 200, r.text
        return Locator.parse(r.text)

    def files(self) -> list[str]:
        """Every file under the volumes, temporaries included."""
        return sorted(
            str(p.relative_to(r)) for r in self.roots for p in r.rglob("*") if p.is_file()
        )

    def wait_idle(self) -> None:
        deadline = time.monotonic() + 10
        while len(self.server.trash_queue) or len(self.server.pull_queue):
            assert time.monotonic() < deadline, "work queues did not drain"
            time.sleep(0.02)


def make_config(roots: list[Path], **kw: Any) -> KeepConfig:
    return KeepConfig(
        volumes=[LocalVolume(r) for r in roots],
        signing_key=kw.pop("signing_key", KEY),
        tokens=kw.pop("tokens", StaticTokenChecker([ADMIN])),
        signature_ttl=TTL,
        service_token=ADMIN,
        **kw,
    )


@contextmanager
def running(tmp_path: Path, name: str = "k", volumes: int = 1, **kw: Any) -> Iterator[Keep]:
    roots = [tmp_path / f"{name}-vol{i}" for i in range(volumes)]
    app = create_app(make_config(roots, **kw))
    with ServerThread(app) as srv:
        yield Keep(srv.url, roots, app.state.keep)


@pytest.fixture
def keep(tmp_path: Path) -> Iterator[Keep]:
    with running(tmp_path) as k:
        yield k


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def raw_request(url: str, head: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(head.encode())
    return sock


def read_status(sock: socket.socket) -> int:
    reply = b""
    while b"\r\n" not in reply:
        chunk = sock.recv(4096)
        if not chunk:
            break
        reply += chunk
    return int(reply.split(b" ", 2)[1])


def until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


# --- PUT -------------------------------------------------------------------


def test_put_answers_a_signed_locator_and_get_returns_the_bytes(keep: Keep) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)  # several write batches
    with keep.client() as c:
        r = c.put(f"/{md5(data)}", content=data)
        assert r.status_code == 200
        assert r.headers["X-Keep-Replicas-Stored"] == "1"
        assert r.headers["content-type"].startswith("text/plain")
        loc = Locator.parse(r.text)
        assert loc.key == f"{md5(data)}+{len(data)}"
        assert check_signature(loc, USER, KEY, TTL) is Check.OK
        got = c.get(f"/{loc}")
        assert got.status_code == 200 and got.content == data
        head = c.head(f"/{loc}")
        assert head.status_code == 200 and head.headers["content-length"] == str(len(data))
    h = md5(data)
    assert keep.files() == [f"{h[:3]}/{h}"]


def test_put_with_size_in_the_path_and_the_empty_block(keep: Keep) -> None:
    with keep.client() as c:
        assert c.put(f"/{md5(b'abc')}+3", content=b"abc").status_code == 200
        assert c.put(f"/{md5(b'abc')}+4", content=b"abc").status_code == 400
        empty = c.put(f"/{md5(b'')}", content=b"")
        assert empty.status_code == 200
        assert c.get(f"/{empty.text}").content == b""
    assert len(keep.files()) == 1  # the empty block is never stored


def test_existing_block_is_not_rewritten_only_touched(keep: Keep) -> None:
    data = b"again"
    keep.put(data)
    path = keep.roots[0] / md5(data)[:3] / md5(data)
    os.utime(path, ns=(10**18, 10**18))
    inode = path.stat().st_ino
    keep.put(data, token=OTHER)
    assert path.stat().st_ino == inode
    assert path.stat().st_mtime_ns > 10**18
    assert keep.server.metrics.blocks_stored == 1


def test_put_of_the_right_bytes_replaces_a_corrupt_copy(keep: Keep) -> None:
    data = os.urandom(100_000)
    loc = keep.put(data)
    path = keep.roots[0] / loc.md5[:3] / loc.md5
    time.sleep(0.02)
    with open(path, "r+b") as f:  # one byte flipped in place
        f.seek(500)
        f.write(bytes([data[500] ^ 1]))
    with keep.client() as c:
        # HEAD reads a copy changed since it was last known good: not here.
        assert c.head(f"/{loc}").status_code == 404
        r = c.put(f"/{loc.md5}", content=data)
        assert r.status_code == 200 and r.headers["X-Keep-New"] == "1"
        assert c.head(f"/{loc}").status_code == 200
        assert c.get(f"/{loc}").content == data
    assert path.read_bytes() == data
    # The bad copy is kept aside (removed with the trash), never served.
    assert [p.name.split(".")[1] for p in path.parent.iterdir() if p.name != loc.md5] == ["corrupt"]


def test_hash_or_length_mismatch_stores_nothing(keep: Keep) -> None:
    data = os.urandom(2 * 1024 * 1024)
    with keep.client() as c:
        r = c.put(f"/{md5(b'something else')}", content=data)
        assert r.status_code == 400 and "MD5" in r.text
    assert keep.files() == []

    async def lying_lengths() -> tuple[int, int]:
        # Through the ASGI app directly: a real server never hands over more
        # bytes than Content-Length, but the app must not rely on that.
        app = create_app(make_config(keep.roots))
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://keep"
        ) as c:
            auth = {"Authorization": f"Bearer {USER}"}
            short = await c.put(
                f"/{md5(data)}", content=data[:-1], headers={**auth, "Content-Length": "2097152"}
            )
            long = await c.put(
                f"/{md5(data[:10])}", content=data[:20], headers={**auth, "Content-Length": "10"}
            )
            return short.status_code, long.status_code

    assert asyncio.run(lying_lengths()) == (400, 413)
    assert keep.files() == []


def test_put_needs_a_content_length(keep: Keep) -> None:
    def body() -> Iterator[bytes]:
        yield b"abc"

    with keep.client() as c:
        r = c.put(f"/{md5(b'abc')}", content=body())  # sent chunked
    assert r.status_code == 411
    assert keep.files() == []


def test_too_large_is_refused_before_the_body_is_sent(keep: Keep) -> None:
    size = MAX_BLOCK_SIZE + 1
    sock = raw_request(
        keep.url,
        f"PUT /{md5(b'x')} HTTP/1.1\r\nHost: k\r\nAuthorization: Bearer {USER}\r\n"
        f"Content-Length: {size}\r\n\r\n",
    )
    with sock:
        # Not one byte of the body has been sent, yet the answer is here.
        assert read_status(sock) == 413
    assert keep.files() == []


def test_client_hanging_up_mid_body_leaves_nothing(keep: Keep) -> None:
    size = 8 * 1024 * 1024
    h = md5(b"never sent")
    sock = raw_request(
        keep.url,
        f"PUT /{h} HTTP/1.1\r\nHost: k\r\nAuthorization: Bearer {USER}\r\n"
        f"Content-Length: {size}\r\n\r\n",
    )
    with sock:
        sock.sendall(os.urandom(3 * 1024 * 1024))
        # The write is under way: a temporary file holds what came so far.
        until(lambda: keep.files() != [], "no temporary file appeared")
    until(lambda: keep.server.metrics.requests["PUT", 400] == 1, "the PUT did not finish")
    assert keep.files() == []


def test_put_without_a_valid_token(keep: Keep) -> None:
    with keep.client(None) as c:
        assert c.put(f"/{md5(b'a')}", content=b"a").status_code == 401
        r = c.put(f"/{md5(b'a')}", content=b"a", headers={"Authorization": "Basic x"})
        assert r.status_code == 401
    with keep.client(None) as c:
        r = c.put(f"/{md5(b'a')}", content=b"a", headers={"Authorization": f"OAuth2 {USER}"})
        assert r.status_code == 200
    with keep.client() as c:
        assert c.put("/not-a-hash", content=b"a").status_code == 400


def test_all_volumes_full_is_507(tmp_path: Path) -> None:
    with running(tmp_path, reserve_bytes=1 << 62) as k, k.client() as c:
        assert c.put(f"/{md5(b'a')}", content=b"a").status_code == 507
        assert k.files() == []


def test_write_failure_is_503(keep: Keep) -> None:
    h = md5(b"a")
    (keep.roots[0] / h[:3]).write_bytes(b"a file where the shard directory goes")
    with keep.client() as c:
        assert c.put(f"/{h}", content=b"a").status_code == 503


def test_blocks_spread_over_volumes_and_reads_find_them(tmp_path: Path) -> None:
    with running(tmp_path, volumes=2) as k:
        locs = [k.put(f"block {i}".encode()) for i in range(6)]
        counts = [sum(1 for p in r.rglob("*") if p.is_file()) for r in k.roots]
        assert counts[0] > 0 and counts[1] > 0 and sum(counts) == 6
        with k.client() as c:
            for i, loc in enumerate(locs):
                assert c.get(f"/{loc}").content == f"block {i}".encode()


# --- GET / HEAD --------------------------------------------------------------


def test_read_permissions(tmp_path: Path, keep: Keep) -> None:
    loc = keep.put(b"secret")
    bare = loc.without_hints()
    with keep.client(None) as c:
        assert c.get(f"/{loc}").status_code == 401
        assert c.head(f"/{loc}").status_code == 401
    with keep.client(USER) as c:
        assert c.get(f"/{bare}").status_code == 401  # no signature
        expired = sign(bare, USER, KEY, TTL, now=time.time() - 2 * TTL)
        assert c.get(f"/{expired}").status_code == 403
        assert c.get("/not-a-locator").status_code == 400
        absent = sign(Locator.for_data(b"absent"), USER, KEY, TTL)
        assert c.get(f"/{absent}").status_code == 404
        assert c.head(f"/{absent}").status_code == 404
    with keep.client(OTHER) as c:
        assert c.get(f"/{loc}").status_code == 403  # signed for another token
    with keep.client(ADMIN) as c:
        assert c.get(f"/{bare}").content == b"secret"  # admins need no signature
    with running(tmp_path, "other-key", signing_key=b"another key") as k2:
        k2.put(b"secret")
        with k2.client(USER) as c:
            assert c.get(f"/{loc}").status_code == 403  # signed with another key


def test_corrupt_copy_is_502_counted_and_logged(
    keep: Keep, caplog: pytest.LogCaptureFixture
) -> None:
    loc = keep.put(b"fragile data")
    path = keep.roots[0] / loc.md5[:3] / loc.md5
    path.write_bytes(b"fragile dat!")
    with caplog.at_level(logging.ERROR, "warehouse.keepd"), keep.client() as c:
        assert c.get(f"/{loc}").status_code == 502
        metrics = httpx.get(f"{keep.url}/metrics", verify=False).text
    assert "wh_keepd_corrupt_reads_total 1.0\n" in metrics
    assert any(
        loc.md5 in r.getMessage() and str(keep.roots[0]) in r.getMessage() for r in caplog.records
    )


def test_a_good_copy_is_served_past_a_corrupt_one(tmp_path: Path) -> None:
    with running(tmp_path, volumes=2) as k:
        loc = k.put(b"twice")
        for root in k.roots:  # the same block on both volumes, one bad
            LocalVolume(root).put(loc.md5, b"twice")
        (k.roots[0] / loc.md5[:3] / loc.md5).write_bytes(b"twic!")
        with k.client() as c:
            assert c.get(f"/{loc}").content == b"twice"
        assert k.server.metrics.corrupt_reads == 1


@pytest.mark.parametrize("mapping", [True, False], ids=["mapped", "pooled-buffer"])
def test_large_blocks_read_back_verified_either_way(
    tmp_path: Path, mapping: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large blocks are mapped where the system can fault a mapping in ahead,
    else read into reused buffers: the same bytes, checked, either way."""
    monkeypatch.setattr(LocalVolume, "can_map", mapping and LocalVolume.can_map)
    blobs = [os.urandom(5 * 1024 * 1024 + i) for i in range(3)]
    with running(tmp_path, volumes=2) as k:
        locs = [k.put(b) for b in blobs]
        with k.client() as c:
            for _ in range(2):  # the second round reuses what the first used
                for loc, blob in zip(locs, blobs, strict=True):
                    assert c.get(f"/{loc}").content == blob
            bad = locs[0]
            (path,) = [
                r / bad.md5[:3] / bad.md5 for r in k.roots if (r / bad.md5[:3] / bad.md5).is_file()
            ]
            path.write_bytes(b"!" + blobs[0][1:])
            assert c.get(f"/{bad}").status_code == 502
            # The corrupt copy was moved aside: it is missing now.
            assert not path.exists()
            assert c.get(f"/{bad}").status_code == 404
            # A copy that cannot be read at all (here: a directory in its place).
            path.mkdir()
            assert c.get(f"/{bad}").status_code == 503
            assert c.get(f"/{locs[1]}").content == blobs[1]


# --- admin requests -----------------------------------------------------------


def test_admin_requests_need_an_admin_token(keep: Keep) -> None:
    requests = [
        ("GET", "/index", None),
        ("GET", "/index/abc", None),
        ("PUT", "/trash", []),
        ("PUT", "/pull", []),
        ("PUT", f"/untrash/{md5(b'a')}", None),
        ("GET", "/status", None),
    ]
    for token, status in ((None, 401), ("nobody-admin", 403), (ADMIN, 200)):
        with keep.client(token) as c:
            for method, path, body in requests:
                r = c.request(method, path, json=body)
                expected = 404 if status == 200 and "untrash" in path else status
                assert r.status_code == expected, (token, method, path, r.text)
    assert httpx.get(f"{keep.url}/metrics", verify=False).status_code == 200  # open to all


def test_index(keep: Keep) -> None:
    locs = sorted((keep.put(d) for d in (b"one", b"two", b"three")), key=lambda x: x.md5)
    with keep.client(ADMIN) as c:
        text = c.get("/index").text
        assert text.endswith("\n\n")
        lines = text[:-2].split("\n")
        assert [line.split(" ")[0] for line in lines] == [loc.key for loc in locs]
        path = keep.roots[0] / locs[0].md5[:3] / locs[0].md5
        assert lines[0].split(" ")[1] == str(path.stat().st_mtime_ns)
        one = c.get(f"/index/{locs[1].md5[:5]}").text
        assert one == f"{locs[1].key} {lines[1].split(' ')[1]}\n\n"
        assert c.get("/index/xyz").status_code == 400


def test_trash_only_when_mtime_unchanged_and_untrash(keep: Keep) -> None:
    stale, wanted = keep.put(b"stale"), keep.put(b"wanted again")
    with keep.client(ADMIN) as c:
        seen = dict(line.split(" ") for line in c.get("/index").text.split("\n") if line)
        keep.put(b"wanted again")  # written again after GC looked: must stay
        os.utime(keep.roots[0] / wanted.md5[:3] / wanted.md5, ns=(1, 1))
        trash = [{"locator": loc.key, "block_mtime": int(seen[loc.key])} for loc in (stale, wanted)]
        assert c.put("/trash", json=trash).status_code == 200
        keep.wait_idle()
        assert c.get(f"/{stale.without_hints()}").status_code == 404
        assert c.get(f"/{wanted.without_hints()}").status_code == 200
        assert c.put("/trash", json=[{"locator": "x", "block_mtime": 1}]).status_code == 400
        assert c.put("/trash", content=b"not json").status_code == 400
        assert c.put(f"/untrash/{stale.md5}").status_code == 200
        assert c.get(f"/{stale.without_hints()}").content == b"stale"
        assert c.put(f"/untrash/{md5(b'never here')}").status_code == 404


def test_pull_fetches_from_another_keep_server(tmp_path: Path) -> None:
    with running(tmp_path, "a") as a, running(tmp_path, "b") as b:
        data = os.urandom(100_000)
        loc = a.put(data)
        missing = Locator.for_data(b"nowhere")
        pulls = [
            {"locator": loc.key, "servers": ["http://127.0.0.1:9", a.url]},
            {"locator": missing.key, "servers": [a.url]},
        ]
        with b.client(ADMIN) as c:
            assert c.get(f"/{loc.without_hints()}").status_code == 404
            assert c.put("/pull", json=pulls).status_code == 200
            b.wait_idle()
            assert c.get(f"/{loc.without_hints()}").content == data
            assert c.get(f"/{missing}").status_code == 404
        assert b.server.metrics.blocks_stored == 1


def test_status(keep: Keep) -> None:
    keep.put(b"x")
    with keep.client(ADMIN) as c:
        s = c.get("/status").json()
    assert s["version"]
    assert s["volumes"] == [
        {
            "path": str(keep.roots[0]),
            "free_bytes": s["volumes"][0]["free_bytes"],
            "total_bytes": s["volumes"][0]["total_bytes"],
            "device": "{}:{}".format(*_device(keep.roots[0])),
            "block_count": None,  # until a whole index (GC's) counts them
            "stored_bytes": None,
            "requests": {},  # a directory sends no requests to a store
        }
    ]
    assert 0 < s["volumes"][0]["free_bytes"] <= s["volumes"][0]["total_bytes"]
    assert s["requests"]["PUT"]["200"] == 1
    assert s["queues"] == {"trash": 0, "pull": 0}
    with keep.client(ADMIN) as c:
        assert c.get("/index").status_code == 200
        counted = c.get("/status").json()["volumes"][0]
    assert (counted["block_count"], counted["stored_bytes"]) == (1, 1)


def _device(path: Path) -> tuple[int, int]:
    dev = os.stat(path).st_dev
    return os.major(dev), os.minor(dev)


def test_metrics_are_prometheus_text(keep: Keep) -> None:
    keep.put(b"counted")
    with keep.client(None) as c:
        c.get(f"/{md5(b'x')}+1")  # 401
        r = c.get("/metrics")
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for line in r.text.splitlines():
        if line.startswith("# "):
            assert line.split(" ")[1] in ("HELP", "TYPE")
            continue
        name, value = line.rsplit(" ", 1)
        samples[name] = float(value)
    assert samples['wh_keepd_requests_total{code="200",method="PUT"}'] == 1
    assert samples['wh_keepd_requests_total{code="401",method="GET"}'] == 1
    assert samples["wh_keepd_blocks_stored_total"] == 1
    assert samples["wh_keepd_bytes_in_total"] == len(b"counted")
    (free,) = [v for k, v in samples.items() if k.startswith("wh_keepd_volume_free_bytes{")]
    assert free > 0
    (key,) = [k for k in samples if k.startswith("wh_keepd_volume_total_bytes{")]
    major, minor = _device(keep.roots[0])  # the file system: the cluster page counts it once
    assert (
        key == f'wh_keepd_volume_total_bytes{{device="{major}:{minor}",volume="{keep.roots[0]}"}}'
    )
