"""`wh put` against files that change while read, and names that conflict:
checked before reading where possible, the stored PDH shown where not."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

import warehouse
from conftest import WH_BIN, Runner, wh_process
from installations import Installation
from warehouse.base import NameConflictAfterPut
from warehouse.collection.writer import FileChangedError
from warehouse.errors import NotFoundError


def src_dir(root: Path, data: bytes) -> Path:
    root.mkdir(parents=True)
    (root / "f").write_bytes(data)
    return root


# --- names -------------------------------------------------------------------


def test_put_name_conflict_is_found_before_reading(
    installation: Installation, tmp_path: Path
) -> None:
    run = Runner()
    first = src_dir(tmp_path / "a", os.urandom(200_000))
    pdh = json.loads(run("put", str(first), "--name", "n", "--json").output)["pdh"]
    # The same data again under the same name: nothing changes.
    assert json.loads(run("put", str(first), "--name", "n", "--json").output)["name_version"] == 1
    other = src_dir(tmp_path / "b", os.urandom(300_000))
    before = installation.stored_blocks()
    for extra in ([], ["--create"], ["--expect", "d41d8cd98f00b204e9800998ecf8427e+0"]):
        out = run("put", str(other), "--name", "n", *extra, code=3)
        assert "Error: name 'n' holds " + pdh in out.stderr
        if extra == ["--create"]:  # not "holds X, not nothing"
            assert f"holds {pdh} already, so it cannot be created" in out.stderr
        assert out.stdout == ""
    # Nothing was read, so nothing was stored.
    assert installation.stored_blocks() == before
    # --replace moves it from what it holds; --expect with the right PDH too.
    out = json.loads(run("put", str(other), "--name", "n", "--replace", "--json").output)
    assert out["name_version"] == 2
    assert run("name", "get", "n").output.strip() == out["pdh"]
    back = json.loads(
        run("put", str(first), "--name", "n", "--expect", out["pdh"], "--json").output
    )
    assert back["pdh"] == pdh and back["name_version"] == 3
    # --replace of a name that does not exist creates it.
    assert (
        json.loads(run("put", str(first), "--name", "m", "--replace", "--json").output)[
            "name_version"
        ]
        == 1
    )
    run("put", str(first), "--name", "n", "--replace", "--create", code=2)
    run("put", str(first), "--replace", code=2)


def test_a_name_moved_during_the_put_still_gives_the_stored_pdh(home: Path, tmp_path: Path) -> None:
    a = src_dir(tmp_path / "a", b"a" * 1000)
    b = src_dir(tmp_path / "b", os.urandom(3_000_000))
    with warehouse.open() as wh:
        held = wh.put([a], name="n").pdh
        other = wh.put([src_dir(tmp_path / "c", b"c")]).pdh
        moved = []

        def mover(_: int) -> None:  # another writer moves the name mid-put
            if not moved:
                moved.append(wh.set_name("n", other, expect=held))

        with pytest.raises(NameConflictAfterPut) as e:
            wh.put([b], name="n", replace=True, progress=mover)
        assert f"holds {other}" in str(e.value) and e.value.pdh in str(e.value)
        # Stored and recorded, so the user can name it by its PDH.
        assert wh.get_name("n").pdh == other
        assert wh.reader(e.value.pdh).read_file("f") == (b / "f").read_bytes()


@pytest.mark.slow
def test_cli_conflict_after_the_write_prints_the_stored_pdh(home: Path, tmp_path: Path) -> None:
    """A real concurrent writer moves the name while `wh put --replace` runs."""
    run = Runner()
    held = run("put", str(src_dir(tmp_path / "a", b"a")), "--name", "n").output.strip()
    other = run("put", str(src_dir(tmp_path / "c", b"c"))).output.strip()
    big = tmp_path / "big"
    big.mkdir()
    with open(big / "zeros", "wb") as f:  # read and hashed, stored as one block
        f.truncate(256 << 20)
    for as_json in (False, True):
        run("name", "set", "n", held, "--expect", run("name", "get", "n").output.strip())
        # --no-cache: the second put reads the file again (the race is in the read).
        args = [WH_BIN, "put", "--no-cache", str(big), "--name", "n", "--replace"] + (
            ["--json"] if as_json else []
        )
        with subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        ) as proc:
            # The put checked the name before it opened the file to read it.
            deadline = time.monotonic() + 60
            while not reading(proc.pid, big / "zeros") and proc.poll() is None:
                assert time.monotonic() < deadline
                time.sleep(0.001)
            run("name", "set", "n", other, "--expect", held)
            out, err = proc.communicate(timeout=60)
        assert proc.returncode == 3, (out, err)
        assert "Error: name 'n' holds " + other in err
        stored = json.loads(out)["pdh"] if as_json else out.strip()
        assert f"the data is stored as {stored}" in err
        if as_json:
            assert json.loads(out)["name"] is None and json.loads(out)["conflict"]
        assert run("name", "get", "n").output.strip() == other
        run("ls", stored)


def reading(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                return True
        except OSError:
            continue
    return False


# --- files changing while read ---------------------------------------------


BIG = 70 << 20  # over one 64 MiB read: the change lands between two reads


@pytest.mark.slow
@pytest.mark.parametrize("change", ["truncate", "grow", "rewrite"])
def test_a_file_changed_while_read_fails_the_put(home: Path, tmp_path: Path, change: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a-steady").write_bytes(b"s" * 1000)
    victim = src / "victim"
    seen = [0]

    def fresh() -> None:
        victim.unlink(missing_ok=True)
        with open(victim, "wb") as f:
            f.truncate(BIG)
        seen[0] = 0

    def writer(n: int) -> None:  # deterministic: after the victim's first read
        seen[0] += n
        if seen[0] - n <= 1000 < seen[0] < 1000 + BIG:
            if change == "truncate":
                os.truncate(victim, 1 << 20)
            elif change == "grow":
                with open(victim, "ab") as f:
                    f.write(b"more")
            else:
                time.sleep(0.01)  # a later mtime than the file's own
                with open(victim, "r+b") as f:
                    f.write(b"X")

    with warehouse.open() as wh:
        fresh()
        with pytest.raises(FileChangedError, match=str(victim)):
            wh.put([src], name="n", progress=writer)
        with pytest.raises(NotFoundError):
            wh.get_name("n")
        # Asked to, it stores what it read (never past the size at open).
        fresh()
        r = wh.put([src], name="n", allow_changing=True, progress=writer)
        assert r.write.changed == ("victim",)
        size = r.write.manifest.files()["victim"].size
        assert size == (64 << 20 if change == "truncate" else BIG)


def test_cli_put_of_a_file_a_real_writer_keeps_growing(home: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    log = src / "growing.log"
    log.write_bytes(os.urandom(8 << 20))
    stop = threading.Event()

    def append() -> None:
        with open(log, "ab", buffering=0) as f:
            while not stop.is_set():
                f.write(b"line\n")
                time.sleep(0.0005)

    t = threading.Thread(target=append)
    t.start()
    try:
        r = wh_process("put", str(src), "--name", "logs", home=home)
        ok = wh_process("put", str(src), "--allow-changing", "--json", home=home)
    finally:
        stop.set()
        t.join()
    assert r.returncode == 1, r
    assert r.stderr.startswith("Error: ") and str(log) in r.stderr
    assert r.stderr.count("\n") == 1 and r.stdout == ""
    assert wh_process("name", "get", "logs", home=home).returncode == 4
    assert ok.returncode == 0, ok
    assert json.loads(ok.stdout)["changed"] == ["growing.log"]
    assert "Warning: growing.log changed while it was read; stored as read" in ok.stderr
