"""A remote installation under stress: replication, a killed server, a corrupt
copy, concurrent clients (4 real keep server processes, a real controller)."""

from __future__ import annotations

import gc
import hashlib
import logging
import os
import random
import signal
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cluster import Controller, KeepPool, controller, keep_pool
from conftest import Runner
from warehouse.blocks import Locator
from warehouse.manifest import Manifest
from warehouse.remote.api import AuthError
from warehouse.remote.probe import probe_order
from warehouse.remote.warehouse import RemoteWarehouse


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeepPool]:
    # Its own servers: these tests kill and corrupt them.
    with keep_pool(tmp_path_factory.mktemp("rkeep"), 4) as p:
        yield p


@pytest.fixture
def ctl(tmp_path: Path, pool: KeepPool) -> Iterator[Controller]:
    with controller(tmp_path / "c.db", pool) as c:
        yield c
    # A test that failed with a server down leaves it down: start it again so
    # the next test sees four servers, not this test's failure once more.
    for i, server in enumerate(pool.servers):
        if server.proc.poll() is not None:
            pool.restart(i)


def index(pool: KeepPool) -> dict[str, list[int]]:
    """Which servers hold each block, read through GET /index as an admin."""
    held: dict[str, list[int]] = {}
    for i, s in enumerate(pool.servers):
        resp = httpx.get(
            f"{s.url}/index", headers={"Authorization": f"Bearer {pool.admin_token}"}, verify=False
        )
        resp.raise_for_status()
        lines = resp.text.split("\n")
        assert lines[-2:] == ["", ""], "the index ends with an empty line"
        for line in lines[:-2]:
            held.setdefault(line.split()[0].split("+")[0], []).append(i)
    return held


def write_tree(root: Path, total: int, seed: int = 1) -> Path:
    rng = random.Random(seed)
    root.mkdir(parents=True)
    written = 0
    i = 0
    while written < total:
        size = rng.choice([1000, 50_000, 700_000, 5_000_000, 30_000_000])
        size = min(size, total - written)
        (root / f"d{i % 7}").mkdir(exist_ok=True)
        (root / f"d{i % 7}" / f"f{i}").write_bytes(os.urandom(size))
        written += size
        i += 1
    return root


def test_every_block_on_exactly_two_servers(
    tmp_path: Path, ctl: Controller, pool: KeepPool
) -> None:
    src = write_tree(tmp_path / "src", 40_000_000)
    with RemoteWarehouse(ctl.url, ctl.user("alice")) as wh:
        result = wh.put([src])
        assert wh.store.stats.min_copies_seen == 2
    held = index(pool)
    for block in result.write.blocks:
        assert len(held[block.locator.md5]) == 2, block.locator


@pytest.mark.slow
def test_killed_server_mid_put_still_two_copies(
    tmp_path: Path, ctl: Controller, pool: KeepPool
) -> None:
    src = write_tree(tmp_path / "src", 500_000_000, seed=2)
    token = ctl.user("alice")
    victim = 1
    killer = threading.Timer(1.5, pool.servers[victim].kill)
    killer.start()
    try:
        with RemoteWarehouse(ctl.url, token) as wh:
            result = wh.put([src])
    finally:
        killer.cancel()
    assert pool.servers[victim].proc.poll() is not None, "the server was killed mid-put"
    pool.restart(victim)
    held = index(pool)
    blocks = [b.locator for b in result.write.blocks]
    assert len(blocks) >= 8
    assert all(len(held[loc.md5]) == 2 for loc in blocks)
    # Any one server down: every byte still reads back, verified.
    expected = {p.relative_to(src).as_posix(): p for p in src.rglob("*") if p.is_file()}
    for down in range(4):
        pool.servers[down].stop()
        try:
            with RemoteWarehouse(ctl.url, token) as wh:
                listing = {f.path: f.md5 for f in wh.get(result.pdh, None, rehash=True)}
        finally:
            pool.restart(down)
        assert listing.keys() == expected.keys()
    for path in random.Random(3).sample(sorted(expected), 5):
        assert listing[path] == hashlib.md5(expected[path].read_bytes()).hexdigest()


def test_one_corrupt_copy_is_reported_and_bypassed(
    tmp_path: Path, ctl: Controller, pool: KeepPool, caplog: pytest.LogCaptureFixture
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    data = os.urandom(3_000_000)
    (src / "precious").write_bytes(data)
    token = ctl.user("alice")
    with RemoteWarehouse(ctl.url, token) as wh:
        pdh = wh.put([src]).pdh
        locator = wh.manifest(pdh).blocks()[0]
    # Corrupt the copy a reader tries first.
    with RemoteWarehouse(ctl.url, token) as wh:
        first = probe_order(locator.md5, wh.store.services)[0]
    bad = [s.url for s in pool.servers].index(first.url)
    assert bad in index(pool)[locator.md5]
    path = pool.servers[bad].volume / locator.md5[:3] / locator.md5
    path.write_bytes(b"?" + path.read_bytes()[1:])
    caplog.set_level(logging.WARNING, logger="warehouse.keep")
    with RemoteWarehouse(ctl.url, token) as wh:
        got = wh.reader(pdh).read_file("precious")
        assert got == data
        bad_copies = wh.store.stats.bad_copies
    assert bad_copies == [(locator.key, pool.servers[bad].url)]
    assert any(locator.key in r.getMessage() for r in caplog.records)
    signed_by_admin = f"{pool.servers[bad].url}/{locator.key}"
    resp = httpx.get(
        signed_by_admin, headers={"Authorization": f"Bearer {pool.admin_token}"}, verify=False
    )
    # The server moved the corrupt copy aside when the reader found it.
    assert resp.status_code == 404
    assert not path.exists()
    metrics = httpx.get(f"{pool.servers[bad].url}/metrics", verify=False).text
    corrupt = [ln for ln in metrics.splitlines() if ln.startswith("wh_keepd_corrupt_reads_total")]
    assert corrupt and float(corrupt[0].split()[-1]) >= 1


@pytest.mark.slow
def test_sixteen_clients_for_a_minute(tmp_path: Path, ctl: Controller) -> None:
    seconds = float(os.environ.get("WH_LOAD_SECONDS", "60"))
    tokens = [ctl.user(f"u{i}") for i in range(16)]
    errors: list[BaseException] = []
    moved = [0] * 16
    rounds = [0] * 16
    deadline = time.monotonic() + seconds

    def client(i: int) -> None:
        rng = random.Random(i)
        try:
            with RemoteWarehouse(ctl.url, tokens[i]) as wh:
                while time.monotonic() < deadline:
                    root = tmp_path / f"c{i}-{rounds[i]}"
                    root.mkdir()
                    files = {}
                    left = 50_000_000 // 16  # 50 MB per round across all clients
                    n = 0
                    while left > 0:
                        size = min(left, rng.choice([0, 10, 4096, 100_000, 1_000_000]))
                        # Some blocks repeat across clients: mixed new and known data.
                        body = (
                            rng.randbytes(size) if rng.random() < 0.8 else b"shared" * (size // 6)
                        )
                        files[f"f{n}"] = body
                        (root / f"f{n}").write_bytes(body)
                        left -= max(size, 1)
                        n += 1
                    pdh = wh.put([root]).pdh
                    for f in wh.get(pdh, None, rehash=True):
                        assert f.md5 == hashlib.md5(files[f.path]).hexdigest(), f.path
                    moved[i] += 2 * sum(len(b) for b in files.values())
                    rounds[i] += 1
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        # One deadline for all: a last round has 45 s to end, within the
        # per-test timeout, so a hung client fails below and not by timeout.
        t.join(max(0.0, deadline + 45 - time.monotonic()))
    elapsed = time.monotonic() - start
    # A client still in a put or get would leave its round unchecked.
    assert not [t for t in threads if t.is_alive()], "a client did not end its last round"
    assert not errors, errors[:3]
    assert min(rounds) >= 1
    print(
        f"\n16 clients, {elapsed:.0f} s: {sum(rounds)} rounds, "
        f"{sum(moved) / elapsed / 1e6:.1f} MB/s put+get, every byte verified"
    )


def test_signed_locators_are_bound_to_a_token(
    tmp_path: Path, ctl: Controller, pool: KeepPool
) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"secret" * 1000)
    alice, bob = ctl.user("alice"), ctl.user("bob")
    with RemoteWarehouse(ctl.url, alice) as wh:
        pdh = wh.put([src]).pdh
        signed = wh.manifest(pdh).blocks()[0]
    holder = pool.servers[index(pool)[signed.md5][0]].url
    as_alice = httpx.get(
        f"{holder}/{signed}", headers={"Authorization": f"Bearer {alice}"}, verify=False
    )
    assert as_alice.status_code == 200
    as_bob = httpx.get(
        f"{holder}/{signed}", headers={"Authorization": f"Bearer {bob}"}, verify=False
    )
    assert as_bob.status_code == 403
    unsigned = httpx.get(
        f"{holder}/{signed.key}", headers={"Authorization": f"Bearer {bob}"}, verify=False
    )
    assert unsigned.status_code == 401
    # Bob cannot record a collection from Alice's signatures either.
    with RemoteWarehouse(ctl.url, bob) as wh, pytest.raises(Exception, match="not signed for"):
        wh.put_manifest(Manifest.parse(f". {signed} 0:6000:f\n"))
    # An expired signature is refused.
    from warehouse.blocks.signing import sign

    old = sign(
        Locator(signed.md5, signed.size), alice, pool.signing_key, now=time.time() - 30 * 86400
    )
    expired = httpx.get(
        f"{holder}/{old}", headers={"Authorization": f"Bearer {alice}"}, verify=False
    )
    assert expired.status_code == 403


def test_replication_and_min_copies(
    tmp_path: Path, ctl: Controller, pool: KeepPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from warehouse.cli import cli

    monkeypatch.setenv("WH_URL", ctl.url)
    monkeypatch.setenv("WH_TOKEN", ctl.user("alice"))
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(os.urandom(1000))
    three = CliRunner().invoke(cli, ["put", str(src), "--json", "--replication", "3"])
    assert three.exit_code == 0, three.output
    assert '"copies": 3' in three.stdout
    md5 = hashlib.md5((src / "f").read_bytes()).hexdigest()
    assert len(index(pool)[md5]) == 3
    (src / "f").write_bytes(os.urandom(1000))
    five = CliRunner().invoke(cli, ["put", str(src), "--replication", "5"])
    assert five.exit_code == 1 and "stored 4 of 5 copies" in five.stderr
    ok = CliRunner().invoke(cli, ["put", str(src), "--replication", "5", "--min-copies", "4"])
    assert ok.exit_code == 0, ok.stderr


def test_a_second_put_sends_no_block(tmp_path: Path, ctl: Controller, pool: KeepPool) -> None:
    src = write_tree(tmp_path / "src", 5_000_000, seed=9)
    token = ctl.user("alice")
    with RemoteWarehouse(ctl.url, token) as wh:
        first = wh.put([src])
    with RemoteWarehouse(ctl.url, token) as wh:  # a new process would do the same
        again = wh.put([src])
        assert wh.store.stats.puts == 0
        assert wh.store.stats.skipped == len(first.write.blocks) > 0
    assert again.pdh == first.pdh and again.write.blocks_new == 0
    # Blocks gone from the servers are sent again, not trusted from the cache.
    for server in pool.servers:
        for block in first.write.blocks:
            (server.volume / block.locator.md5[:3] / block.locator.md5).unlink(missing_ok=True)
    with RemoteWarehouse(ctl.url, token) as wh:
        third = wh.put([src])
        assert wh.store.stats.puts == len(first.write.blocks)
    assert third.write.blocks_new == len(first.write.blocks)


def test_a_refused_token_leaves_no_connection_open(ctl: Controller) -> None:
    """A client whose start fails (here: a token the controller does not know)
    closes what it opened; an open connection found later by the garbage
    collector is a ResourceWarning, an error in whatever test runs then."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(AuthError):
            RemoteWarehouse(ctl.url, "not-a-token-of-anyone")
        gc.collect()
    assert [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)] == []


@pytest.mark.timeout(200)
def test_a_get_from_a_stopped_server_ends_with_one_error_line(
    tmp_path: Path, ctl: Controller, pool: KeepPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The only copy of a block is on a server that accepts connections and
    answers nothing (stopped): `wh get` gives up after its deadline
    (keep_timeout 1 s here, docs/storage.md) with one Error line, exit 1."""
    monkeypatch.setenv("WH_URL", ctl.url)
    monkeypatch.setenv("WH_TOKEN", ctl.user("alice"))
    monkeypatch.setenv("WH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WH_REPLICATION", "1")
    monkeypatch.setenv("WH_KEEP_TIMEOUT", "1")
    (tmp_path / "src").mkdir()
    data = os.urandom(5000)
    (tmp_path / "src" / "f").write_bytes(data)
    run = Runner()
    pdh = run("put", str(tmp_path / "src")).output.strip().splitlines()[-1]
    md5 = hashlib.md5(data).hexdigest()
    holder = next(s for s in pool.servers if md5 in s.blocks())
    os.kill(holder.proc.pid, signal.SIGSTOP)
    try:
        result = run("get", pdh, str(tmp_path / "out"), code=1)
    finally:
        os.kill(holder.proc.pid, signal.SIGCONT)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert f"block {md5}" in lines[0] and holder.url in lines[0], lines[0]
    assert "not over within 2 s" in lines[0], lines[0]
