"""The optional memcached shared by nodes for small blocks (docs/s3.md, "The
cache"): a real memcached (Debian's `memcached`) on a free port of
127.0.0.1. Skipped when there is none, failed under CI."""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import WH_BIN, listening, wh_serve
from test_cache_reads import _block_gets, _same, _stop, _tree
from warehouse.blocks.memcache import MAX_ITEM, MemcachedBlocks, parse_servers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def memcached() -> Iterator[str]:
    binary = shutil.which("memcached")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("no memcached binary: apt-get install memcached")
        pytest.skip("no memcached binary (apt-get install memcached)")
    port = _free_port()
    proc = subprocess.Popen(
        # As root, memcached wants to be told which user to run as.
        [binary, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-m", "64"]
        + (["-u", getpass.getuser()] if os.geteuid() == 0 else []),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"memcached did not start on {address}")
                time.sleep(0.05)
        yield address
    finally:
        proc.terminate()
        proc.wait(30)


def test_blocks_in_memcached_are_checked(memcached: str) -> None:
    from pymemcache.client.base import Client

    shared = MemcachedBlocks(parse_servers(memcached))
    raw = Client(tuple(parse_servers(memcached)[0]))
    try:
        data = os.urandom(5000)
        md5 = hashlib.md5(data).hexdigest()
        assert shared.get(md5, len(data)) is None
        shared.put(md5, data)
        assert shared.get(md5, len(data)) == data
        # A value changed behind the cache's back is no hit, and is deleted.
        assert raw.set(f"wh-block-{md5}", b"x" + data[1:], noreply=False)
        assert shared.get(md5, len(data)) is None
        assert raw.get(f"wh-block-{md5}") is None
        # Big blocks are not kept: one GET costs less than memcached's limit allows.
        big = os.urandom(MAX_ITEM + 1)
        big_md5 = hashlib.md5(big).hexdigest()
        shared.put(big_md5, big)
        assert raw.get(f"wh-block-{big_md5}") is None
        assert shared.stats()["get_hits"] >= 1
    finally:
        raw.close()
        shared.close()


def test_another_node_reads_small_blocks_from_memcached(tmp_path: Path, memcached: str) -> None:
    """Two clients with no disk cache (two nodes, as far as caches go): once
    one has read a collection of small blocks, the other's read (and the
    controller's of its manifest) asks no keep server. With memcached
    gone, reads go on from the keep servers."""
    log = tmp_path / "access.log"
    env = {
        **os.environ,
        "WH_HOME": str(tmp_path / "home"),
        "WH_CACHE_SIZE": "0",
        "WH_MEMCACHED": memcached,
    }
    env.pop("WH_URL", None)
    server = wh_serve(env, "--keep", "2", "--access-log", str(log), "--executor", "none")
    try:
        url, _ = listening(server, keep=2)
        admin = subprocess.run(
            [WH_BIN, "user", "add", "admin", "--admin"], env=env, capture_output=True, text=True
        )
        assert admin.returncode == 0, admin.stderr
        remote = {**env, "WH_URL": url, "WH_TOKEN": admin.stdout.strip()}

        def wh(*args: str, **more: str) -> str:
            done = subprocess.run(
                [WH_BIN, *args], env={**remote, **more}, capture_output=True, text=True
            )
            assert done.returncode == 0, (args, done.stderr)
            return done.stdout

        tree = _tree(tmp_path / "t")
        wh("put", str(tree), "--name", "t")
        before = _block_gets(log)
        wh("get", "t", str(tmp_path / "first"))
        first = _block_gets(log)
        assert first > before
        wh("get", "t", str(tmp_path / "second"), XDG_CACHE_HOME=str(tmp_path / "other-node"))
        _same(tree, tmp_path / "second")
        assert _block_gets(log) == first
        stats = json.loads(wh("cache", "stats", "--json"))
        assert stats["on"] is False
        assert stats["memcached"]["get_hits"] >= 4, stats
    finally:
        _stop(server)


def test_a_memcached_that_is_down_is_a_miss(tmp_path: Path) -> None:
    shared = MemcachedBlocks([("127.0.0.1", _free_port())])
    assert shared.get("0" * 32, 10) is None
    shared.put("0" * 32, b"0123456789")  # no error
    assert shared.stats()["get_hits"] == 0
    shared.close()
