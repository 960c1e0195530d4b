"""The disk cache in use (docs/s3.md, "The cache"): through a controller whose
keep servers keep their blocks on S3 volumes or on local disks, a second
read of a collection (`wh get`, `wh cat`) sends no GET to a keep server nor
to the store. Counted where the requests arrive, not by the client: the
keep servers' access log and, for S3, a proxy in front of SeaweedFS."""

from __future__ import annotations

import filecmp
import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from cluster import WH_BIN, listening, wh_serve
from jobs_helpers import put_function, run_job
from s3_helpers import S3Server, s3_server, s3_spec, s3_specs  # noqa: F401 (fixtures)
from test_s3_faults import FaultProxy
from warehouse.embedded import EmbeddedWarehouse

# A keep server's block request in its access log: "client GET /<md5>+... 200 ...".
_BLOCK_GET = re.compile(r"\bGET /[0-9a-f]{32}\+")


def _tree(root: Path) -> Path:
    # Three directories: three streams, so three data blocks and the manifest's.
    for i, name in enumerate(("a", "b", "c")):
        (root / name).mkdir(parents=True)
        (root / name / "f").write_bytes(os.urandom(100_000 + i))
    (root / "a" / "small.txt").write_text("small\n")
    return root


def _same(a: Path, b: Path) -> None:
    cmp = filecmp.dircmp(a, b)
    assert not (cmp.diff_files or cmp.left_only or cmp.right_only)
    for sub in cmp.common_dirs:
        _same(a / sub, b / sub)


def _block_gets(log: Path) -> int:
    return len(_BLOCK_GET.findall(log.read_text())) if log.exists() else 0


def _stop(server: subprocess.Popen[str]) -> None:
    server.terminate()
    assert server.wait(60) == 0
    if server.stdout:
        server.stdout.close()


def _reads_twice(
    tmp_path: Path, serve_options: list[str], store_gets: Callable[[], int] | None
) -> None:
    log = tmp_path / "access.log"
    env = {
        **os.environ,
        "WH_HOME": str(tmp_path / "home"),
        "WH_CACHE_DIR": str(tmp_path / "cache"),  # the node's: the controller's too
        "WH_CACHE_SIZE": "64M",
    }
    env.pop("WH_URL", None)
    server = wh_serve(env, "--keep", "2", "--access-log", str(log), *serve_options)
    try:
        url, keeps = listening(server, keep=2)
        admin = subprocess.run(
            [WH_BIN, "user", "add", "admin", "--admin"], env=env, capture_output=True, text=True
        )
        assert admin.returncode == 0, admin.stderr
        remote = {**env, "WH_URL": url, "WH_TOKEN": admin.stdout.strip()}

        def wh(*args: str) -> str:
            done = subprocess.run([WH_BIN, *args], env=remote, capture_output=True, text=True)
            assert done.returncode == 0, (args, done.stderr)
            return done.stdout

        tree = _tree(tmp_path / "t")
        wh("put", str(tree), "--name", "t")
        before = _block_gets(log), store_gets() if store_gets else 0
        wh("get", "t", str(tmp_path / "first"))
        _same(tree, tmp_path / "first")
        first = _block_gets(log), store_gets() if store_gets else 0
        assert first[0] > before[0], "the first read fetched from the keep servers"
        if store_gets:
            assert first[1] > before[1], "and they from the store"

        # Warm: a whole get and a cat, and nothing is asked of a keep server.
        wh("get", "t", str(tmp_path / "second"))
        _same(tree, tmp_path / "second")
        assert wh("cat", "t/a/small.txt") == "small\n"
        assert (_block_gets(log), store_gets() if store_gets else 0) == first
        stats = json.loads(wh("cache", "stats", "--json"))
        # Hits: the get's three data blocks and the cat's one (the manifest's
        # own block is a fourth entry, read only when the text is not had
        # from the controller).
        assert stats["hits"] >= 4 and stats["entries"] >= 4, stats
        # keepd's /metrics shows the node's cache as its state file counts it.
        scraped = httpx.get(f"{keeps[0]}/metrics").text
        hits = re.search(r'^wh_block_cache_hits_total\{dir="[^"]*"\} (\S+)$', scraped, re.M)
        assert hits is not None and float(hits.group(1)) >= stats["hits"]

        # Cleared, the same read goes to the keep servers again (the count is live).
        assert wh("cache", "clear").startswith("removed ")
        wh("get", "t", str(tmp_path / "third"))
        assert _block_gets(log) > first[0]
    finally:
        _stop(server)


def test_a_warm_second_read_asks_no_local_keep_server(tmp_path: Path) -> None:
    _reads_twice(tmp_path, ["--executor", "none"], None)


def test_a_warm_second_read_asks_nothing_of_the_s3_store(
    tmp_path: Path,
    s3_server: S3Server,  # noqa: F811
    s3_spec: str,  # noqa: F811
) -> None:
    proxy = FaultProxy(s3_server.endpoint)
    try:
        spec = s3_spec.replace(s3_server.endpoint, proxy.url)

        def store_gets() -> int:
            with proxy.lock:
                return sum(1 for r in proxy.seen if r.startswith("GET ") and "list-type" not in r)

        _reads_twice(tmp_path, ["--keep-s3", spec, "--executor", "none"], store_gets)
    finally:
        proxy.close()


def test_the_cache_off_reads_the_keep_servers_each_time(tmp_path: Path) -> None:
    """``cache_size`` 0: every read goes to a keep server, nothing is cached."""
    log = tmp_path / "access.log"
    env = {
        **os.environ,
        "WH_HOME": str(tmp_path / "home"),
        "WH_CACHE_DIR": str(tmp_path / "cache"),
        "WH_CACHE_SIZE": "0",
    }
    env.pop("WH_URL", None)
    server = wh_serve(env, "--keep", "2", "--access-log", str(log), "--executor", "none")
    try:
        url, _ = listening(server, keep=2)
        admin = subprocess.run(
            [WH_BIN, "user", "add", "admin", "--admin"], env=env, capture_output=True, text=True
        )
        remote = {**env, "WH_URL": url, "WH_TOKEN": admin.stdout.strip()}
        tree = _tree(tmp_path / "t")
        for args in (["put", str(tree), "--name", "t"], ["get", "t", str(tmp_path / "one")]):
            done = subprocess.run([WH_BIN, *args], env=remote, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
        once = _block_gets(log)
        done = subprocess.run(
            [WH_BIN, "get", "t", str(tmp_path / "two")], env=remote, capture_output=True
        )
        assert done.returncode == 0
        assert _block_gets(log) > once
        assert not (tmp_path / "cache").exists()
    finally:
        _stop(server)


CAT_STEP = """#!/bin/sh
set -e
wh cat "$WH_JOB_INPUT/a/f" > "$WH_SCRATCH/f"
pdh=$(wh put "$WH_SCRATCH/f")
wh manifest "$pdh" | wh step output -
"""


def test_an_embedded_warehouse_on_a_bucket_reads_warm_blocks_from_disk(
    tmp_path: Path,
    s3_server: S3Server,  # noqa: F811
    s3_spec: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The embedded warehouse on a bucket: once `wh get` has read a
    collection, another get and a job's step (`wh cat` of its input) send
    no GET for its blocks to the store."""
    proxy = FaultProxy(s3_server.endpoint)
    monkeypatch.setenv("WH_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WH_VOLUME", s3_spec.replace(s3_server.endpoint, proxy.url))
    monkeypatch.setenv("WH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("WH_URL", raising=False)
    monkeypatch.delenv("WH_CACHE_SIZE", raising=False)  # the default: on

    def block_gets(md5s: set[str]) -> int:
        with proxy.lock:
            return sum(1 for r in proxy.seen if r.startswith("GET ") and any(m in r for m in md5s))

    wh = EmbeddedWarehouse()
    try:
        fn = put_function(wh, tmp_path, "cat.sh", CAT_STEP)
        tree = _tree(tmp_path / "t")
        pdh = wh.put([tree]).pdh
        data = set(re.findall(r"\b([0-9a-f]{32})\+\d+", wh.manifest(pdh).format()))
        assert len(data) >= 3
        done = subprocess.run(
            [WH_BIN, "get", pdh, str(tmp_path / "first")], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        _same(tree, tmp_path / "first")
        warmed = block_gets(data)
        assert warmed >= len(data), "the first get read every block from the store"

        done = subprocess.run(
            [WH_BIN, "get", pdh, str(tmp_path / "second")], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        _same(tree, tmp_path / "second")
        job = run_job(wh, fn, pdh)
        assert job.state == "complete", job
        assert job.output_pdh is not None
        assert wh.reader(job.output_pdh).read_file("f") == (tree / "a" / "f").read_bytes()
        assert block_gets(data) == warmed
    finally:
        wh.close()
        proxy.close()
