"""A directory of more files than a put holds (``WH_PUT_HELD_ENTRIES``,
lowered here) is sorted in runs in a scratch file and its stream written in
parts: the same manifest text, PDH and listing as when it is held whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from conftest import wh_process
from memory_helpers import limited
from warehouse.collection import packing
from warehouse.collection.records import listing_of
from warehouse.collection.scan import LazyTree, SpilledFiles, scan_paths
from warehouse.collection.scratch import HELD_ENTRIES_VAR, SpilledDigests
from warehouse.collection.spool import Spool
from warehouse.collection.writer import write_tree
from warehouse.embedded import EmbeddedWarehouse
from warehouse.manifest import Manifest
from warehouse.putcache import RACY_NS, CacheSession, PutCache
from warehouse.putcache import session as cache_session

FILES = 3000


def _make(root: Path) -> Path:
    """A flat directory of FILES files (empty ones, escaped and UTF-8 names,
    names written in no order) beside a small subdirectory and an empty one."""
    flat = root / "flat"
    flat.mkdir(parents=True)
    for i in reversed(range(FILES)):
        name = f"f{i * 7919 % FILES:05d}" + ("", " sp", "\u00e9", ".", "\\b")[i % 5]
        (flat / name).write_bytes(b"" if i % 11 == 0 else b"%d\n" % i * (i % 4 + 1))
    # A file of blocks then empty files: with small blocks, a stream to
    # normalize again (its last block is empty).
    (flat / "zz big").write_bytes(bytes(range(256)) * 40)
    (flat / "zz empty").write_bytes(b"")
    (root / "flat" / "sub").mkdir()
    (root / "flat" / "sub" / "one").write_bytes(b"one\n")
    (root / "flat" / "empty").mkdir()
    (root / "top").write_bytes(b"top\n")
    return root


def _put(home: Path, src: Path) -> tuple[str, bytes, str]:
    with EmbeddedWarehouse(home) as wh:
        pdh = wh.put(src).pdh
        listing = listing_of(wh.engine, pdh, wh.user)
        assert listing is not None
        return pdh, wh.manifest_text(pdh), listing


def test_a_directory_past_the_threshold_is_stored_as_one_held_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _make(tmp_path / "src")
    held = _put(tmp_path / "held", src)
    monkeypatch.setenv(HELD_ENTRIES_VAR, "500")
    walked = list(LazyTree([src]).walk())
    assert isinstance(walked[1].files, SpilledFiles), "the flat directory is spilled"
    assert len(walked[1].files) == FILES + 2
    spilled = _put(tmp_path / "spilled", src)
    assert spilled == held
    pdh, text, listing = spilled
    assert len(json.loads(listing)) == FILES + 4
    # Every byte back.
    with EmbeddedWarehouse(tmp_path / "spilled") as wh:
        wh.get(pdh, tmp_path / "out")
    for path in src.rglob("*"):
        got = tmp_path / "out" / path.relative_to(src)
        assert got.is_dir() if path.is_dir() else got.read_bytes() == path.read_bytes(), path
    assert sum(1 for _ in (tmp_path / "out").rglob("*")) == sum(1 for _ in src.rglob("*"))
    # Kept in memory (no spool): the same text, from the same segments.
    with EmbeddedWarehouse(tmp_path / "spilled") as wh:
        kept = write_tree(wh.store, [src])
    assert kept.manifest.portable_text().encode() == text


def test_a_spilled_directory_walks_in_name_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _make(tmp_path / "src")
    whole = [(d.rel, list(d.files)) for d in scan_paths([src]).walk()]
    monkeypatch.setenv(HELD_ENTRIES_VAR, "7")
    lazy = [(d.rel, list(d.files)) for d in LazyTree([src]).walk()]
    assert lazy == whole
    # Read twice at once: each reading has its own place.
    files = next(d for d in LazyTree([src]).walk() if d.rel == "flat").files
    one, two = iter(files), iter(files)
    assert [next(one) for _ in range(3)] == [next(two) for _ in range(3)]
    assert list(one) == list(two) == whole[1][1][3:]


class Put(NamedTuple):
    """What a put of a tree into a spool made of it."""

    pdh: str
    text: bytes
    listing: str
    bytes_read: int
    file_count: int


def _held_and_spilled(
    monkeypatch: pytest.MonkeyPatch,
    wh: EmbeddedWarehouse,
    src: Path,
    held: str,
    block_size: int,
    *,
    batch: int | None = None,
) -> Put:
    """``src`` put twice, held whole then spilled past ``held`` entries (its
    files of a block hashed ``batch`` at a time if given): what the two
    made, checked to be the same."""
    whole = packing._WHOLE_BATCH
    puts = []
    for entries, at_a_time in (("100000", whole), (held, batch or whole)):
        monkeypatch.setenv(HELD_ENTRIES_VAR, entries)
        monkeypatch.setattr(packing, "_WHOLE_BATCH", at_a_time)
        with Spool(src.parent) as spool:
            done = write_tree(wh.store, [src], spool=spool, block_size=block_size)
            puts.append(
                Put(spool.pdh, spool.text(), spool.listing(), done.bytes_read, spool.file_count)
            )
    monkeypatch.setattr(packing, "_WHOLE_BATCH", whole)
    assert puts[0] == puts[1]
    return puts[1]


def test_a_spool_takes_a_stream_in_parts_as_it_takes_it_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _make(tmp_path / "src")
    # Blocks of 16 KiB: a stream of several blocks, written in parts; of
    # 4 KiB: "zz big" fills blocks and the empty file after it would end the
    # stream with an empty block, so the stream is normalized again, whole.
    for block_size in (16384, 4096):
        with EmbeddedWarehouse(tmp_path / "home") as wh:
            # Spilled, the files of a block hashed a few at a time as well.
            put = _held_and_spilled(monkeypatch, wh, src, "500", block_size, batch=7)
        assert put.file_count == FILES + 4
        assert put.text.count(b"\n") == 4


def test_a_spilled_stream_ending_in_an_empty_block_is_written_in_parts_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Empty files after a file of a block or more end the stream with an
    empty block, which normalizing drops: spilled, the stream is written in
    parts without it, the same text and listing as held whole."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(300):
        (src / f"a{i:03d}").write_bytes(b"%d\n" % i)
    (src / "m big").write_bytes(os.urandom(10_000))  # blocks of its own
    for name in ("z empty", "z empty 2"):
        (src / name).write_bytes(b"")
    with EmbeddedWarehouse(tmp_path / "home") as wh:
        put = _held_and_spilled(monkeypatch, wh, src, "100", 4096)
    assert b" d41d8cd98f00b204e9800998ecf8427e+0" not in put.text
    assert len(json.loads(put.listing)) == 303


def _named_twice(src: Path, count: int) -> Path:
    """A flat directory of ``count`` tiny files, among them two alike of
    three 8 KiB blocks and more, and one of zeros whose blocks are alike:
    in 8 KiB blocks, a stream naming blocks twice, to normalize again."""
    src.mkdir()
    for i in range(count):
        (src / f"f{i:06d}").write_bytes(b"" if i % 13 == 0 else b"%d\n" % i)
    big = random.Random(5).randbytes(3 * 8192 + 100)
    (src / f"f{count // 3:06d} big").write_bytes(big)
    (src / f"f{2 * count // 3:06d} big").write_bytes(big)
    (src / f"f{count // 2:06d} zeros").write_bytes(bytes(4 * 8192 + 7))
    return src


def test_a_spilled_stream_naming_a_block_twice_is_normalized_in_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks named twice (two files alike, a block of zeros again): the
    stream, normalized again, lists each block once; spilled, it is written
    in parts, the same text, PDH and listing as held whole, every byte back."""
    src = _named_twice(tmp_path / "src", FILES)
    with EmbeddedWarehouse(tmp_path / "home") as wh:
        put = _held_and_spilled(monkeypatch, wh, src, "500", 8192)
        text, listing = put.text, put.listing
        (line,) = text.decode().splitlines()
        locators = [w for w in line.split(" ")[1:] if "+" in w and ":" not in w]
        assert len(locators) == len(set(locators)), "each block listed once"
        assert len(locators) < sum(p.stat().st_size for p in src.iterdir()) // 8192 + 3
        listed = json.loads(listing)
        assert len(listed) == FILES + 3
        # Every byte back, from the blocks the text names.
        for path, entry in Manifest.parse(text).files().items():
            data = b"".join(
                bytes(wh.store.get(p.locator))[p.offset : p.offset + p.length] for p in entry.pieces
            )
            assert data == (src / path).read_bytes(), path
            assert listed[path] == hashlib.md5(data).hexdigest()


# What a spilled put naming blocks twice may grow by from 6,000 files to
# 12,000 (traced, the scan's runs as many each time): 0.5 MB here;
# held whole to be normalized again, 3.4 MB (0.57 KB a file).
NAMED_TWICE_GROWTH = 2 << 20


def test_a_stream_normalized_in_parts_is_never_held_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    peaks = {}
    with EmbeddedWarehouse(tmp_path / "home") as wh:
        for count in (6_000, 12_000):
            src = _named_twice(tmp_path / f"src{count}", count)
            # As many runs of sorted names each time: what grows is the file count.
            monkeypatch.setenv(HELD_ENTRIES_VAR, str(count // 8))
            with Spool(tmp_path) as spool:
                tracemalloc.start()
                try:
                    write_tree(wh.store, [src], spool=spool, block_size=8192, workers=2)
                    peaks[count] = tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()
                assert spool.file_count == count + 3
    assert peaks[12_000] - peaks[6_000] < NAMED_TWICE_GROWTH, peaks


def test_spilled_digests_are_read_back_in_order() -> None:
    """A spilled directory's MD5s, set in runs out of order by several
    threads, come back in the order of the files; one never set is an error."""
    count = 5000
    digests = [hashlib.md5(b"%d" % i).digest() for i in range(count)]
    runs = [(i, min(i + 37, count)) for i in range(0, count, 37)]
    random.Random(7).shuffle(runs)
    table = SpilledDigests(count)
    try:

        def setter(part: list[tuple[int, int]]) -> None:
            for lo, hi in part:
                table[16 * lo : 16 * hi] = b"".join(digests[lo:hi])

        threads = [threading.Thread(target=setter, args=(runs[k::4],)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(table) == 16 * count
        assert table.read() == b"".join(digests)
        assert list(table.hex()) == [d.hex() for d in digests]
        assert b"".join(table.pieces(100)) == b"".join(digests)  # a whole number each time
        with pytest.raises(IndexError):
            table[16 * count : 16 * count + 16] = digests[0]
        with pytest.raises(ValueError, match="16 bytes each"):
            table[8:24] = digests[0]
    finally:
        table.close()
    short = SpilledDigests(3)
    try:
        short[0:32] = digests[0] + digests[1]
        with pytest.raises(OSError, match="ends at 32 of 48 bytes"):
            short.read()
    finally:
        short.close()


def test_a_put_of_a_spilled_directory_through_wh_is_a_held_ones(tmp_path: Path) -> None:
    """`wh put` itself (the resume cache on, as it is by default), the
    directory spilled and its MD5s in a scratch file: the PDH and listing
    of the held directory, and every byte back."""
    src = _make(tmp_path / "src")
    held = _put(tmp_path / "held", src)
    home = tmp_path / "wh"
    env = {HELD_ENTRIES_VAR: "500", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = wh_process("put", "--no-progress", str(src), home=home, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == held[0]
    with EmbeddedWarehouse(home) as wh:
        assert wh.manifest_text(held[0]) == held[1]
        assert listing_of(wh.engine, held[0], wh.user) == held[2]
    got = wh_process("get", held[0], str(tmp_path / "out"), home=home, env=env)
    assert got.returncode == 0, got.stderr
    for path in src.rglob("*"):
        out = tmp_path / "out" / path.relative_to(src)
        assert out.is_dir() if path.is_dir() else out.read_bytes() == path.read_bytes(), path


def test_a_spilled_directory_through_the_resume_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files the cache answers for (large ones) in a spilled directory: held
    whole again for the cache, the same collection, the second put reading
    none of them."""
    src = tmp_path / "src"
    src.mkdir()
    for i in range(12):
        (src / f"f{11 - i:02d}").write_bytes(bytes([i]) * (40_000 + i))
    with EmbeddedWarehouse(tmp_path / "home") as wh:
        pdh = wh.put(src).pdh
        monkeypatch.setenv(HELD_ENTRIES_VAR, "5")
        newest = max(max(p.stat().st_mtime_ns, p.stat().st_ctime_ns) for p in src.rglob("*"))
        while time.time_ns() <= newest + RACY_NS:
            time.sleep(0.05)
        with PutCache("test", tmp_path / "cache") as cache:
            assert wh.put(src, cache=cache).pdh == pdh
            (src / "f05").write_bytes(b"changed")
            changed = wh.put(src, cache=cache)
        assert changed.cached is not None and changed.cached.files == 11
        # (Naming the blocks of the first put, its text is not a fresh put's.)
        wh.get(changed.pdh, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        p.name for p in src.iterdir()
    )
    for path in src.iterdir():
        assert (tmp_path / "out" / path.name).read_bytes() == path.read_bytes()


CachedTree = Callable[..., Path]


@pytest.fixture
def cached_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CachedTree:
    """Makes a flat directory of ``count`` files of about 40 KB (the resume
    cache looks at them), settled past the cache's racy window, spilled past
    50 files; the cache stats and looks up ``chunk`` files at a time and
    holds ``rows_held`` rows before its scratch file."""

    def make(
        count: int, sep: bytes, *, chunk: int, rows_held: int, last_empty: bool = False
    ) -> Path:
        src = tmp_path / "src"
        src.mkdir()
        for i in reversed(range(count)):
            (src / f"f{i:04d}").write_bytes((b"%d" % i + sep) * (40_000 // len(b"%d" % i + sep)))
        if last_empty:
            (src / "zz empty").write_bytes(b"")  # an empty file after the others
        newest = max(max(p.stat().st_mtime_ns, p.stat().st_ctime_ns) for p in src.iterdir())
        while time.time_ns() <= newest + RACY_NS:
            time.sleep(0.05)
        monkeypatch.setenv(HELD_ENTRIES_VAR, "50")
        monkeypatch.setattr(cache_session, "_CHUNK", chunk)
        monkeypatch.setattr(cache_session, "_ROWS_HELD", rows_held)
        return src

    return make


def test_an_interrupted_put_of_a_spilled_directory_of_cached_files_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached_tree: CachedTree
) -> None:
    """A spilled directory of files the resume cache is asked about (40 KB
    each): a put stopped after a few blocks learns nothing; run again, it
    reads every file, written in parts as without the cache (the cache
    stat'ing, looking up and learning the files a chunk at a time, its
    rows past a few in a scratch file), the same PDH and listing as the
    held directory; a third put reads none of them and stores the same."""
    count = 300
    src = cached_tree(count, b",", chunk=64, rows_held=100)
    with EmbeddedWarehouse(tmp_path / "held") as wh:
        monkeypatch.setenv(HELD_ENTRIES_VAR, "100000")
        held = wh.put(src)
        held_listing = listing_of(wh.engine, held.pdh, wh.user)
        held_text = wh.manifest_text(held.pdh)
    monkeypatch.setenv(HELD_ENTRIES_VAR, "50")
    home = tmp_path / "home"
    with EmbeddedWarehouse(home) as wh, PutCache("test", tmp_path / "cache") as cache:
        calls = 0

        def stop() -> None:
            nonlocal calls
            calls += 1
            if calls > 3:
                raise KeyboardInterrupt

        session = CacheSession(cache, wh.store)
        with Spool(tmp_path) as spool, pytest.raises(KeyboardInterrupt):
            write_tree(
                wh.store, LazyTree([src]), spool=spool, cache=session, check=stop, block_size=65536
            )
        assert calls == 4
        rerun = wh.put(src, cache=cache)
        assert rerun.cached is not None and rerun.cached.files == 0
        assert rerun.write.bytes_read == rerun.write.size
        assert rerun.pdh == held.pdh
        assert listing_of(wh.engine, rerun.pdh, wh.user) == held_listing
        assert wh.manifest_text(rerun.pdh) == held_text
        third = wh.put(src, cache=cache)
        assert third.cached is not None and third.cached.files == count
        assert third.write.bytes_read == 0
        assert third.pdh == held.pdh
        wh.get(third.pdh, tmp_path / "out")
    (learned,) = sqlite3.connect(cache.path).execute("SELECT count(*) FROM entries").fetchone()
    assert learned == count
    for path in src.iterdir():
        assert (tmp_path / "out" / path.name).read_bytes() == path.read_bytes()


def test_a_spilled_directory_of_many_blocks_learned_a_file_at_a_time(
    tmp_path: Path, cached_tree: CachedTree
) -> None:
    """Files straddling blocks (40 KB files in 64 KiB blocks): what the cache
    learns of a spilled directory a file at a time is each file's pieces as
    the manifest has them; the put again reads nothing and writes the same."""
    count = 120
    src = cached_tree(count, b";", chunk=16, rows_held=7, last_empty=True)
    texts = []
    with EmbeddedWarehouse(tmp_path / "home") as wh, PutCache("t", tmp_path / "cache") as cache:
        for _ in range(2):
            session = CacheSession(cache, wh.store)
            with Spool(tmp_path) as spool:
                done = write_tree(
                    wh.store, LazyTree([src]), spool=spool, cache=session, block_size=65536
                )
                texts.append((spool.pdh, spool.text(), spool.listing(), done.bytes_read))
            session.finish()
    (pdh, text, listing, read), again = texts
    assert read == sum(p.stat().st_size for p in src.iterdir())
    assert again == (pdh, text, listing, 0)
    entries = Manifest.parse(text).files()
    assert len(entries) == count + 1
    assert len({p.locator.key for e in entries.values() for p in e.pieces}) > 50
    rows = sqlite3.connect(cache.path).execute("SELECT name, md5, pieces FROM entries").fetchall()
    assert sorted(rows) == sorted(
        (
            name,
            json.loads(listing)[name],
            " ".join(f"{p.locator} {p.offset} {p.length}" for p in e.pieces),
        )
        for name, e in entries.items()
    )


def test_a_spilled_directory_the_cache_answers_for_is_written_in_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached_tree: CachedTree
) -> None:
    """Reruns of a put of a spilled directory of files the resume cache
    looks at (40 KB each, 64 KiB blocks): every file a hit, then some
    changed and one added (after such a put stopped midway, which learns
    nothing), the hits and the files read merged a file at a time: each
    time the text, PDH and listing of the same puts of the directory held
    whole, and every byte back."""
    count = 300
    src = cached_tree(count, b",", chunk=64, rows_held=100)
    stores = {"100000": tmp_path / "held", "50": tmp_path / "spilled"}

    def put(held: str, stop_after: int = 0) -> tuple[str, bytes, str, int, int]:
        monkeypatch.setenv(HELD_ENTRIES_VAR, held)
        calls = 0

        def check() -> None:
            nonlocal calls
            calls += 1
            if stop_after and calls > stop_after:
                raise KeyboardInterrupt

        with (
            EmbeddedWarehouse(stores[held]) as wh,
            PutCache("t", stores[held] / "cache") as cache,
            Spool(tmp_path) as spool,
        ):
            session = CacheSession(cache, wh.store)
            done = write_tree(
                wh.store, LazyTree([src]), spool=spool, cache=session, check=check, block_size=65536
            )
            stats = session.finish()
            text = spool.text()
            for path, entry in Manifest.parse(text).files().items():
                data = b"".join(
                    bytes(wh.store.get(p.locator))[p.offset : p.offset + p.length]
                    for p in entry.pieces
                )
                assert data == (src / path).read_bytes(), path
            return spool.pdh, text, spool.listing(), done.bytes_read, stats.files

    total = sum(p.stat().st_size for p in src.iterdir())
    first = {held: put(held) for held in stores}
    assert first["50"] == first["100000"]
    assert first["50"][3:] == (total, 0)
    # Every file a hit: the text of a fresh put.
    again = {held: put(held) for held in stores}
    assert again["50"] == again["100000"] == (*first["50"][:3], 0, count)
    # Two files changed and one added: read, the others hits.
    for name in ("f0010", "f0150"):
        (src / name).write_bytes(b"changed " + (src / name).read_bytes())
    (src / "f0150a").write_bytes(b"new\n" * 20_000)
    with pytest.raises(KeyboardInterrupt):
        put("50", stop_after=1)
    changed = {held: put(held) for held in stores}
    assert changed["50"] == changed["100000"]
    pdh, text, listing, read, hits = changed["50"]
    assert (read, hits) == (
        sum((src / n).stat().st_size for n in ("f0010", "f0150", "f0150a")),
        count - 2,
    )
    assert len(json.loads(listing)) == count + 1
    assert pdh != first["50"][0]
    (line,) = text.decode().splitlines()
    blocks = [w for w in line.split(" ")[1:] if ":" not in w]
    assert len(blocks) == len(set(blocks)) > 2
    # Learned, once settled: the files read too, so a put again reads nothing.
    newest = max(max(p.stat().st_mtime_ns, p.stat().st_ctime_ns) for p in src.iterdir())
    while time.time_ns() <= newest + RACY_NS:
        time.sleep(0.05)
    assert put("50")[3:] == (read, count - 2)
    assert put("50") == (pdh, text, listing, 0, count + 1)
    # Kept in memory (no spool), the hits held whole: the same text.
    with EmbeddedWarehouse(stores["50"]) as wh, PutCache("t", stores["50"] / "cache") as cache:
        session = CacheSession(cache, wh.store)
        kept = write_tree(wh.store, LazyTree([src]), cache=session, block_size=65536)
        assert (kept.bytes_read, session.finish().files) == (0, count + 1)
    assert kept.manifest.portable_text().encode() == text


# What a rerun of a put of a spilled directory, every file a hit, may grow
# by from 6,000 files to 12,000 (traced; the cache's chunks and the scan's
# runs as many each time): 0.35 MB here; its hits held whole, 5.7 MB (0.94 KB
# a file).
ALL_HITS_GROWTH = 2 << 20


@pytest.mark.slow
def test_a_rerun_of_a_spilled_directory_all_hits_holds_none_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_session, "MIN_CACHED", 1)  # the cache looks at tiny files too
    monkeypatch.setattr(cache_session, "_CHUNK", 500)
    monkeypatch.setattr(cache_session, "_ROWS_HELD", 500)
    sources = {}
    for count in (6_000, 12_000):
        src = sources[count] = tmp_path / f"src{count}"
        src.mkdir()
        for i in range(count):
            (src / f"f{i:06d}").write_bytes(b"%d\n" % i)
    newest = max(p.stat().st_ctime_ns for s in sources.values() for p in s.iterdir())
    while time.time_ns() <= newest + RACY_NS:
        time.sleep(0.05)
    peaks = {}
    with EmbeddedWarehouse(tmp_path / "home") as wh, PutCache("t", tmp_path / "cache") as cache:
        for count, src in sources.items():
            monkeypatch.setenv(HELD_ENTRIES_VAR, str(count // 8))
            pdhs = []
            for rerun in (False, True):
                session = CacheSession(cache, wh.store)
                with Spool(tmp_path) as spool:
                    if rerun:
                        tracemalloc.start()
                    try:
                        done = write_tree(wh.store, LazyTree([src]), spool=spool, cache=session)
                        if rerun:
                            peaks[count] = tracemalloc.get_traced_memory()[1]
                    finally:
                        tracemalloc.stop()
                    pdhs.append(spool.pdh)
                stats = session.finish()
            assert (done.bytes_read, stats.files) == (0, count)
            assert pdhs[0] == pdhs[1]
    assert peaks[12_000] - peaks[6_000] < ALL_HITS_GROWTH, peaks


# A put of one flat directory of 200,000 tiny files peaks within a few MB of
# one of 20,000 (66.8-71.3 and 63.8 MB here, a million 86 MB: the manifest
# text stored as one block; the directory's MD5s, once a table of 16 B a
# file, are in a scratch file).
# Holding the directory's files, segments and block file list whole it peaked
# at 150.6 MB (and 540 MB for a million), about 0.45 KB a file.
FLAT_GROWTH = 16 << 20
FLAT_LIMIT_AS = 560 << 20


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_put_of_a_flat_directory_of_200k_files_peaks_near_one_of_20k(ram_dir: Path) -> None:
    peaks = {}
    for count in (20_000, 200_000):
        src = ram_dir / f"flat{count}"
        src.mkdir()
        for i in range(count):
            j = i * 7919 % count
            (src / f"f{j:06d}").write_bytes(b"" if j % 5 == 0 else b"%x\n" % j)
        env = {**os.environ, "WH_HOME": str(ram_dir / "wh"), "MALLOC_ARENA_MAX": "2"}
        env.pop("WH_URL", None)
        env.pop(HELD_ENTRIES_VAR, None)  # the default: 200,000 files are past it
        peak = ram_dir / "peak"
        done = subprocess.run(
            limited(FLAT_LIMIT_AS, peak, "put", "--no-progress", str(src)),
            env=env,
            capture_output=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        peaks[count] = int(peak.read_text())
        pdh = done.stdout.decode().strip()
        with EmbeddedWarehouse(ram_dir / "wh") as wh:
            listing = listing_of(wh.engine, pdh, wh.user)
            assert listing is not None
            listed = json.loads(listing)
        assert len(listed) == count
        assert listed[f"f{count - 1:06d}"] == hashlib.md5(b"%x\n" % (count - 1)).hexdigest()
        shutil.rmtree(src)
    assert peaks[200_000] - peaks[20_000] < FLAT_GROWTH, (
        f"a put of a directory of 200,000 files peaked at {peaks[200_000] >> 20} MB, "
        f"one of 20,000 at {peaks[20_000] >> 20} MB"
    )


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1.5"])
def test_a_bad_held_entries_setting_is_one_error_line(tmp_path: Path, value: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_bytes(b"f")
    done = wh_process(
        "put", "--no-progress", str(src), home=tmp_path / "wh", env={HELD_ENTRIES_VAR: value}
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"Error: {HELD_ENTRIES_VAR}: {value!r} is not a whole number from 1"
    ]
