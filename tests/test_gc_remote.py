"""GC, balance and fsck through the controller over real keep server processes."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from cluster import KeepPool, keep_pool
from conftest import Runner
from gc_helpers import gc_cluster
from warehouse import catalog
from warehouse.blocks.volume import LocalVolume
from warehouse.gc import GcAborted
from warehouse.gc.keep import KeepAdmin
from warehouse.remote.probe import Service


def tree(root: Path, i: int) -> Path:
    root.mkdir(parents=True)
    (root / "f").write_bytes(os.urandom(2000 + i))
    (root / "g").write_bytes(os.urandom(70000))
    return root


def copies(volumes: list[LocalVolume], md5: str) -> int:
    return sum(v.stat(md5) is not None for v in volumes)


@pytest.fixture
def remote_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("WH_HOME", str(tmp_path / "home"))
    return tmp_path


def test_lost_volume_fsck_balance_fsck(remote_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with gc_cluster(remote_env / "c", count=3) as (pool, ctl):
        monkeypatch.setenv("WH_URL", ctl.url)
        monkeypatch.setenv("WH_TOKEN", ctl.admin_token)
        run = Runner()
        pdhs = []
        for i in range(3):
            out = run("put", str(tree(remote_env / f"t{i}", i)), "--name", f"c{i}", "--json")
            pdhs.append(json.loads(out.output)["pdh"])
        assert "clean" in run("fsck").output
        lost = pool.servers[0].volume
        lost_blocks = pool.servers[0].blocks()
        assert lost_blocks, "the server to lose held some blocks"
        for shard in lost.iterdir():
            shutil.rmtree(shard)
        report = json.loads(run("fsck", "--json", code=5).output)
        assert sorted(report["under_replicated"]) == sorted(lost_blocks)
        assert report["missing"] == []
        for md5 in lost_blocks:
            assert set(report["collections"][md5]) <= set(pdhs)
        text = run("fsck", code=5).output
        some = next(iter(lost_blocks))
        assert f"under-replicated {some} in " in text
        dry = run("balance", "--dry-run").output
        pulls = [line for line in dry.splitlines() if line.startswith("would pull ")]
        assert len(pulls) == len(lost_blocks)
        assert f"would pull {len(lost_blocks)}," in dry
        assert pool.servers[0].blocks() == set()
        out = json.loads(run("balance", "--json").output)
        assert out["pulled"] == len(lost_blocks)
        volumes = [LocalVolume(s.volume) for s in pool.servers]
        for md5 in set(report["collections"]):
            assert copies(volumes, md5) >= 2
        assert "clean" in run("fsck").output
        assert "pulled 0" in run("balance").output


def test_unreadable_index_stops_gc_and_trashes_nothing(
    remote_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with gc_cluster(remote_env / "c", count=3, ttl=2) as (pool, ctl):
        monkeypatch.setenv("WH_URL", ctl.url)
        monkeypatch.setenv("WH_TOKEN", ctl.admin_token)
        run = Runner()
        run("put", str(tree(remote_env / "named", 0)), "--name", "kept")
        run("put", str(tree(remote_env / "junk", 1)))  # never named: garbage after the TTL
        time.sleep(2.5)
        before = {i: s.blocks() for i, s in enumerate(pool.servers)}
        dry = json.loads(run("gc", "--dry-run", "--json").output)
        assert dry["trashed"] >= 2, "there is garbage to trash"
        pool.servers[2].kill()
        result = run("gc", code=1)
        assert f"keep server {pool.servers[2].url}" in result.stderr
        assert "wh keep retire " in result.stderr  # what to do if it never comes back
        after = {i: s.blocks() for i, s in enumerate(pool.servers)}
        assert after == before
        assert not list(pool.servers[0].volume.glob("*/*.trash.*"))
        assert not list(pool.servers[1].volume.glob("*/*.trash.*"))


def test_gc_needs_an_admin_token(remote_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with gc_cluster(remote_env / "c", count=1) as (_, ctl):
        monkeypatch.setenv("WH_URL", ctl.url)
        monkeypatch.setenv("WH_TOKEN", ctl.user("bob"))
        assert "admin" in Runner()("gc", code=6).stderr
        monkeypatch.setenv("WH_TOKEN", ctl.admin_token)
        run = Runner()
        assert "history_retention\t2592000s" in run("gc", "settings").output
        out = run("gc", "settings", "history_retention=1d", "--json").output
        assert json.loads(out)["history_retention"] == 86400
        assert "configuration" in run("gc", "settings", "signature_ttl=1d", code=2).stderr
        assert "no GC setting 'ttl'" in run("gc", "settings", "ttl=1d", code=2).stderr
        # Not JSON-encodable: once a traceback in the client.
        assert "Error: " in run("gc", "settings", "history_retention=inf", code=2).stderr


def test_fsck_does_not_call_copies_on_a_server_gone_mid_run_corrupt(tmp_path: Path) -> None:
    # fsck reads every copy after reading the indexes; a server that dies in
    # between, or refuses the token, once had every copy reported corrupt.
    data = os.urandom(3000)
    md5 = hashlib.md5(data).hexdigest()
    with keep_pool(tmp_path / "k", 2) as pool:
        services = [Service(f"s{i}", s.url) for i, s in enumerate(pool.servers)]
        for s in pool.servers:
            put = httpx.put(
                f"{s.url}/{md5}",
                content=data,
                headers={"Authorization": f"Bearer {pool.admin_token}"},
            )
            assert put.status_code == 200, put.text
        with KeepAdmin(services, pool.admin_token) as admin:
            indexes = admin.indexes()
            assert admin.verify("s0", indexes["s0"][0]) is True
            pool.servers[1].kill()
            with pytest.raises(GcAborted, match=f"keep server {pool.servers[1].url}"):
                admin.verify("s1", indexes["s1"][0])
        with (
            KeepAdmin(services, "not-the-admin-token") as stranger,
            pytest.raises(GcAborted, match="HTTP 401"),
        ):
            stranger.verify("s0", indexes["s0"][0])


@pytest.mark.timeout(200)
def test_fsck_gives_up_on_a_hung_server_reports_it_and_checks_the_others(
    remote_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopped keep server accepts connections and answers nothing: fsck
    gives up on it after keep_timeout (docs/gc.md), says so, and verifies
    every copy on the others."""
    monkeypatch.setenv("WH_KEEP_TIMEOUT", "2")
    with gc_cluster(remote_env / "c", count=3) as (pool, ctl):
        monkeypatch.setenv("WH_URL", ctl.url)
        monkeypatch.setenv("WH_TOKEN", ctl.admin_token)
        run = Runner()
        for i in range(3):
            run("put", str(tree(remote_env / f"t{i}", i)), "--name", f"c{i}")
        hung = pool.servers[2]
        others = sum(len(s.blocks()) for s in pool.servers[:2])
        os.kill(hung.proc.pid, signal.SIGSTOP)
        try:
            report = json.loads(run("fsck", "--json", code=5).output)
            text = run("fsck", code=5).output
        finally:
            os.kill(hung.proc.pid, signal.SIGCONT)
        assert len(report["unchecked"]) == 1
        assert report["unchecked"][0].startswith(f"keep server {hung.url}")
        assert report["checked"] == others
        assert report["missing"] == [] and report["corrupt"] == []
        assert f"unchecked keep server {hung.url}" in text
        assert "1 servers not checked" in text
        assert "clean" in run("fsck").output


def _trash_files(pool: KeepPool) -> list[Path]:
    return [p for s in pool.servers for p in s.volume.glob("*/*.trash.*")]


@pytest.mark.timeout(200)
def test_gc_and_balance_skip_a_hung_server_within_keep_timeout_and_trash_nothing(
    remote_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stopped keep server costs gc and balance keep_timeout, not 300 s. Not
    knowing what it holds, gc trashes nothing anywhere; balance pulls short
    blocks onto the servers that answer and trashes nothing. Both name it and
    end with one Error line, exit 1 (docs/gc.md)."""
    # The TTL well above the timeout: the mark's reads of root manifests,
    # signed for the TTL, may first wait out the hung server.
    monkeypatch.setenv("WH_KEEP_TIMEOUT", "2")
    with gc_cluster(remote_env / "c", count=3, ttl=8) as (pool, ctl):
        monkeypatch.setenv("WH_URL", ctl.url)
        monkeypatch.setenv("WH_TOKEN", ctl.admin_token)
        run = Runner()
        for i in range(3):
            run("put", str(tree(remote_env / f"named{i}", i)), "--name", f"kept{i}")
        run("put", str(tree(remote_env / "junk", 9)))  # never named: garbage after the TTL
        time.sleep(8.5)
        assert json.loads(run("gc", "--dry-run", "--json").output)["trashed"] >= 2
        stored = set().union(*(s.blocks() for s in pool.servers))
        hung = pool.servers[2]
        before = {i: s.blocks() for i, s in enumerate(pool.servers)}
        os.kill(hung.proc.pid, signal.SIGSTOP)
        try:
            gc_run = run("gc", code=1)
            gc_json = run("gc", "--json", code=1)
            balanced = run("balance", code=1)
        finally:
            os.kill(hung.proc.pid, signal.SIGCONT)
        for result in (gc_run, balanced):
            assert result.stderr.startswith("Error: "), result.stderr
            assert result.stderr.count("\n") == 1, result.stderr
            assert f"keep server {hung.url}" in result.stderr
            assert "trashed nothing" in result.stderr
            assert f"unchecked keep server {hung.url}" in result.stdout
        report = json.loads(gc_json.stdout)
        assert report["trashed"] == 0 and len(report["unchecked"]) == 1
        assert not _trash_files(pool)
        after = {i: s.blocks() for i, s in enumerate(pool.servers)}
        assert after[2] == before[2]
        assert before[0] <= after[0] and before[1] <= after[1]
        # Balance pulled what looked short (the copies on the hung server were
        # not counted) onto the servers that answered.
        pulled = (after[0] - before[0]) | (after[1] - before[1])
        assert pulled and pulled <= stored & before[2]
        # Once the server answers again, both run whole.
        run("balance")
        assert json.loads(run("gc", "--json").output)["trashed"] >= 2


class _TrickledIndex(BaseHTTPRequestHandler):
    """A keep server that answers its index one byte every 0.3 s, for ever:
    never silent for the client's timeout, never done."""

    server: _TrickleServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path != "/index":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.end_headers()  # no length: the body ends when the connection does
        line = f"{'0' * 32}+1 1\n".encode()
        try:
            for n in itertools.count():
                if self.server.stop.wait(0.3):
                    return
                self.wfile.write(line[n % len(line) :][:1])
                self.wfile.flush()
        except OSError:
            return


class _TrickleServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _TrickledIndex)
        self.stop = threading.Event()


@pytest.mark.timeout(200)
def test_fsck_gives_up_on_a_server_trickling_its_index(
    remote_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keep server sending its index a byte at a time is never silent for
    keep_timeout; the index request's own deadline (keep_timeout plus one
    second per 64 KiB) ends it: fsck names it unchecked and exits 5, gc
    trashes nothing and exits 1."""
    monkeypatch.setenv("WH_KEEP_TIMEOUT", "2")
    trickler = _TrickleServer()
    threading.Thread(target=trickler.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{trickler.server_address[1]}"
    try:
        with gc_cluster(remote_env / "c", count=2) as (_, ctl):
            monkeypatch.setenv("WH_URL", ctl.url)
            monkeypatch.setenv("WH_TOKEN", ctl.admin_token)
            run = Runner()
            run("put", str(tree(remote_env / "t", 0)), "--name", "c")
            catalog.register_keep_service(ctl.state.engine, url)
            report = json.loads(run("fsck", "--json", code=5).output)
            assert len(report["unchecked"]) == 1, report["unchecked"]
            assert report["unchecked"][0].startswith(f"keep server {url}")
            assert "not over within 2 s" in report["unchecked"][0]
            assert report["corrupt"] == [] and report["missing"] == []
            failed = run("gc", code=1)
            assert failed.stderr.startswith(f"Error: gc trashed nothing: keep server {url}")
    finally:
        trickler.stop.set()
        trickler.shutdown()
        trickler.server_close()
