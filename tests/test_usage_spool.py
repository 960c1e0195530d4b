"""The usage spool (docs/usage.md, "The spool"), with real `wh` processes:
a read leaves its volume counts as a record without opening the catalog
for writing; records are folded into `volume_usage` exactly once, however
many folds race and when one is killed between its commit and removing
the records."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

from conftest import WH_BIN, wh_process


def _put(home: Path, tmp_path: Path) -> str:
    data = tmp_path / "data"
    data.mkdir()
    (data / "f.txt").write_bytes(os.urandom(5000))
    done = wh_process("put", str(data), "--name", "x", home=home)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _usage(home: Path) -> dict[str, Any]:
    done = wh_process("usage", "--volumes", "--json", home=home, timeout=120)
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)["volumes"]
    return dict(row)


def _records(home: Path) -> list[Path]:
    return sorted((home / "usage-spool").glob("*.rec"))


def _cat(home: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [WH_BIN, "cat", "x/f.txt"],
        env={**os.environ, "WH_HOME": str(home)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_concurrent_readers_counts_land_exactly_once(home: Path, tmp_path: Path) -> None:
    _put(home, tmp_path)
    before = _usage(home)
    assert _records(home) == []  # the usage read folded everything
    one = _cat(home)
    assert one.wait(timeout=120) == 0
    assert len(_records(home)) == 1
    per_cat = _usage(home)["gets"] - before["gets"]
    assert per_cat >= 1  # the manifest and the file's block are read

    n = 8
    readers = [_cat(home) for _ in range(n)]
    assert [p.wait(timeout=300) for p in readers] == [0] * n
    assert len(_records(home)) == n
    # Two folds at once (two usage reads), then a third: every record once.
    folds = [
        subprocess.Popen(
            [WH_BIN, "usage", "--volumes", "--json"],
            env={**os.environ, "WH_HOME": str(home)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    assert [p.wait(timeout=300) for p in folds] == [0, 0]
    after = _usage(home)
    assert after["gets"] == before["gets"] + (n + 1) * per_cat
    assert after["puts"] == before["puts"]
    assert after["stored_bytes"] == before["stored_bytes"]
    assert _records(home) == []


def test_a_fold_killed_after_its_commit_does_not_count_twice(home: Path, tmp_path: Path) -> None:
    _put(home, tmp_path)
    before = _usage(home)
    for _ in range(3):
        assert _cat(home).wait(timeout=120) == 0
    assert len(_records(home)) == 3
    killed = wh_process(
        "usage", "--volumes", home=home, env={"WH_FAULT_POINT": "volume-usage-folded"}, timeout=120
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # Committed, not yet removed: the rows are in, the records still there.
    with sqlite3.connect(home / "warehouse.db") as db:
        folded = db.execute("SELECT count(*) FROM volume_usage WHERE record IS NOT NULL").fetchone()
    assert folded[0] >= 3
    assert len(_records(home)) == 3
    once = _usage(home)
    assert _records(home) == []
    after_one = _cat(home)
    assert after_one.wait(timeout=120) == 0
    per_cat = _usage(home)["gets"] - once["gets"]
    assert once["gets"] == before["gets"] + 3 * per_cat


def test_a_read_does_not_wait_for_the_catalogs_writer(home: Path, tmp_path: Path) -> None:
    _put(home, tmp_path)
    _usage(home)  # the volume sampled, nothing spooled
    # Another process holds the catalog's write lock for the whole read: a
    # read that wrote its usage row at exit would wait for it (60 s).
    holder = sqlite3.connect(home / "warehouse.db", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        rows = holder.execute("SELECT count(*) FROM volume_usage").fetchone()[0]
        reader = _cat(home)
        try:
            code = reader.wait(timeout=40)
        except subprocess.TimeoutExpired:
            reader.kill()
            reader.wait()
            raise AssertionError("wh cat waited for the catalog's write lock") from None
        assert code == 0
        assert holder.execute("SELECT count(*) FROM volume_usage").fetchone()[0] == rows
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    assert len(_records(home)) == 1
    assert _usage(home)["gets"] >= 1
    assert _records(home) == []


def test_a_record_the_catalog_cannot_hold_does_not_stop_every_fold(
    home: Path, tmp_path: Path
) -> None:
    _put(home, tmp_path)
    before = _usage(home)
    # Records that parse as JSON but whose values no catalog row can hold (a
    # count past a 64-bit integer, a time that is not finite, a volume name
    # past its column): left alone, never folded, and the others still are.
    spool = home / "usage-spool"
    bad = {"gets": 2**64, "at": float("nan"), "volume": "v" * 2000}
    for field, value in bad.items():
        record = os.urandom(16).hex()
        line = {
            "record": record,
            "volume": "v",
            "at": 1.0,
            "gets": 1,
            "puts": 0,
            "lists": 0,
            "deletes": 0,
            "added_bytes": 0,
        }
        line[field] = value
        (spool / f"{record}.rec").write_text(json.dumps(line) + "\n")
    assert _cat(home).wait(timeout=120) == 0
    assert len(_records(home)) == 4
    after = _usage(home)
    assert after["gets"] > before["gets"]  # the cat's record was folded
    assert len(_records(home)) == 3  # the bad ones left alone


def test_a_record_of_a_long_volume_name_in_other_letters_is_folded(
    home: Path, tmp_path: Path
) -> None:
    # 1,024 characters, each written as \uXXXX in the record's JSON line.
    from warehouse.blocks.volumecounts import Taken
    from warehouse.catalog.volumespool import read_spool, spool_taken

    volume = "\u00e9" * 1024
    home.mkdir(parents=True, exist_ok=True)
    record = spool_taken(home, volume, Taken(1, 0, 0, 0, 0))
    assert [(r.record, r.volume) for r in read_spool(home)] == [(record, volume)]
