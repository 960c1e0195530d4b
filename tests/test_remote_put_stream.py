"""A put through a controller streams its manifest and listing
(POST /api/v1/collections/text): stored exactly as an embedded put stores
the same tree, past the bound a whole manifest has, and hostile bodies
refused with nothing recorded (a real controller and keep servers)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from cluster import (
    Controller,
    KeepPool,
    admin_and_alice,
    controller,
    ctl_fixture,
    listening,
    pool_fixture,
    row_counts,
    wh_serve,
)
from frontserver import begin_put
from memory_helpers import WH, limited
from warehouse.catalog.schema import (
    collection_listing_parts,
    collection_listings,
    collections,
)
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import UsageError
from warehouse.remote.warehouse import RemoteWarehouse

# Small bounds, so that a small tree is over them: the most of one manifest
# held at once (a whole one on POST /collections, a line here), and the most
# a streamed body may send.
MAX_MANIFEST = 64 << 10
MAX_SPOOLED = 4 << 20
PATH = "/api/v1/collections/text"


pool = pool_fixture("module")
ctl = ctl_fixture(max_manifest=MAX_MANIFEST, max_spooled=MAX_SPOOLED)


def _tree(root: Path, dirs: int, per_dir: int) -> Path:
    """Small files, some empty, in ``dirs`` directories, and an empty one."""
    for d in range(dirs):
        (root / f"dir-{d:03d}").mkdir(parents=True)
        for f in range(per_dir):
            i = d * per_dir + f
            (root / f"dir-{d:03d}" / f"file-{i:06d}.txt").write_bytes(
                b"" if i % 7 == 0 else b"%d\n" % i
            )
    (root / "empty dir").mkdir()
    (root / "top é.txt").write_bytes(b"at the top\n")
    # Names the manifest escapes and the listing's JSON escapes.
    (root / 'a "quoted"\\name:\ttab').write_bytes(b"escaped\n")
    return root


def _recorded(engine: sa.Engine, pdh: str, user: str) -> tuple[object, ...]:
    """The catalog's rows of collection ``pdh`` and ``user``'s listing of it."""
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(
                collections.c.manifest_blocks, collections.c.size, collections.c.file_count
            ).where(collections.c.pdh == pdh)
        ).one()
        listing = conn.execute(
            sa.select(collection_listings.c.file_md5s).where(
                (collection_listings.c.pdh == pdh) & (collection_listings.c.user == user)
            )
        ).scalar_one()
        parts = conn.execute(
            sa.select(collection_listing_parts.c.part, collection_listing_parts.c.text)
            .where(
                (collection_listing_parts.c.pdh == pdh) & (collection_listing_parts.c.user == user)
            )
            .order_by(collection_listing_parts.c.part)
        ).all()
    return tuple(row), listing, [tuple(p) for p in parts]


def test_a_put_past_the_manifest_bound_is_stored_as_an_embedded_put_stores_it(
    tmp_path: Path, ctl: Controller, home: Path
) -> None:
    # 20,000 files: a manifest of ~600 KB (the bound is 64 KB) and a listing
    # of ~1.3 MB, kept in two parts.
    src = _tree(tmp_path / "src", 200, 100)
    token = ctl.user("alice")
    with RemoteWarehouse(ctl.url, token) as remote:
        put = remote.put(src)
        pdh = put.pdh
        # The same manifest sent whole is over the bound.
        whole = remote.manifest(pdh).format()
        assert len(whole) > MAX_MANIFEST
        with pytest.raises(UsageError, match="max manifest size"):
            remote.api.post("/collections", {"manifest_text": whole})
        remote.get(pdh, tmp_path / "back")
    with EmbeddedWarehouse(home) as local:
        assert local.put(src).pdh == pdh
        assert _recorded(ctl.state.engine, pdh, "alice") == _recorded(local.engine, pdh, local.user)
    parts = _recorded(ctl.state.engine, pdh, "alice")[2]
    assert isinstance(parts, list) and len(parts) == 2, "the listing is kept in two parts"
    _same_tree(src, tmp_path / "back")


def _same_tree(a: Path, b: Path) -> None:
    left = sorted(p.relative_to(a) for p in a.rglob("*"))
    assert left == sorted(p.relative_to(b) for p in b.rglob("*"))
    for rel in left:
        if (a / rel).is_file():
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


# -- hostile bodies ------------------------------------------------------------


class Alice:
    """A user with one stored block, signed for her, to write manifests of."""

    def __init__(self, ctl: Controller) -> None:
        self.token = ctl.user("alice")
        self.url = ctl.url
        with RemoteWarehouse(ctl.url, self.token) as remote:
            self.data = b"hello\n"
            self.loc = str(remote.store.put(self.data).locator)
            self.md5 = hashlib.md5(self.data).hexdigest()

    def send(
        self, text: bytes, listing: bytes, writes: bytes = b"", token: str | None = None
    ) -> httpx.Response:
        params = {"manifest_size": len(text), "listing_size": len(listing)}
        headers = {"Authorization": f"Bearer {token or self.token}"}
        return httpx.post(
            self.url + PATH, params=params, content=text + listing + writes, headers=headers
        )

    def listing(self, *paths: str) -> bytes:
        return json.dumps({p: self.md5 for p in paths}, separators=(",", ":")).encode()


@pytest.fixture
def alice(ctl: Controller) -> Alice:
    return Alice(ctl)


def _refused(resp: httpx.Response, status: int, *said: str) -> None:
    assert resp.status_code == status, resp.text
    for words in said:
        assert words in resp.json()["error"], resp.text


def test_a_good_body_is_recorded(alice: Alice, ctl: Controller) -> None:
    text = f". {alice.loc} 0:6:a.txt\n".encode()
    resp = alice.send(text, alice.listing("a.txt"), f"{alice.md5} 6 1\n".encode())
    assert resp.status_code == 200, resp.text
    out = resp.json()
    portable = f". {alice.loc.split('+A')[0]} 0:6:a.txt\n".encode()
    assert out == {
        "pdh": f"{hashlib.md5(portable).hexdigest()}+{len(portable)}",
        "size": 6,
        "file_count": 1,
    }
    assert row_counts(ctl.state.engine) == {
        "collections": 1,
        "collection_listings": 1,
        "collection_listing_parts": 0,
        "block_writes": 1,
    }


def test_hostile_bodies_are_refused_and_leave_nothing(alice: Alice, ctl: Controller) -> None:
    loc = alice.loc
    bare = loc.split("+A")[0]
    one = alice.listing("a.txt")
    before = row_counts(ctl.state.engine)
    cases: list[tuple[bytes, bytes, bytes, int, tuple[str, ...]]] = [
        # Not signed for her: what she may not read, she may not record.
        (f". {bare} 0:6:a.txt\n".encode(), one, b"", 403, ("line 1", "is not signed")),
        # A token that is no locator, named with its line.
        (f". {loc} 0:6:a.txt\n. zz 0:0:b\n".encode(), one, b"", 400, ("line 2", "'zz'")),
        # No newline at the end.
        (f". {loc} 0:6:a.txt".encode(), one, b"", 400, ("missing newline",)),
        # One endless line: refused at the bound, not read whole.
        (b". " + b"x" * (MAX_MANIFEST + 10), one, b"", 413, ("line 1", f"{MAX_MANIFEST}")),
        # Streams out of the normalized order.
        (
            f"./b {loc} 0:6:x\n./a {loc} 0:6:x\n".encode(),
            alice.listing("b/x", "a/x"),
            b"",
            400,
            ("line 2", "normalized"),
        ),
        # A file that is also a directory.
        (
            f". {loc} 0:6:a\n./a {loc} 0:6:x\n".encode(),
            alice.listing("a", "a/x"),
            b"",
            400,
            ("line 2", "file and also a directory"),
        ),
        # Listings that are not the manifest's files in its order.
        (f". {loc} 0:6:a.txt\n".encode(), alice.listing("b.txt"), b"", 400, ("'a.txt'",)),
        (f". {loc} 0:6:a.txt\n".encode(), b"{}", b"", 400, ("'a.txt'",)),
        (
            f". {loc} 0:6:a.txt\n".encode(),
            alice.listing("a.txt", "b.txt"),
            b"",
            400,
            ("more than the manifest's files",),
        ),
        (
            f". {loc} 0:6:a.txt\n".encode(),
            b'{"a.txt":"' + b"X" * 32 + b'"}',
            b"",
            400,
            ("not 32 lowercase hex",),
        ),
        (f". {loc} 0:6:a.txt\n".encode(), b"{\xff}", b"", 400, ("file_md5s",)),
        # Block writes that are not lines of md5 size new.
        (f". {loc} 0:6:a.txt\n".encode(), one, b"nonsense\n", 400, ("block_writes line 1",)),
        (
            f". {loc} 0:6:a.txt\n".encode(),
            one,
            f"{alice.md5} 6 1".encode(),
            400,
            ("block_writes line 1",),
        ),
    ]
    for text, listing, writes, status, said in cases:
        _refused(alice.send(text, listing, writes), status, *said)
    # Over the bound on the body: by its announced length, or as it comes.
    big = b"x" * (MAX_SPOOLED + 1)
    _refused(alice.send(big, b"{}"), 413, f"{MAX_SPOOLED}")
    chunks = (big[i : i + 65536] for i in range(0, len(big), 65536))
    resp = httpx.post(
        alice.url + PATH,
        params={"manifest_size": 10, "listing_size": 2},
        content=chunks,
        headers={"Authorization": f"Bearer {alice.token}"},
    )
    _refused(resp, 413, f"{MAX_SPOOLED}")
    # Shorter than its sections say.
    _refused(_short(alice), 400, "ended after")
    # No token: refused before the body is read.
    resp = httpx.post(alice.url + PATH, params={"manifest_size": 0, "listing_size": 2})
    assert resp.status_code == 401
    resp = alice.send(b"", b"{}", token="not-a-token")
    assert resp.status_code == 401
    # A body that stops midway: the client goes away.
    _stop_midway(alice)
    # And the controller still records a good one: its rows are all there are.
    resp = alice.send(f". {loc} 0:6:a.txt\n".encode(), one)
    assert resp.status_code == 200, resp.text
    after = {**before, "collections": 1, "collection_listings": 1}
    assert row_counts(ctl.state.engine) == after


def _short(alice: Alice) -> httpx.Response:
    headers = {"Authorization": f"Bearer {alice.token}"}
    params = {"manifest_size": 100, "listing_size": 2}
    return httpx.post(alice.url + PATH, params=params, content=b"{}", headers=headers)


def _stop_midway(alice: Alice) -> None:
    """Announce a body of 1 MB, send 1,000 bytes of it and leave."""
    begin_put(alice.url, alice.token, 1000002, 1000).close()


def test_an_old_clients_whole_manifest_is_still_taken(alice: Alice, ctl: Controller) -> None:
    text = f". {alice.loc} 0:6:a.txt\n"
    headers = {"Authorization": f"Bearer {alice.token}"}
    resp = httpx.post(
        alice.url + "/api/v1/collections",
        json={"manifest_text": text, "file_md5s": {"a.txt": alice.md5}},
        headers=headers,
    )
    assert resp.status_code == 200, resp.text
    resp = alice.send(text.encode(), alice.listing("a.txt"))
    assert resp.status_code == 200, resp.text
    assert (
        resp.json()["pdh"]
        == json.loads(
            httpx.post(
                alice.url + "/api/v1/collections", json={"manifest_text": text}, headers=headers
            ).text
        )["pdh"]
    )


# -- memory --------------------------------------------------------------------

# A remote put of 200,000 tiny files against one of 20,000: the client and
# the controller each peak within a few MB (the client 57 MB for 100,000
# here; holding the manifest and digests to send them whole, 136 MB, and
# the controller parsing them whole 212 MB against 97 MB).
SMALL, LARGE = 20_000, 200_000
GROWTH = 20 << 20
LIMIT_AS = 560 << 20


def _tiny(root: Path, count: int) -> Path:
    for i in range(count):
        d = root / f"d{i // 1000:04d}"
        if i % 1000 == 0:
            d.mkdir(parents=True)
        (d / f"f{i:06d}").write_bytes(b"" if i % 5 == 0 else b"%x\n" % i)
    return root


def _hwm(pid: int) -> int:
    """The peak resident bytes of process ``pid`` so far."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) << 10
    raise AssertionError("no VmHWM")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_remote_put_of_ten_times_the_files_peaks_alike(tmp_path: Path, ram_dir: Path) -> None:
    small, large = _tiny(ram_dir / "small", SMALL), _tiny(ram_dir / "large", LARGE)
    env = {**os.environ, "WH_HOME": str(ram_dir / "served"), "MALLOC_ARENA_MAX": "2"}
    env.pop("WH_URL", None)
    server = wh_serve(env, "--keep", "2", "--executor", "none")
    try:
        alice = admin_and_alice(env, listening(server, keep=2)[0])
        peaks = []
        for tree in (small, large):
            out, err, peak = tmp_path / "out", tmp_path / "err", tmp_path / "peak"
            launch = limited(LIMIT_AS, peak, "put", "--no-progress", str(tree))
            with out.open("wb") as o, err.open("wb") as e:
                done = subprocess.run(launch, env=alice, stdout=o, stderr=e, check=False)
            assert done.returncode == 0, err.read_text()[-2000:]
            peaks.append((int(peak.read_text()), _hwm(server.pid)))
            pdh = out.read_text().strip()
        listed = subprocess.run(
            [WH, "get", "--no-write", pdh], env=alice, capture_output=True, check=True
        )
        assert len(listed.stdout.splitlines()) == LARGE
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
        if server.stdout:
            server.stdout.close()
    (client_small, ctl_small), (client_large, ctl_large) = peaks
    assert client_large - client_small < GROWTH, (client_small >> 20, client_large >> 20)
    assert ctl_large - ctl_small < GROWTH, (ctl_small >> 20, ctl_large >> 20)


def test_a_body_that_stalls_is_cut_off_and_leaves_nothing(tmp_path: Path, pool: KeepPool) -> None:
    with controller(tmp_path / "c.db", pool, body_timeout=1.0, scratch=tmp_path) as ctl:
        alice = Alice(ctl)
        before = row_counts(ctl.state.engine)
        with begin_put(alice.url, alice.token, 1002, 100) as s:
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert row_counts(ctl.state.engine) == before
        # Its scratch files are unnamed: nothing is left where they were made.
        assert not [p for p in tmp_path.iterdir() if p.name.startswith("put-")]
