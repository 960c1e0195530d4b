"""The node-local disk cache of blocks (docs/s3.md, "The cache"): verified
hits, bad entries dropped, a bound kept least-recently-used, counts that
stay right with many processes reading and filling one cache at once, and
`wh cache stats|clear`."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import Runner
from warehouse.blocks.diskcache import DiskCache, parse_size, read_stats
from warehouse.blocks.nodecache import NodeCaches
from warehouse.blocks.volume import LocalVolume
from warehouse.volumes.store import VolumeBlockStore


def _block(i: int, size: int = 1000) -> tuple[str, bytes]:
    data = hashlib.sha256(str(i).encode()).digest() * (size // 32 + 1)
    data = data[:size]
    return hashlib.md5(data).hexdigest(), data


def test_a_hit_is_the_block_and_is_counted(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "c", 1 << 20)
    md5, data = _block(1)
    assert cache.get(md5, len(data)) is None
    cache.put(md5, data)
    assert cache.get(md5, len(data)) == data
    stats = cache.stats()
    assert (stats.entries, stats.bytes, stats.hits, stats.misses) == (1, 1000, 1, 1)
    # Another size under the same name is no hit (and the entry is dropped).
    assert cache.get(md5, 999) is None
    assert cache.stats().entries == 0
    cache.close()


def test_a_bad_entry_is_dropped_and_fetched_again(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "c", 1 << 20)
    md5, data = _block(2)
    cache.put(md5, data)
    entry = tmp_path / "c" / md5[:2] / md5
    entry.write_bytes(b"x" + data[1:])  # a stray write: same size, other bytes
    assert cache.get(md5, len(data)) is None
    assert not entry.exists()
    assert read_stats(tmp_path / "c")[:2] == [0, 0]
    cache.put(md5, data)  # the caller fetched it again
    assert cache.get(md5, len(data)) == data
    entry.write_bytes(data[:10])  # torn
    assert cache.get(md5, len(data)) is None
    cache.close()


def test_the_bound_pushes_out_the_least_recently_used(tmp_path: Path) -> None:
    cache = DiskCache(tmp_path / "c", 3500)
    blocks = [_block(i) for i in range(4)]
    for md5, data in blocks[:3]:
        cache.put(md5, data)
    # Block 0 is read again, so block 1 is now the least recently used.
    assert cache.get(blocks[0][0], 1000) == blocks[0][1]
    cache.put(*blocks[3])
    held = {md5 for md5, _ in blocks if cache.get(md5, 1000) is not None}
    assert held == {blocks[0][0], blocks[2][0], blocks[3][0]}
    stats = cache.stats()
    assert stats.bytes <= 3500 and read_stats(tmp_path / "c")[:2] == [stats.bytes, stats.entries]
    # A block over the whole bound is not kept at all.
    big_md5, big = _block(9, 4000)
    cache.put(big_md5, big)
    assert cache.get(big_md5, 4000) is None
    assert cache.clear() == (3, 3000)
    assert cache.stats().entries == 0
    cache.close()


_WORKER = """
import hashlib, json, random, sys
from pathlib import Path
from warehouse.blocks.diskcache import DiskCache

root, budget, seed, reads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def block(i):
    size = 4096 + (i * 7919) % 60000
    data = (hashlib.sha256(str(i).encode()).digest() * (size // 32 + 1))[:size]
    return hashlib.md5(data).hexdigest(), data

cache = DiskCache(Path(root), budget)
rng = random.Random(seed)
hits = wrong = 0
for _ in range(reads):
    md5, data = block(rng.randrange(24))
    got = cache.get(md5, len(data))
    if got is None:
        cache.put(md5, data)
    elif got != data:
        wrong += 1
    else:
        hits += 1
    if seed == 0 and rng.random() < 0.02:
        cache.clear()
print(json.dumps({"hits": hits, "wrong": wrong}))
"""


def test_many_processes_share_one_small_cache(tmp_path: Path) -> None:
    """Six processes read 24 blocks of up to 64 KiB at random through one
    cache bounded to about five of them, one process clearing it now and
    then: every hit is the right block, the bound holds, and the shared
    counts match the files and every read made."""
    root, budget, reads, procs = tmp_path / "c", 200_000, 300, 6
    script = tmp_path / "worker.py"
    script.write_text(_WORKER)
    workers = [
        subprocess.Popen(
            [sys.executable, str(script), str(root), str(budget), str(seed), str(reads)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in range(procs)
    ]
    results = []
    for w in workers:
        out, err = w.communicate(timeout=600)
        assert w.returncode == 0, err
        results.append(json.loads(out))
    assert sum(r["wrong"] for r in results) == 0
    assert sum(r["hits"] for r in results) > 0
    cache = DiskCache(root, budget)
    stats = cache.stats()
    assert stats.bytes <= budget
    used, entries, hits, misses = read_stats(root)
    assert (used, entries) == (stats.bytes, stats.entries)
    assert hits + misses == procs * reads
    assert hits == sum(r["hits"] for r in results)
    leftovers = [p for p in root.rglob("*.tmp")]
    assert leftovers == []
    cache.close()


def test_sizes() -> None:
    assert parse_size("4G") == 4 << 30
    assert parse_size("512m") == 512 << 20
    assert parse_size("100000") == 100000
    assert parse_size("0") == 0
    for bad in ("", "-1", "4X", "1.5G", "G"):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_wh_cache_stats_and_clear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WH_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("WH_CACHE_SIZE", "1M")
    cache = DiskCache(tmp_path / "c", 1 << 20)
    md5, data = _block(5)
    cache.put(md5, data)
    assert cache.get(md5, len(data)) == data
    assert cache.get(_block(6)[0], 1000) is None
    cache.close()
    run = Runner()
    stats = json.loads(run("cache", "stats", "--json").output)
    assert stats == {
        "dir": str(tmp_path / "c"),
        "budget": 1 << 20,
        "entries": 1,
        "bytes": 1000,
        "hits": 1,
        "misses": 1,
        "on": True,
        "memcached": None,
    }
    assert "entries  1" in run("cache", "stats").output
    assert run("cache", "clear").output == "removed 1 blocks, 1000 bytes\n"
    cleared = json.loads(run("cache", "stats", "--json").output)
    # The counts are counters since the cache was made: a clear keeps them (docs/s3.md).
    assert (cleared["entries"], cleared["hits"], cleared["misses"]) == (0, 1, 1)
    monkeypatch.setenv("WH_CACHE_SIZE", "lots")
    bad = run("cache", "stats", code=2)
    assert bad.output.count("Error:") == 1 and "WH_CACHE_SIZE" in bad.output
    monkeypatch.setenv("WH_CACHE_SIZE", "0")
    assert json.loads(run("cache", "stats", "--json").output)["on"] is False


def test_a_cache_that_cannot_be_written_only_misses(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"not a directory")
    cache = DiskCache(tmp_path / "file" / "c", 1 << 20)
    md5, data = _block(7)
    cache.put(md5, data)  # no error: the read that fetched it goes on
    assert cache.get(md5, len(data)) is None
    cache.close()


def test_a_sandboxed_step_never_gets_the_controllers_cache() -> None:
    """A hit asks no keep server to check a signature: the controller's
    cache must not be a step's (its home, and so its cache, is its scratch)."""
    from warehouse.jobs.sandbox import Sandbox

    cmd = Sandbox("/usr/bin/bwrap", None, None, ()).wrap(
        ["/x/run.sh"], function_dir="/f", scratch="/s/tmp", result="/s/result"
    )
    assert cmd[cmd.index("WH_CACHE_DIR") - 1] == "--unsetenv"
    assert cmd[cmd.index("XDG_CACHE_HOME") - 1] == "--unsetenv"
    assert cmd[cmd.index("HOME") + 1] == "/s/tmp"


def test_a_hit_waits_for_no_lock(tmp_path: Path) -> None:
    """Another process holding the state's lock (a long eviction) does not
    hold up a hit; the hit is counted once the lock is free."""
    cache = DiskCache(tmp_path / "c", 1 << 20)
    md5, data = _block(11)
    cache.put(md5, data)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys; f = open(sys.argv[1], 'rb'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('held', flush=True); sys.stdin.read()",
            str(tmp_path / "c" / "state"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        done = threading.Event()
        got: list[bytes | None] = []
        reader = threading.Thread(
            target=lambda: (got.append(cache.get(md5, len(data))), done.set())
        )
        reader.start()
        assert done.wait(60), "a hit waited for the state file's lock"
        assert got == [data]
    finally:
        holder.communicate("", timeout=60)
    assert cache.stats().hits == 1
    cache.close()


@pytest.mark.skipif(not LocalVolume.can_check_open(), reason="no native batched MD5 here")
def test_a_one_pass_read_checks_warm_entries_together(tmp_path: Path) -> None:
    """Big blocks of a one-pass read (``get_ahead``) come from the disk
    cache, checked together, once it is warm: with the volume's copies
    gone they still read; a bad entry is fetched from the volume again."""
    volume = LocalVolume(tmp_path / "v")
    cache = DiskCache(tmp_path / "c", 64 << 20)
    store = VolumeBlockStore(volume, None, NodeCaches(cache))
    blocks = [os.urandom((2 << 20) + i) for i in range(4)]
    locators = [store.put(b).locator for b in blocks]
    assert store.checks_ahead()
    assert [bytes(call()) for call in store.get_ahead(locators)] == blocks  # cold: fetched
    assert (cache.stats().hits, cache.stats().misses) == (0, 4)
    for loc in locators:
        assert volume.trash(loc.md5)
    assert [bytes(call()) for call in store.get_ahead(locators)] == blocks  # warm: no volume
    assert (cache.stats().hits, cache.stats().misses) == (4, 4)
    assert volume.untrash(locators[2].md5)
    entry = tmp_path / "c" / locators[2].md5[:2] / locators[2].md5
    entry.write_bytes(b"x" + blocks[2][1:])
    assert [bytes(call()) for call in store.get_ahead(locators)] == blocks
    assert (cache.stats().hits, cache.stats().misses) == (7, 5)
    assert entry.read_bytes() == blocks[2]  # fetched again and kept
    store.close()
