"""A tree of many small directories has a block per directory: past a few
thousand (``WH_PUT_HELD_ENTRIES``, lowered here) the put keeps the blocks it
wrote in a scratch file, not in memory, and records the same accounting
rows, in the same order, as when it holds them all.
"""

from __future__ import annotations

import json
import sqlite3
import tracemalloc
from pathlib import Path

import pytest

from conftest import wh_process
from warehouse.blocks.locator import Locator
from warehouse.blocks.store import StoredBlock
from warehouse.collection.records import listing_of
from warehouse.collection.scratch import HELD_ENTRIES_VAR
from warehouse.embedded import EmbeddedWarehouse


def _make(root: Path, dirs: int) -> Path:
    """``dirs`` directories of one tiny file each, one of two, one empty."""
    for i in range(dirs):
        d = root / f"g{i // 100:03d}" / f"d{i:05d}"
        d.mkdir(parents=True)
        (d / "f").write_bytes(b"file %d\n" % i)
    (root / "g000" / "d00001" / "two").write_bytes(b"two\n")
    (root / "empty").mkdir()
    return root


def _writes(home: Path) -> list[tuple[str, int, int]]:
    with sqlite3.connect(home / "warehouse.db") as db:
        return db.execute("SELECT md5, size, new FROM block_writes ORDER BY rowid").fetchall()


def _put_twice(home: Path, src: Path) -> tuple[str, bytes, str, list[tuple[int, int, int]]]:
    """A put, and again (every block found stored): PDH, text, listing, and
    the blocks, new blocks and new bytes each said."""
    said = []
    with EmbeddedWarehouse(home) as wh:
        for _ in range(2):
            w = wh.put(src).write
            said.append((len(w.blocks), w.blocks_new, w.bytes_new))
        pdh = w.pdh
        listing = listing_of(wh.engine, pdh, wh.user)
        assert listing is not None
        return pdh, wh.manifest_text(pdh), listing, said


def test_many_directories_past_the_threshold_are_stored_and_counted_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _make(tmp_path / "src", 700)
    held = _put_twice(tmp_path / "held", src)
    monkeypatch.setenv(HELD_ENTRIES_VAR, "50")
    spilled = _put_twice(tmp_path / "spilled", src)
    assert spilled == held
    _, _, listing, said = spilled
    assert len(json.loads(listing)) == 701
    # 700 blocks, new the first time, found stored the second.
    assert said[0][:2] == (700, 700) and said[1] == (700, 0, 0)
    rows = _writes(tmp_path / "spilled")
    assert rows == _writes(tmp_path / "held")
    assert len(rows) == 1400 and sum(new for _, _, new in rows) == 700
    # The accounting totals, as `wh accounting` gives them.
    done = wh_process("accounting", "--json", env={"WH_HOME": str(tmp_path / "spilled")})
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert (row["writes"], row["new_blocks"], row["bytes_new"]) == (1400, 700, said[0][2])


def test_a_block_log_reads_back_what_it_was_given(tmp_path: Path) -> None:
    from warehouse.collection.scratch import BlockLog

    blocks = [
        StoredBlock(Locator(f"{i:032x}", i * 1000, ("A" + "ab" * 20 + "@12345678",)), i % 3 == 0)
        for i in range(1, 30_000)
    ]
    log = BlockLog(tmp_path, held=1000)
    for b in blocks:
        log.append(b)
    assert len(log) == len(blocks)
    assert log.blocks_new == sum(b.new for b in blocks)
    assert log.bytes_new == sum(b.locator.size for b in blocks if b.new)
    rows = log.rows()
    expected = [(b.locator.md5, b.locator.size, b.new) for b in blocks]
    assert list(rows) == expected and list(rows) == expected  # read again alike
    back = list(log)
    assert back[:1000] == blocks[:1000]  # held ones keep their hints
    assert [(b.locator.without_hints(), b.new) for b in back] == [
        (b.locator.without_hints(), b.new) for b in blocks
    ]
    log.close()


# A put of 15,000 one-file directories against one of 3,000, traced: 2.8 to
# 4.9 MB more here, of which 1.9 or 3.8 MB is a regrowth of the interpreter's
# table of interned strings (block paths are named as they are stored; the
# table is one allocation, whatever the count), which may fall in either put.
# Holding every block, every pending fsync and every accounting row it grew
# by 28.5 MB.
MANY_DIRS_GROWTH = 6 << 20


@pytest.mark.slow
@pytest.mark.timeout(600)  # traced: 36 s at load 5, over 120 s at load 15-20
def test_a_put_of_many_directories_holds_no_block_list(
    ram_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(HELD_ENTRIES_VAR, "100")
    peaks = {}
    with EmbeddedWarehouse(ram_dir / "home") as wh:
        for count in (3_000, 15_000):
            src = _make(ram_dir / f"src{count}", count)
            tracemalloc.start()
            try:
                result = wh.put(src)
                peaks[count] = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert len(result.write.blocks) == count
    assert peaks[15_000] - peaks[3_000] < MANY_DIRS_GROWTH, peaks


def test_the_block_keys_a_cached_put_remembers_are_the_last_ones() -> None:
    """A put with the resume cache remembers the keys of the blocks it saw
    lately (a block the cache names again among them is counted once), not
    every block of a tree of millions of directories."""
    from warehouse.collection.emitting import SeenKeys

    seen = SeenKeys(3)
    for key in ("a", "b", "c", "a", "d", "e"):
        seen.add(key)
    assert [k for k in "abcde" if k in seen] == ["a", "d", "e"]  # "a" seen again: kept
