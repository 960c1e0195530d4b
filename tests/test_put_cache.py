"""`wh put`'s resume cache: an unchanged file is not read again (docs/cli.md).

A file is unchanged for the cache when its path, size, mtime, ctime and inode
are as they were when it was stored; what the put read is seen in its
``bytes_read``. The files of a directory whose files average less than
``MIN_CACHED`` bytes are always read. A change the cache must see even with
the size and mtime kept (a file rewritten in place with its mtime set back, a
file replaced by another, a chmod) is made and the put checked to read that
file and store its new bytes.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from installations import Installation
from warehouse.cli import cli
from warehouse.collection.scratch import HELD_ENTRIES_VAR
from warehouse.manifest import Manifest
from warehouse.putcache import MIN_CACHED, RACY_NS, PutCache
from warehouse.putcache import session as cache_session

# The root's files average over MIN_CACHED bytes: all cached, the small one
# too. Those of d and d/e average less: read every time.
ORIGINAL = {
    "big.bin": os.urandom(3 << 20),
    "a.txt": b"alpha\n" * (MIN_CACHED // 6 + 1),
    "b.txt": os.urandom(MIN_CACHED),
    "tiny.txt": b"tiny\n",
    "d/c.txt": os.urandom(MIN_CACHED + 7),
    "d/small.txt": b"charlie\n",
    "d/e/empty": b"",
}
CACHED = ["big.bin", "a.txt", "b.txt", "tiny.txt"]
ALWAYS_READ = sum(len(data) for rel, data in ORIGINAL.items() if rel not in CACHED)


def wh(tmp_path: Path, *args: str, home: Path | None = None) -> tuple[int, str, str]:
    """``wh`` on the test's installation, or on the embedded one in ``home``."""
    env: dict[str, str | None] = {}
    if home is not None:
        env = {k: None for k in os.environ if k.startswith("WH_")} | {"WH_HOME": str(home)}
    done = CliRunner().invoke(cli, list(args), env=env)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    return done.exit_code, done.stdout, done.stderr


def put(tmp_path: Path, *args: str) -> dict[str, object]:
    code, out, err = wh(tmp_path, "put", "--json", *args)
    assert code == 0, err
    result: dict[str, object] = json.loads(out)
    return result


def settle(root: Path) -> None:
    """Wait until every file under ``root`` changed over RACY_NS ago: until
    then a put reads it but does not remember it."""
    newest = max(max(p.stat().st_mtime_ns, p.stat().st_ctime_ns) for p in root.rglob("*"))
    while time.time_ns() <= newest + RACY_NS:
        time.sleep(0.05)


def make_tree(root: Path) -> Path:
    for rel, data in ORIGINAL.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    settle(root)
    return root


def tamper(path: Path) -> None:
    """Other bytes, same size, same inode, mtime set back: unseen without a read."""
    st = path.stat()
    with path.open("r+b") as f:
        f.write(bytes(b ^ 0xFF for b in path.read_bytes()))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_ino == st.st_ino


def stored(tmp_path: Path, pdh: str, where: str) -> dict[str, bytes]:
    code, _, err = wh(tmp_path, "get", pdh, str(tmp_path / where))
    assert code == 0, err
    out = tmp_path / where
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}


def test_unchanged_files_are_not_read_again_and_a_changed_one_is(
    installation: Installation, tmp_path: Path
) -> None:
    src = make_tree(tmp_path / "src")
    first = put(tmp_path, str(src))
    assert first["cached_files"] == 0 and first["bytes_read"] == first["bytes"]

    again = put(tmp_path, str(src))
    assert again["pdh"] == first["pdh"]
    assert again["cached_files"] == len(CACHED)
    assert again["cached_bytes"] == sum(len(ORIGINAL[rel]) for rel in CACHED)
    assert again["bytes_read"] == ALWAYS_READ  # only the files of d
    assert again["bytes"] == first["bytes"] and again["blocks_new"] == 0
    uncached = put(tmp_path, "--no-cache", str(src))
    assert uncached["pdh"] == first["pdh"] and uncached["cached_files"] is None
    assert uncached["bytes_read"] == first["bytes"]

    # Rewritten in place, same size, mtime set back: its ctime moved.
    tamper(src / "a.txt")
    settle(src)
    rewritten = put(tmp_path, str(src))
    assert rewritten["cached_files"] == len(CACHED) - 1
    assert rewritten["bytes_read"] == ALWAYS_READ + len(ORIGINAL["a.txt"])
    assert rewritten["pdh"] != first["pdh"]
    expected = ORIGINAL | {"a.txt": (src / "a.txt").read_bytes()}
    assert expected["a.txt"] != ORIGINAL["a.txt"]
    assert stored(tmp_path, str(rewritten["pdh"]), "out1") == expected

    # Replaced by another file of the same size and mtime: another inode.
    st = (src / "b.txt").stat()
    other = os.urandom(len(ORIGINAL["b.txt"]))
    (src / "b.new").write_bytes(other)
    os.utime(src / "b.new", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(src / "b.new", src / "b.txt")
    settle(src)
    replaced = put(tmp_path, str(src))
    assert replaced["cached_files"] == len(CACHED) - 1
    assert replaced["bytes_read"] == ALWAYS_READ + len(other)
    expected["b.txt"] = other
    assert stored(tmp_path, str(replaced["pdh"]), "out2") == expected

    # Grown, and (apart) only its mode changed: both read again.
    with (src / "tiny.txt").open("ab") as f:
        f.write(b"more")
    os.chmod(src / "big.bin", 0o600)
    settle(src)  # else the next put would not remember them
    changed = put(tmp_path, str(src))
    assert changed["cached_files"] == len(CACHED) - 2
    grown = len(ORIGINAL["tiny.txt"]) + 4
    assert changed["bytes_read"] == ALWAYS_READ + grown + len(ORIGINAL["big.bin"])
    expected["tiny.txt"] = ORIGINAL["tiny.txt"] + b"more"
    assert stored(tmp_path, str(changed["pdh"]), "out3") == expected
    # What was learnt is kept: the same tree again reads only the files of d.
    last = put(tmp_path, str(src))
    assert last["pdh"] == changed["pdh"] and last["bytes_read"] == ALWAYS_READ
    assert last["cached_files"] == len(CACHED)

    cache_dir = tmp_path / "xdg-cache" / "warehouse"
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
    files = list(cache_dir.glob("put-*.sqlite"))
    assert len(files) == 1 and stat.S_IMODE(files[0].stat().st_mode) == 0o600


def test_an_entry_whose_block_is_gone_is_read_again(
    installation: Installation, tmp_path: Path
) -> None:
    src = make_tree(tmp_path / "src")
    first = put(tmp_path, str(src))
    code, text, err = wh(tmp_path, "manifest", str(first["pdh"]))
    assert code == 0, err
    blocks = [loc.md5 for loc in Manifest.parse(text).blocks()]
    assert len(blocks) == first["blocks"] == 2
    for md5 in blocks:
        copies = installation.copies(md5)
        assert copies
        for copy in copies:
            copy.unlink()
    again = put(tmp_path, str(src))
    assert again["pdh"] == first["pdh"] and again["cached_files"] == 0
    assert again["bytes_read"] == again["bytes"]
    assert again["blocks_new"] == len(blocks)  # stored again
    assert stored(tmp_path, str(again["pdh"]), "out") == ORIGINAL


def test_the_cache_is_per_store(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src")
    code, out, err = wh(tmp_path, "put", "--json", str(src), home=tmp_path / "one")
    assert code == 0 and json.loads(out)["cached_files"] == 0, err
    code, out, err = wh(tmp_path, "put", "--json", str(src), home=tmp_path / "one")
    assert code == 0 and json.loads(out)["cached_files"] == len(CACHED), err
    code, out, err = wh(tmp_path, "put", "--json", str(src), home=tmp_path / "two")
    assert code == 0, err
    assert json.loads(out)["cached_files"] == 0  # another home: its own cache


def test_a_save_that_fails_leaves_the_cache_as_it_was(tmp_path: Path) -> None:
    def rows(n: int, fail: bool = False):  # type: ignore[no-untyped-def]
        for i in range(n):
            if fail and i == n // 2:
                raise OSError("the put failed midway")
            yield "/d", f"f{i}", MIN_CACHED, i, i, i, "0" * 32, ""

    with PutCache("home:/x", tmp_path) as cache:
        cache.save(rows(10), ())
        with pytest.raises(OSError, match="midway"):
            cache.save(rows(20, fail=True), ())
        assert set(cache.lookup("/d", [f"f{i}" for i in range(20)])) == {f"f{i}" for i in range(10)}


def test_a_cache_of_the_first_layout_is_replaced(
    installation: Installation, tmp_path: Path
) -> None:
    src = make_tree(tmp_path / "src")
    assert put(tmp_path, str(src))["cached_files"] == 0
    (path,) = (tmp_path / "xdg-cache" / "warehouse").glob("put-*.sqlite")
    db = sqlite3.connect(path)
    db.execute("DROP TABLE entries")
    db.execute(
        "CREATE TABLE files (path TEXT PRIMARY KEY, size INTEGER NOT NULL, "
        "mtime_ns INTEGER NOT NULL, inode INTEGER NOT NULL, md5 TEXT NOT NULL, "
        "pieces TEXT NOT NULL, used INTEGER NOT NULL)"
    )
    db.execute("PRAGMA user_version = 0")
    db.commit()
    db.close()
    assert put(tmp_path, str(src))["cached_files"] == 0  # the old one dropped
    assert put(tmp_path, str(src))["cached_files"] == len(CACHED)


@pytest.mark.parametrize("held", ["100000", "3"])
def test_a_cache_row_with_a_piece_outside_its_block_is_a_miss(
    installation: Installation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: str
) -> None:
    """A damaged row (a piece past its block's end) is not taken: the file is
    read again and its bytes stored, whether its directory is held or
    written in parts (which lays hits out without normalizing's check)."""
    monkeypatch.setenv(HELD_ENTRIES_VAR, held)
    src = make_tree(tmp_path / "src")
    first = put(tmp_path, str(src))
    (path,) = (tmp_path / "xdg-cache" / "warehouse").glob("put-*.sqlite")
    db = sqlite3.connect(path)
    (pieces,) = db.execute("SELECT pieces FROM entries WHERE name = 'b.txt'").fetchone()
    loc, _, length = pieces.split()
    size = int(loc.split("+")[1])
    damaged = f"{loc} {size - 10} {length}"  # runs past the block's end
    db.execute("UPDATE entries SET pieces = ? WHERE name = 'b.txt'", (damaged,))
    db.commit()
    db.close()
    again = put(tmp_path, str(src))
    assert stored(tmp_path, str(again["pdh"]), "out") == ORIGINAL
    assert again["bytes"] == first["bytes"]
    assert again["cached_files"] == len(CACHED) - 1  # b.txt read again
    assert again["bytes_read"] == ALWAYS_READ + len(ORIGINAL["b.txt"])


def test_the_least_recently_used_entries_go_first(tmp_path: Path) -> None:
    with PutCache("home:/x", tmp_path, max_entries=3) as cache:
        for i in range(3):
            cache.save([("/d", f"f{i}", MIN_CACHED, i, i, i, "0" * 32, "")], ())
        cache.save([], [("/d", "f0")])  # f0 used again: f1 is now the oldest
        cache.save([("/d", "f3", MIN_CACHED, 3, 3, 3, "0" * 32, "")], ())
        assert set(cache.lookup("/d", ["f0", "f1", "f2", "f3"])) == {"f0", "f2", "f3"}


def test_a_file_changed_just_before_a_put_is_not_remembered(
    installation: Installation, tmp_path: Path
) -> None:
    """Times are kept to a clock tick: a file rewritten with its size in the
    tick it was read in keeps its times (ctime too), and a later put would
    take its old bytes for the new. So a file whose times are that recent
    (here set ahead: a test cannot write within a tick) is read and not
    remembered: the next put reads it again."""
    src = make_tree(tmp_path / "src")
    ahead = time.time_ns() + 3600 * 10**9
    os.utime(src / "a.txt", ns=(ahead, ahead))
    first = put(tmp_path, str(src))
    assert first["cached_files"] == 0
    again = put(tmp_path, str(src))
    assert again["cached_files"] == len(CACHED) - 1
    assert again["bytes_read"] == ALWAYS_READ + len(ORIGINAL["a.txt"])
    assert stored(tmp_path, str(again["pdh"]), "out") == ORIGINAL


@pytest.mark.parametrize("where", ["header", "pages"])
def test_a_corrupt_cache_is_started_again(
    installation: Installation, tmp_path: Path, where: str
) -> None:
    """A damaged cache file once failed every later put with a traceback (its
    pages) or left every put without a cache (its header): it is replaced."""
    src = make_tree(tmp_path / "src")
    first = put(tmp_path, str(src))
    (path,) = (tmp_path / "xdg-cache" / "warehouse").glob("put-*.sqlite")
    size = path.stat().st_size
    with path.open("r+b") as f:
        if where == "header":
            f.write(b"\xff" * 100)
        else:  # every page but the first (the schema's)
            f.seek(4096)
            f.write(os.urandom(size - 4096))
    again = put(tmp_path, str(src))
    assert again["pdh"] == first["pdh"] and again["cached_files"] == 0
    assert put(tmp_path, str(src))["cached_files"] == len(CACHED)  # learnt anew


def test_a_directory_of_more_files_than_a_put_holds_is_cached_too(
    installation: Installation, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory past WH_PUT_HELD_ENTRIES (lowered here) of files the cache
    looks at: the first put learns them a file at a time, in parts, and the
    next reads none of them and stores the same collection."""
    src = tmp_path / "src"
    src.mkdir()
    files = {f"f{i:03d}": os.urandom(MIN_CACHED + i) for i in range(60)}
    for name, data in reversed(files.items()):
        (src / name).write_bytes(data)
    settle(src)
    monkeypatch.setenv(HELD_ENTRIES_VAR, "20")
    monkeypatch.setattr(cache_session, "_CHUNK", 16)
    monkeypatch.setattr(cache_session, "_ROWS_HELD", 7)
    first = put(tmp_path, str(src))
    assert first["cached_files"] == 0 and first["bytes_read"] == first["bytes"]
    again = put(tmp_path, str(src))
    assert again["pdh"] == first["pdh"]
    assert again["cached_files"] == len(files) and again["bytes_read"] == 0
    assert stored(tmp_path, str(again["pdh"]), "out") == files
    uncached = put(tmp_path, "--no-cache", str(src))
    assert uncached["pdh"] == first["pdh"]
