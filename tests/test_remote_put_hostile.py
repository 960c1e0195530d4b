"""A streamed put (POST /api/v1/collections/text) as a hostile or careless
caller sends it, against a real controller and keep servers: what is refused
records nothing, and no caller holds more than its share of the disk."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from email.utils import formatdate
from pathlib import Path

import httpx
import pytest

from cluster import (
    Controller,
    KeepPool,
    controller,
    ctl_fixture,
    keep_pool,
    pool_fixture,
    row_counts,
)
from frontserver import Answer, Front, begin_put, serving
from memory_helpers import WH
from warehouse import catalog
from warehouse.blocks import Locator
from warehouse.blocks.signing import legacy_signature, sign
from warehouse.catalog.auth import JOB_TOKEN_LABEL
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import CorruptDataError, NotFoundError, WarehouseError
from warehouse.remote.api import BUSY_TRIES, BUSY_WAIT_CAP, retry_after
from warehouse.remote.warehouse import RemoteWarehouse

MAX_MANIFEST = 64 << 10
MAX_SPOOLED = 4 << 20
PATH = "/api/v1/collections/text"


# The keep servers are shared by the module's tests (each has a controller of
# its own): none counts what they hold, and the one that stops them has its own.
pool = pool_fixture("module")
ctl = ctl_fixture(max_manifest=MAX_MANIFEST, max_spooled=MAX_SPOOLED)


class User:
    """A user with one stored block, signed for them, to write manifests of."""

    def __init__(self, ctl: Controller, name: str) -> None:
        self.token = ctl.user(name)
        self.url = ctl.url
        with RemoteWarehouse(ctl.url, self.token) as remote:
            self.data = b"hello\n"
            self.loc = str(remote.store.put(self.data).locator)
            self.md5 = hashlib.md5(self.data).hexdigest()

    def text(self, name: str = "a.txt") -> bytes:
        return f". {self.loc} 0:6:{name}\n".encode()

    def listing(self, *paths: str) -> bytes:
        return json.dumps({p: self.md5 for p in paths}, separators=(",", ":")).encode()

    def send(
        self,
        text: bytes,
        listing: bytes,
        writes: bytes = b"",
        params: dict[str, object] | None = None,
        token: str | None = None,
    ) -> httpx.Response:
        sizes = {"manifest_size": len(text), "listing_size": len(listing)}
        return httpx.post(
            self.url + PATH,
            params=sizes if params is None else params,
            content=text + listing + writes,
            headers={"Authorization": f"Bearer {token or self.token}"},
            timeout=60,
        )


@pytest.fixture
def alice(ctl: Controller) -> User:
    return User(ctl, "alice")


def test_block_writes_are_not_recorded_when_the_collection_is_not(tmp_path: Path) -> None:
    # Every check passes; storing the manifest text fails (no keep server
    # answers): the put's accounting must not be recorded without it. Its
    # own keep servers, as it stops them.
    with (
        keep_pool(tmp_path / "keep", 2) as pool,
        controller(
            tmp_path / "c.db",
            pool,
            max_manifest=MAX_MANIFEST,
            max_spooled=MAX_SPOOLED,
            scratch=tmp_path,
        ) as ctl,
    ):
        alice = User(ctl, "alice")
        before = row_counts(ctl.state.engine)
        pool.close()
        resp = alice.send(alice.text(), alice.listing("a.txt"), f"{alice.md5} 6 1\n".encode())
        assert resp.status_code >= 500, resp.text
        assert row_counts(ctl.state.engine) == before


def _until(done: Callable[[], bool]) -> None:
    """Wait for ``done`` (the test's timeout bounds the wait)."""
    while not done():
        time.sleep(0.02)


def test_a_users_puts_at_once_share_one_bodys_bound_on_the_disk(
    alice: User, ctl: Controller
) -> None:
    bob = User(ctl, "bob")
    before = row_counts(ctl.state.engine)
    shares = ctl.state.spooled
    big = MAX_SPOOLED * 3 // 4
    # A put of 3 MiB, its body begun and not ended: its share is held.
    with begin_put(alice.url, alice.token, big, 1000):
        _until(lambda: shares.held("alice") == big)
        # Another of hers past what is left is refused at once, by its
        # length or, chunked, as it comes; each under the bound alone.
        resp = alice.send(b"x" * (MAX_SPOOLED // 2), b"{}")
        assert resp.status_code == 429, resp.text
        assert "alice's streamed puts at once" in resp.json()["error"], resp.text
        half = b"x" * (MAX_SPOOLED // 2)
        resp = httpx.post(
            alice.url + PATH,
            # Sections that say little: the share is taken as the body comes.
            params={"manifest_size": 10, "listing_size": 2},
            content=(half[i : i + 65536] for i in range(0, len(half), 65536)),
            headers={"Authorization": f"Bearer {alice.token}"},
        )
        assert resp.status_code == 429, resp.text
        # A small one of hers fits in what is left; another user's is hers alone.
        assert alice.send(alice.text(), alice.listing("a.txt")).status_code == 200
        assert bob.send(bob.text("b.txt"), bob.listing("b.txt")).status_code == 200
        assert shares.held("alice") == big
    # The client went away: its share is given back.
    _until(lambda: shares.held("alice") == 0)
    resp = alice.send(b"x" * (MAX_SPOOLED // 2), b"{}")
    assert resp.status_code == 413 and "line 1" in resp.json()["error"], resp.text
    assert shares.held("alice") == shares.held("bob") == 0
    after = row_counts(ctl.state.engine)
    assert after["collections"] == before["collections"] + 2


# -- the client against a controller that answers the streamed put otherwise ---


class _Front(Front):
    """A server of the test's own before a real controller: it passes every
    request on, but answers the streamed put itself with ``answer`` (an
    older controller's 405, a proxy's error page, a broken answer)."""

    def __init__(self, behind: str) -> None:
        super().__init__(behind)
        self.answer: tuple[int, str, bytes] = (405, "application/json", b'{"detail":"no"}')
        self.streamed = 0  # streamed puts answered here

    def reply(self, command: str, path: str, relay: Callable[[], Answer]) -> Answer:
        if command == "POST" and path == PATH:
            self.streamed += 1
            return (*self.answer, False)
        return relay()


@pytest.fixture
def front(ctl: Controller) -> Iterator[_Front]:
    with serving(_Front(ctl.url)) as server:
        yield server


def _src(root: Path) -> Path:
    (root / "d").mkdir(parents=True)
    (root / "d" / "x.txt").write_bytes(b"x\n")
    (root / "top é.txt").write_bytes(b"top\n")
    return root


def test_a_controller_without_the_streamed_put_is_sent_the_whole_manifest(
    tmp_path: Path, ctl: Controller, front: _Front, home: Path
) -> None:
    src = _src(tmp_path / "src")
    token = ctl.user("alice")
    with RemoteWarehouse(front.url, token) as remote:
        pdh = remote.put(src).pdh
        assert front.streamed == 1
        assert remote._collection(pdh)[1] is not None, "her listing is recorded"
    with EmbeddedWarehouse(home) as local:
        assert local.put(src).pdh == pdh
    assert row_counts(ctl.state.engine)["collections"] == 1


@pytest.mark.parametrize(
    ("answer", "error", "said"),
    [
        ((404, "application/json", b'{"error":"no such route"}'), NotFoundError, "no such route"),
        ((500, "text/html", b"<html>proxy error</html>"), WarehouseError, "proxy error"),
        ((200, "text/html", b"<html>a login page</html>"), WarehouseError, "not JSON"),
        ((200, "application/json", b"[]"), WarehouseError, "not the collection it recorded"),
        ((200, "application/json", b'{"pdh":1}'), WarehouseError, "not the collection"),
        (
            (200, "application/json", b'{"pdh":"%s+1","size":1,"file_count":1}' % (b"0" * 32)),
            CorruptDataError,
            "for a put of",
        ),
    ],
)
def test_a_streamed_put_answered_wrongly_is_one_error(
    tmp_path: Path,
    ctl: Controller,
    front: _Front,
    answer: tuple[int, str, bytes],
    error: type[WarehouseError],
    said: str,
) -> None:
    front.answer = answer
    with (
        RemoteWarehouse(front.url, ctl.user("alice")) as remote,
        pytest.raises(error, match=said),
    ):
        remote.put(_src(tmp_path / "src"))
    assert row_counts(ctl.state.engine)["collections"] == 0


def test_wh_put_answered_wrongly_says_one_error_line(
    tmp_path: Path, ctl: Controller, front: _Front
) -> None:
    front.answer = (200, "application/json", b"[]")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {
        **os.environ,
        "WH_URL": front.url,
        "WH_TOKEN": ctl.user("alice"),
        "WH_HOME": str(tmp_path / "home"),
        "TMPDIR": str(scratch),
    }
    done = subprocess.run(
        [WH, "put", "--no-progress", str(_src(tmp_path / "src"))],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: the controller at"), done.stderr
    assert list(scratch.iterdir()) == []


# -- whose blocks ---------------------------------------------------------------


def test_only_blocks_signed_for_the_caller_and_their_size_are_recorded(
    alice: User, ctl: Controller
) -> None:
    state = ctl.state
    key, ttl = state.signing_key, state.config.signature_ttl
    bob = User(ctl, "bob")
    bare = Locator.parse(alice.loc).without_hints()
    # A job's token is its owner's (here an admin's), but no admin's: its
    # blocks are checked as anyone's.
    job = catalog.create_token(state.engine, "root", label=JOB_TOKEN_LABEL + "1")
    legacy_expiry = int(time.time()) + 600
    bigger = Locator(bare.md5, 1 << 20)
    cases = [
        # Signed for bob: alice may not record what she may not read.
        (alice.token, f". {bob.loc} 0:6:a.txt\n", 403, "is not signed for this token"),
        (alice.token, f". {sign(bare, alice.token, key, ttl, now=0)} 0:6:a.txt\n", 403, "expired"),
        (job, f". {bare} 0:6:a.txt\n", 403, "is not signed"),
        # An old signature does not cover the size: a block of a size not stored.
        (
            alice.token,
            f". {bigger}+A{legacy_signature(bare.md5, alice.token, legacy_expiry, key, ttl)}"
            f"@{legacy_expiry:08x} 0:6:a.txt\n",
            400,
            "no block of that size",
        ),
    ]
    # The same old signature on the stored size is good.
    old = legacy_signature(bare.md5, alice.token, legacy_expiry, key, ttl)
    good = f". {bare}+A{old}@{legacy_expiry:08x} 0:6:a.txt\n"
    before = row_counts(state.engine)
    for token, text, status, said in cases:
        resp = alice.send(text.encode(), alice.listing("a.txt"), token=token)
        assert resp.status_code == status, (text, resp.text)
        assert said in resp.json()["error"] and "line 1" in resp.json()["error"], resp.text
    assert row_counts(state.engine) == before
    assert alice.send(good.encode(), alice.listing("a.txt")).status_code == 200


# -- careless callers -------------------------------------------------------------


def test_sections_of_other_sizes_than_said_are_named(alice: User, ctl: Controller) -> None:
    text, listing = alice.text(), alice.listing("a.txt")
    before = row_counts(ctl.state.engine)
    for m, n in ((1, -1), (-1, 1), (0, 5), (-len(text), len(text))):
        sizes = {"manifest_size": len(text) + m, "listing_size": len(listing) + n}
        resp = alice.send(text, listing, params=sizes)
        assert resp.status_code == 400, resp.text
        assert "manifest_size" in resp.json()["error"], (sizes, resp.text)
        assert "listing_size" in resp.json()["error"], (sizes, resp.text)
    assert row_counts(ctl.state.engine) == before


def test_a_listing_in_another_json_spelling_is_refused_saying_which(
    alice: User, ctl: Controller
) -> None:
    text = f". {alice.loc} 0:6:é\\040x\n".encode()
    before = row_counts(ctl.state.engine)
    for listing in (
        json.dumps({"é x": alice.md5}).encode(),  # \u00e9, and spaces after ':'
        json.dumps({"é x": alice.md5}, ensure_ascii=False).encode(),
    ):
        resp = alice.send(text, listing)
        assert resp.status_code == 400, resp.text
        assert "compact" in resp.json()["error"], resp.text
    assert row_counts(ctl.state.engine) == before
    good = json.dumps({"é x": alice.md5}, ensure_ascii=False, separators=(",", ":"))
    assert alice.send(text, good.encode()).status_code == 200


# -- what a stream's ancestors hold ------------------------------------------------


def _nested(user: User, files: list[list[str]]) -> tuple[bytes, bytes]:
    """A chain of directories a/a/…, the k-th (and its stream) holding ``files[k]``."""
    lines, paths = [], []
    for k, names in enumerate(files):
        name = "/".join(["a"] * (k + 1))
        lines.append(f"./{name} {user.loc} " + " ".join(f"0:6:{n}" for n in names) + "\n")
        paths += [f"{name}/{n}" for n in names]
    return "".join(lines).encode(), user.listing(*paths)


def test_the_names_a_streams_ancestors_hold_are_bounded(alice: User, ctl: Controller) -> None:
    # Each stream under the bound alone; the chain of them over it together
    # (each a directory of the one before, so each stream's files are held
    # while its subdirectories come).
    per = [f"{i:05d}-" + "n" * 40 for i in range(800)]
    chain = [[f"{n}-{k}" for n in per] for k in range(4)]
    assert sum(len(n) + 6 for n in chain[0]) < MAX_MANIFEST < sum(sum(map(len, c)) for c in chain)
    before = row_counts(ctl.state.engine)
    resp = alice.send(*_nested(alice, chain))
    assert resp.status_code == 413, resp.text
    assert "line 2" in resp.json()["error"] and "above it" in resp.json()["error"], resp.text
    assert row_counts(ctl.state.engine) == before
    # Deep paths cost their own line only; a file that is also a directory
    # is found however deep.
    resp = alice.send(*_nested(alice, [["f"]] * 300))
    assert resp.status_code == 200, resp.text
    deep = _nested(alice, [["f"]] * 5 + [["a", "f"]] + [["f"]] * 3)
    resp = alice.send(*deep)
    assert resp.status_code == 400, resp.text
    assert "line 7" in resp.json()["error"], resp.text
    assert "'a/a/a/a/a/a/a' is a file and also a directory (line 6: 'a')" in resp.text


def test_an_endless_block_write_line_is_refused_by_its_start(
    tmp_path: Path, pool: KeepPool
) -> None:
    # 48 MB of block writes with no newline: refused without reading the
    # line whole (a line at a time was read whole, and split again).
    size = 48 << 20
    with controller(tmp_path / "big.db", pool, max_spooled=size * 2, scratch=tmp_path) as big:
        user = User(big, "alice")
        text, listing = user.text(), user.listing("a.txt")

        def body() -> Iterator[bytes]:
            yield text + listing
            piece = b"f" * (1 << 20)
            for _ in range(size >> 20):
                yield piece

        tracemalloc.start()
        try:
            resp = httpx.post(
                user.url + PATH,
                params={"manifest_size": len(text), "listing_size": len(listing)},
                content=body(),
                headers={"Authorization": f"Bearer {user.token}"},
                timeout=120,
            )
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert resp.status_code == 400, resp.text
        assert "block_writes line 1" in resp.json()["error"], resp.text
        assert peak < size // 2, peak >> 20
        assert row_counts(big.state.engine)["block_writes"] == 0


def test_a_line_of_exactly_the_bound_is_taken_and_one_byte_more_is_not(
    alice: User, ctl: Controller
) -> None:
    head = f". {alice.loc} 0:6:"
    for extra, status in ((1, 413), (0, 200)):
        name = "n" * (MAX_MANIFEST - len(head) + extra)
        text = (head + name + "\n").encode()
        assert len(text) == MAX_MANIFEST + extra + 1
        resp = alice.send(text, alice.listing(name))
        assert resp.status_code == status, resp.text[:200]
    assert row_counts(ctl.state.engine)["collections"] == 1


@pytest.mark.parametrize(
    ("streams", "said"),
    [
        ([("./a", "c"), ("./a/c", "z"), ("./a-b", "y")], "manifest line 2: 'a/c'"),
        ([(".", "a"), ("./a/c", "z")], "manifest line 2: 'a'"),
        # Found above streams that came and went in between.
        ([(".", "b"), ("./a", "z"), ("./a/c", "z"), ("./b/d", "y")], "manifest line 4: 'b'"),
    ],
)
def test_a_file_that_is_also_a_directory_is_found_whichever_stream_names_it(
    alice: User, ctl: Controller, streams: list[tuple[str, str]], said: str
) -> None:
    text = "".join(f"{s} {alice.loc} 0:6:{f}\n" for s, f in streams)
    paths = [(s[2:] + "/" if s != "." else "") + f for s, f in streams]
    resp = alice.send(text.encode(), alice.listing(*paths))
    assert resp.status_code == 400, resp.text
    assert said in resp.json()["error"] and "also a directory" in resp.text, resp.text
    assert row_counts(ctl.state.engine)["collections"] == 0


# -- block writes the manifest does not name; streamed puts at once ------------


def test_block_writes_must_name_the_manifests_blocks_as_often_as_its_streams_do(
    alice: User, ctl: Controller
) -> None:
    one = alice.text()
    two = f". {alice.loc} 0:6:a.txt\n./d {alice.loc} 0:6:a.txt\n".encode()
    listing_two = alice.listing("a.txt", "d/a.txt")
    good = f"{alice.md5} 6 1\n"
    refused = [
        # A block the manifest does not name at all: a hundred million of
        # them would be as many accounting rows.
        (
            one,
            good + f"{'0' * 32} 6 1\n",
            "line 2: block " + "0" * 32 + "+6 is not in the manifest",
        ),
        # The manifest's block, claimed with another size.
        (one, f"{alice.md5} 7 1\n", f"line 1: block {alice.md5}+7 is not in the manifest"),
        # More often than the manifest's streams name it.
        (one, good + good, "line 2: block " + alice.md5 + "+6 written 2 times, more than the 1"),
        (two, good * 3, "line 3: block " + alice.md5 + "+6 written 3 times, more than the 2"),
    ]
    before = row_counts(ctl.state.engine)
    for text, writes, error in refused:
        listing = alice.listing("a.txt") if text == one else listing_two
        resp = alice.send(text, listing, writes.encode())
        assert resp.status_code == 400, resp.text
        assert f"block_writes {error}" in resp.json()["error"], resp.text
        assert row_counts(ctl.state.engine) == before
    # What a real put sends: each block once for each directory packed into it.
    for text, writes in ((one, good), (two, good * 2), (two, good)):
        listing = alice.listing("a.txt") if text == one else listing_two
        resp = alice.send(text, listing, writes.encode())
        assert resp.status_code == 200, resp.text
    assert row_counts(ctl.state.engine)["block_writes"] == before["block_writes"] + 4


def test_a_put_of_two_directories_alike_records_each_write(
    tmp_path: Path, ctl: Controller, alice: User
) -> None:
    # Each directory's block is written by the put (twice, the same block):
    # both writes are named by the manifest, once per stream.
    for d in ("a", "b"):
        (tmp_path / "src" / d).mkdir(parents=True)
        (tmp_path / "src" / d / "f").write_bytes(b"same\n")
    before = row_counts(ctl.state.engine)
    with RemoteWarehouse(ctl.url, alice.token) as remote:
        put = remote.put(tmp_path / "src")
    assert len(put.write.blocks) == 2
    assert row_counts(ctl.state.engine)["block_writes"] == before["block_writes"] + 2


def test_streamed_puts_at_once_are_bounded_over_all_users(tmp_path: Path, pool: KeepPool) -> None:
    with controller(
        tmp_path / "one.db", pool, max_spooled=MAX_SPOOLED, scratch=tmp_path, max_streamed_puts=1
    ) as one:
        alice, bob = User(one, "alice"), User(one, "bob")
        slots = one.state.streamed_puts
        before = row_counts(one.state.engine)
        # Alice's put, its body begun and not ended, holds the one slot.
        with begin_put(alice.url, alice.token, 1000, 100):
            _until(lambda: slots.used == 1)
            resp = bob.send(bob.text("b.txt"), bob.listing("b.txt"))
            assert resp.status_code == 503, resp.text
            assert (
                "most streamed puts at once (1, its --max-streamed-puts)" in resp.json()["error"]
            ), resp.text
            assert resp.headers.get("retry-after") == "5"
            assert row_counts(one.state.engine) == before
        # The client went away: its slot is given back, and the next put runs.
        _until(lambda: slots.used == 0)
        resp = bob.send(bob.text("b.txt"), bob.listing("b.txt"))
        assert resp.status_code == 200, resp.text
        assert slots.used == 0


# -- a busy controller: asked again after the wait it names ---------------------


class _Busy(Front):
    """Answers the first ``busy`` streamed puts 503 with Retry-After
    ``after`` (as a controller at its most streamed puts does), then
    relays them; counts the 503s it sent or relayed."""

    def __init__(self, behind: str, busy: int, after: str) -> None:
        super().__init__(behind)
        self.busy = busy
        self.after = after
        self.refused = 0

    def reply(self, command: str, path: str, relay: Callable[[], Answer]) -> Answer:
        if command == "POST" and path == PATH and self.refused < self.busy:
            self.refused += 1
            error = b'{"error":"the controller runs its most streamed puts at once"}'
            return (503, "application/json", error, False)
        answer = relay()
        if answer[0] == 503:
            self.refused += 1
        return answer

    def headers(self, command: str, path: str, status: int) -> dict[str, str]:
        # "": a relayed 503 keeps the controller's own Retry-After.
        return {"Retry-After": self.after} if status == 503 and self.after else {}


def _wh_put(
    front: Front, token: str, tmp_path: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "WH_URL": front.url,
        "WH_TOKEN": token,
        "WH_HOME": str(tmp_path / "home"),
    }
    return subprocess.run(
        [WH, "put", "--no-progress", *args, str(_src(tmp_path / "src"))],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_busy_controller_is_asked_again_after_the_wait_it_names(
    tmp_path: Path, ctl: Controller, home: Path
) -> None:
    with serving(_Busy(ctl.url, busy=2, after="1")) as front:
        done = _wh_put(front, ctl.user("alice"), tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    # The whole body was sent again each time: the third is recorded.
    with EmbeddedWarehouse(home) as local:
        assert json.loads(done.stdout)["pdh"] == local.put(tmp_path / "src").pdh
    assert front.refused == 2
    waits = done.stderr.splitlines()
    assert len(waits) == 2, done.stderr
    for n, line in enumerate(waits, 1):
        assert line == (
            f"the controller at {front.url} is busy (503): asking again in 1 s "
            f"({n} of at most {BUSY_TRIES} tries)"
        ), line
    assert row_counts(ctl.state.engine)["collections"] == 1


def test_a_controller_busy_past_the_bound_is_one_error_line(
    tmp_path: Path, ctl: Controller
) -> None:
    with serving(_Busy(ctl.url, busy=1000, after="0")) as front:
        done = _wh_put(front, ctl.user("alice"), tmp_path)
    assert front.refused == BUSY_TRIES + 1
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    *waits, last = done.stderr.splitlines()
    assert len(waits) == BUSY_TRIES and all("is busy (503)" in w for w in waits), done.stderr
    assert last.startswith(f"Error: the controller at {front.url} is busy: "), last
    assert "most streamed puts at once" in last and f"asked {BUSY_TRIES + 1} times" in last, last
    assert row_counts(ctl.state.engine)["collections"] == 0


def test_retry_after_is_seconds_or_a_date_and_at_most_the_cap() -> None:
    def after(status: int, value: str) -> float | None:
        return retry_after(httpx.Response(status, headers={"Retry-After": value}))

    assert after(503, "5") == 5
    assert after(503, "3600") == BUSY_WAIT_CAP
    assert after(503, formatdate(time.time() + 3600, usegmt=True)) == BUSY_WAIT_CAP
    assert after(503, formatdate(time.time() - 3600, usegmt=True)) == 0
    # Not a wait: the refusal is final.
    assert after(503, "soon") is None
    assert after(503, "-1") is None
    assert after(500, "5") is None
    assert retry_after(httpx.Response(503)) is None


def test_a_put_waits_for_the_controllers_slot_and_is_recorded(
    tmp_path: Path, pool: KeepPool
) -> None:
    with (
        controller(
            tmp_path / "one.db",
            pool,
            max_spooled=MAX_SPOOLED,
            scratch=tmp_path,
            max_streamed_puts=1,
        ) as one,
        serving(_Busy(one.url, busy=0, after="")) as front,
    ):
        alice, bob = User(one, "alice"), User(one, "bob")
        slots = one.state.streamed_puts
        put: list[object] = []
        # Alice's put, its body begun and not ended, holds the one slot.
        with begin_put(alice.url, alice.token, 1000, 100):
            _until(lambda: slots.used == 1)

            def bobs_put() -> None:
                try:
                    with RemoteWarehouse(front.url, bob.token) as remote:
                        put.append(remote.put(_src(tmp_path / "src")).pdh)
                except Exception as e:
                    put.append(e)

            thread = threading.Thread(target=bobs_put)
            thread.start()
            # The controller's own 503 (and its Retry-After) reached Bob's put,
            # and his put waits: a controller ignoring --max-streamed-puts ends it.
            _until(lambda: front.refused >= 1 or bool(put))
            assert front.refused >= 1 and not put, (front.refused, put)
            assert thread.is_alive()
        # Alice went away: her slot is given back, and Bob's put, asked again, runs.
        thread.join()
        assert len(put) == 1 and isinstance(put[0], str), put
        with RemoteWarehouse(one.url, bob.token) as remote:
            assert remote.holds(put[0])
        assert slots.used == 0


# -- refusals a later try may not meet: one line each, a documented exit code ---


def test_a_503_without_retry_after_is_not_waited_for(tmp_path: Path, ctl: Controller) -> None:
    with serving(_Busy(ctl.url, busy=1, after="")) as front:
        done = _wh_put(front, ctl.user("alice"), tmp_path)
    assert front.refused == 1
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"Error: the controller at {front.url} is busy: the controller runs its most "
        "streamed puts at once"
    ], done.stderr


def test_a_put_past_the_users_share_of_the_disk_is_one_busy_line(
    tmp_path: Path, ctl: Controller
) -> None:
    alice = User(ctl, "alice")
    shares = ctl.state.spooled
    held = MAX_SPOOLED - 100
    # Her put of all but 100 bytes of the bound, begun and not ended.
    with begin_put(alice.url, alice.token, held, 100):
        _until(lambda: shares.held("alice") == held)
        with serving(Front(ctl.url)) as front:
            done = _wh_put(front, alice.token, tmp_path)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"Error: the controller at {front.url} is busy: alice's streamed puts at once "
        f"would spool over {MAX_SPOOLED} bytes (the controller's max spooled body): try "
        "again when one has ended"
    ], done.stderr
    assert row_counts(ctl.state.engine)["collections"] == 0


def test_a_put_over_the_controllers_bound_is_one_line_and_bad_input(
    tmp_path: Path, pool: KeepPool
) -> None:
    with controller(tmp_path / "small.db", pool, max_spooled=256, scratch=tmp_path) as small:
        done = _wh_put(small, small.user("alice"), tmp_path)
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [
            f"Error: the controller at {small.url} refused it as too large: request body "
            "over 256 bytes (the controller's max spooled body)"
        ], done.stderr
        assert row_counts(small.state.engine)["collections"] == 0
