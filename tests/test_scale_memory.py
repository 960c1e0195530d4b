"""A put and gets of 200,000 small files run in bounded memory.

`wh` runs as a subprocess under an address-space limit (RLIMIT_AS, set
before it starts), so memory that grows with the file count fails the
command itself; its peak resident size is checked as well. Every byte and
every listed digest is checked afterwards. The gets: the whole collection,
a sub-path, ``--json``, and through a controller (``wh serve``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from cluster import admin_and_alice, listening, wh_serve
from memory_helpers import WH, limited

FILES = 200_000
PER_DIR = 1_000
# Address space the command may map. Before the writer sized its buffers to
# the data and the get dropped its block cache and per-file lists, a put of
# these files mapped about 740 MB and held 460 MB.
LIMIT_AS = 560 << 20
# A get holds no per-file table (files, digests or listed items): it peaked
# near 79 MB here (whole, sub-path, --json, remote alike). Holding the
# recorded digests as a dict took a whole get to 123 MB; building the file
# table (a sub-path, --json, or a get through a controller) to 215-240 MB.
GET_MAX_RSS = 110 << 20


def _content(i: int) -> bytes:
    # Empty-ish: every fifth file empty, the others a few bytes unique to it.
    return b"" if i % 5 == 0 else b"%x\n" % i


def _rel(i: int) -> str:
    return f"d{i // PER_DIR:03d}/f{i:06d}"


# Every file lies in this directory, beside one more file at the root: a get
# of the sub-path reads them all but that one.
TOP = "top"
BESIDE = b"beside\n"


def _run(args: list[str], env: dict[str, str], tmp: Path) -> tuple[bytes, int]:
    """stdout and the peak resident bytes of ``wh args`` run under the limit."""
    out, err, peak = tmp / "stdout", tmp / "stderr", tmp / "peak"
    launch = limited(LIMIT_AS, peak, *args)
    with out.open("wb") as o, err.open("wb") as e:
        done = subprocess.run(launch, env=env, stdout=o, stderr=e, check=False)
    assert done.returncode == 0, err.read_text()[-2000:]
    return out.read_bytes(), int(peak.read_text())


def _make_files(src: Path) -> None:
    for i in range(FILES):
        if i % PER_DIR == 0:
            (src / TOP / _rel(i)).parent.mkdir(parents=True)
        data = _content(i)
        fd = os.open(src / TOP / _rel(i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    (src / "beside").write_bytes(BESIDE)


def _env(home: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "WH_HOME": str(home),
        # One malloc arena per thread would reserve address space per core,
        # which would make the limit depend on the machine, not on the files.
        "MALLOC_ARENA_MAX": "2",
    }
    env.pop("WH_URL", None)
    return env


def _remote_get(tmp_path: Path, src: Path, env: dict[str, str], dest: Path) -> None:
    served = {**env, "WH_HOME": str(tmp_path / "served")}
    server = wh_serve(served, "--keep", "2", "--executor", "none")
    try:
        alice = admin_and_alice(served, listening(server, keep=2)[0])
        put = subprocess.run(
            [WH, "put", "--no-progress", str(src)], env=alice, capture_output=True, check=False
        )
        assert put.returncode == 0, put.stderr.decode()[-2000:]
        pdh = put.stdout.decode().strip()

        out, rss = _run(["get", "--no-write", pdh], alice, tmp_path)
        assert rss < GET_MAX_RSS, f"a remote get --no-write peaked at {rss >> 20} MB"
        lines = out.decode().splitlines()
        assert lines[0] == f"{hashlib.md5(BESIDE).hexdigest()}  beside"
        _check_listing(lines[1:], f"{TOP}/")

        # The manifest and listing the controller sends go to scratch files
        # and are read a piece at a time: a tenth of the files peaks near.
        tenth = [str(src / TOP / f"d{i:03d}") for i in range(FILES // PER_DIR // 10)]
        put = subprocess.run(
            [WH, "put", "--no-progress", *tenth], env=alice, capture_output=True, check=False
        )
        assert put.returncode == 0, put.stderr.decode()[-2000:]
        small = put.stdout.decode().strip()
        out, small_rss = _run(["get", "--no-write", small], alice, tmp_path)
        _check_first(out.decode().splitlines(), FILES // 10)
        assert rss - small_rss < GET_GROWTH, (
            f"a remote get of {FILES} files peaked at {rss >> 20} MB, "
            f"one of {FILES // 10} at {small_rss >> 20} MB"
        )

        # `wh ls` lists from the text it is sent, a stream at a time, as an
        # embedded one does: no file table (a million files' took 885 MB).
        out, rss = _run(["ls", pdh], alice, tmp_path)
        assert out.decode().splitlines() == ["beside", *(f"{TOP}/{_rel(i)}" for i in range(FILES))]
        out, small_rss = _run(["ls", small], alice, tmp_path)
        assert out.decode().splitlines() == [_rel(i) for i in range(FILES // 10)]
        assert rss - small_rss < GET_GROWTH, (
            f"a remote ls of {FILES} files peaked at {rss >> 20} MB, "
            f"one of {FILES // 10} at {small_rss >> 20} MB"
        )

        out, rss = _run(["get", f"{pdh}/{TOP}", str(dest)], alice, tmp_path)
        assert rss < GET_MAX_RSS, f"a remote get of a sub-path peaked at {rss >> 20} MB"
        _check_listing(out.decode().splitlines(), "")
        _check_files(dest)
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
        if server.stdout:
            server.stdout.close()


def _check_listing(lines: list[str], prefix: str) -> None:
    """Every file's line, in order, its digest that of its bytes."""
    assert len(lines) == FILES
    for i, line in enumerate(lines):
        assert line == f"{hashlib.md5(_content(i)).hexdigest()}  {prefix}{_rel(i)}", line


def _check_files(root: Path) -> None:
    """Every file's bytes under ``root``, and nothing else."""
    for i in range(FILES):
        with open(root / _rel(i), "rb") as f:
            assert f.read() == _content(i), _rel(i)
    assert sum(len(files) for _, _, files in os.walk(root)) == FILES


def _remove(root: Path) -> None:
    shutil.rmtree(root)


# A put holds nothing of a file to its end (the tree is walked a directory
# at a time, each stream and its digests spooled to scratch files once its
# blocks are stored, the listing recorded a piece at a time): one of
# 200,000 files peaks within a few MB of one of 20,000 (61.5 and 66.5 MB
# here). Holding every file's name, size, MD5 and segment to the end, it
# grew by 68 MB (63 to 131 MB), about 0.38 KB a file; it peaked near 220
# MB while the scan held each file's source path in a tuple and the digests
# were a dict of hex strings by path.
GROWTH = 16 << 20
BOUNDED_RSS = 100 << 20


# A get reads the stored manifest stream by stream (from a scratch file),
# and its recorded digests a listing part (1 MiB) at a time in step with
# it: a get of 200,000 files peaks within a few MB of one of 20,000 (about
# 5 MB more here: a part's copies; 7 MB while it held the manifest text,
# 2.8 MB). Joining the listing's parts and decoding the whole manifest
# text, it grew by 19 MB (57 to 76 MB). `wh ls` of a sub-path and `--json`
# are held to the same bound, `put --dry-run` to the put's: building the
# file table (or scanning the whole tree first) they grew by 40 to 280 MB.
GET_GROWTH = 14 << 20


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_200k_files_put_and_got_in_bounded_memory_near_a_tenth_of_them(ram_dir: Path) -> None:
    """One tree for every check, as making and storing it is most of the time."""
    src = ram_dir / "src"
    _make_files(src)
    env = _env(ram_dir / "wh")
    # A tenth of the files: the first directories, stored by their names.
    tenth = [str(src / TOP / f"d{i:03d}") for i in range(FILES // PER_DIR // 10)]
    out, small_put = _run(["put", "--no-progress", *tenth], env, ram_dir)
    small = out.decode().strip()
    out, big_put = _run(["put", "--no-progress", str(src)], env, ram_dir)
    big = out.decode().strip()
    assert big_put - small_put < GROWTH, (
        f"a put of {FILES} files peaked at {big_put >> 20} MB, "
        f"one of {FILES // 10} at {small_put >> 20} MB"
    )
    assert big_put < BOUNDED_RSS, f"put peaked at {big_put >> 20} MB"
    # A dry run walks the tree as the put does, printing as it goes: the
    # list (and, with --json, its items) is not held.
    dry: dict[tuple[str, str], int] = {}
    for how, flags in (("text", []), ("json", ["--json"])):
        out, dry["small", how] = _run(["put", "--dry-run", *flags, *tenth], env, ram_dir)
        if how == "json":
            assert json.loads(out)["files"] == FILES // 10
        out, dry["big", how] = _run(["put", "--dry-run", *flags, str(src)], env, ram_dir)
        if how == "json":
            would = json.loads(out)
            assert would["files"] == FILES + 1 and len(would["would_store"]) == FILES + 1
            assert would["would_store"][1] == {"path": f"{TOP}/{_rel(0)}", "size": 0}
            del would
        else:
            lines = out.decode().splitlines()
            assert lines[:2] == ["path\tsize", "beside\t7"] and len(lines) == FILES + 2
            assert lines[-1] == f"{TOP}/{_rel(FILES - 1)}\t{len(_content(FILES - 1))}"
        del out
        assert dry["big", how] - dry["small", how] < GROWTH, (
            f"put --dry-run ({how}) of {FILES} files peaked at {dry['big', how] >> 20} MB, "
            f"of {FILES // 10} at {dry['small', how] >> 20} MB"
        )
    beside = f"{hashlib.md5(BESIDE).hexdigest()}  beside"
    dest = ram_dir / "out"
    peaks: dict[tuple[str, str], int] = {}

    out, peaks["small", "no-write"] = _run(["get", "--no-write", small], env, ram_dir)
    _check_first(out.decode().splitlines(), FILES // 10)
    out, peaks["small", "get"] = _run(["get", small, str(dest)], env, ram_dir)
    _check_first(out.decode().splitlines(), FILES // 10)
    for i in range(FILES // 10):
        assert (dest / _rel(i)).read_bytes() == _content(i), _rel(i)
    assert sum(len(files) for _, _, files in os.walk(dest)) == FILES // 10
    _remove(dest)

    out, peaks["big", "no-write"] = _run(["get", "--no-write", big], env, ram_dir)
    lines = out.decode().splitlines()
    assert lines[0] == beside
    _check_listing(lines[1:], f"{TOP}/")
    out, peaks["big", "get"] = _run(["get", big, str(dest)], env, ram_dir)
    lines = out.decode().splitlines()
    assert lines[0] == beside
    _check_listing(lines[1:], f"{TOP}/")
    assert peaks["big", "get"] < GET_MAX_RSS, f"get peaked at {peaks['big', 'get'] >> 20} MB"
    _check_files(dest / TOP)
    assert (dest / "beside").read_bytes() == BESIDE
    assert sorted(os.listdir(dest)) == ["beside", TOP]
    _remove(dest)

    # A sub-path: its files only, read from the stored text stream by stream.
    out, sub_rss = _run(["get", f"{big}/{TOP}", str(dest)], env, ram_dir)
    assert sub_rss < GET_MAX_RSS, f"get of a sub-path peaked at {sub_rss >> 20} MB"
    _check_listing(out.decode().splitlines(), "")
    _check_files(dest)
    _remove(dest)

    # --json prints each file's item as it goes: the whole list is not held.
    out, json_rss = _run(["get", "--json", "--no-write", "--rehash", big], env, ram_dir)
    assert json_rss < GET_MAX_RSS, f"get --json peaked at {json_rss >> 20} MB"
    got = json.loads(out)
    assert got[0] == {"path": "beside", "md5": hashlib.md5(BESIDE).hexdigest(), "size": 7}
    assert len(got) == FILES + 1
    for i, item in enumerate(got[1:]):
        data = _content(i)
        want = {"path": f"{TOP}/{_rel(i)}", "md5": hashlib.md5(data).hexdigest()}
        assert item == {**want, "size": len(data)}, item
    del got

    # Listings of a sub-path and --json go stream by stream too: no table.
    out, peaks["small", "ls sub-path"] = _run(["ls", f"{small}/d000"], env, ram_dir)
    assert len(out.splitlines()) == PER_DIR
    out, peaks["big", "ls sub-path"] = _run(["ls", f"{big}/{TOP}"], env, ram_dir)
    assert out.decode().splitlines() == [_rel(i) for i in range(FILES)]
    out, peaks["small", "ls --json"] = _run(["ls", "--json", small], env, ram_dir)
    assert len(json.loads(out)) == FILES // 10
    out, peaks["big", "ls --json"] = _run(["ls", "--json", big], env, ram_dir)
    items = json.loads(out)
    assert len(items) == FILES + 1 and items[0] == {"path": "beside", "size": len(BESIDE)}
    assert items[-1] == {"path": f"{TOP}/{_rel(FILES - 1)}", "size": len(_content(FILES - 1))}
    del items, out

    for how in ("no-write", "get", "ls sub-path", "ls --json"):
        small_rss, big_rss = peaks["small", how], peaks["big", how]
        assert big_rss - small_rss < GET_GROWTH, (
            f"a get ({how}) of {FILES} files peaked at {big_rss >> 20} MB, "
            f"one of {FILES // 10} at {small_rss >> 20} MB"
        )

    # Through a controller: the client gets the stored text, signed, and
    # the caller's listing as stored, and reads both stream by stream.
    _remote_get(ram_dir, src, env, dest)


def _check_first(lines: list[str], count: int) -> None:
    """The listing of the first ``count`` files, stored by their directories' names."""
    assert len(lines) == count
    for i, line in enumerate(lines):
        assert line == f"{hashlib.md5(_content(i)).hexdigest()}  {_rel(i)}", line


# A manifest of 200,000 files (2,000 streams of 100) stored with
# `wh put --manifest`, listed with `wh ls` and read with `wh get --no-write`:
# each goes stream by stream, so they hold a few streams, the text and
# little else. Holding every file entry (as put and ls did, and get did
# before it read the stored text stream by stream) peaked near 300 MB here.
MANIFEST_STREAMS = 2_000
MANIFEST_MAX_RSS = 150 << 20


@pytest.mark.slow
def test_manifest_of_200k_files_put_listed_and_read_in_bounded_memory(ram_dir: Path) -> None:
    _put_ls_manifest(ram_dir)


def _put_ls_manifest(tmp_path: Path) -> None:
    from warehouse.embedded import EmbeddedWarehouse

    home = tmp_path / "wh"
    lines = []
    with EmbeddedWarehouse(home) as wh:
        for i in range(MANIFEST_STREAMS):
            block = b"%09d\n" % i * 100  # 100 files of 10 bytes
            loc = wh.store.put(block).locator
            segments = " ".join(f"{10 * j}:10:f{j:02d}" for j in range(100))
            lines.append(f"./d{i:04d} {loc} {segments}\n")
        wh.store.flush()
    text = "".join(lines).encode()
    (tmp_path / "m.txt").write_bytes(text)
    env = {**os.environ, "WH_HOME": str(home), "MALLOC_ARENA_MAX": "2"}
    env.pop("WH_URL", None)

    out, put_rss = _run(["put", "--manifest", str(tmp_path / "m.txt")], env, tmp_path)
    pdh = out.decode().strip()
    assert pdh == f"{hashlib.md5(text).hexdigest()}+{len(text)}"
    assert put_rss < MANIFEST_MAX_RSS, f"put --manifest peaked at {put_rss >> 20} MB"

    out, ls_rss = _run(["ls", "-l", pdh], env, tmp_path)
    assert ls_rss < MANIFEST_MAX_RSS, f"ls peaked at {ls_rss >> 20} MB"
    listed = out.decode().splitlines()
    assert len(listed) == MANIFEST_STREAMS * 100
    assert listed[0].split() == ["10", "d0000/f00"]
    assert listed[-1].split() == ["10", f"d{MANIFEST_STREAMS - 1:04d}/f99"]

    # A get reads it stream by stream too: no table of every file is built.
    out, get_rss = _run(["get", "--no-write", pdh], env, tmp_path)
    assert get_rss < MANIFEST_MAX_RSS, f"get --no-write peaked at {get_rss >> 20} MB"
    got = out.decode().splitlines()
    assert len(got) == MANIFEST_STREAMS * 100
    last = MANIFEST_STREAMS - 1
    first_md5, last_md5 = (hashlib.md5(b"%09d\n" % i).hexdigest() for i in (0, last))
    assert got[0] == f"{first_md5}  d0000/f00"
    assert got[-1] == f"{last_md5}  d{last:04d}/f99"


# A get and `wh ls` hold none of the stored manifest text: it is copied to a
# scratch file and read back a piece at a time. With names long enough that
# the text (about 33 MB for 200,000 files) is most of what they would hold,
# each peaks near where it does for a tenth of the files. Holding the text,
# a get grew by about as much as the text.
LONG_NAME = "x" * 150
LONG_GROWTH = 8 << 20


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_get_and_ls_of_a_long_manifest_hold_none_of_its_text(ram_dir: Path) -> None:
    _long_manifest(ram_dir)


def _long_manifest(tmp_path: Path) -> None:
    from warehouse.embedded import EmbeddedWarehouse

    home = tmp_path / "wh"
    env = {**os.environ, "WH_HOME": str(home), "MALLOC_ARENA_MAX": "2"}
    env.pop("WH_URL", None)
    sizes = {"small": MANIFEST_STREAMS // 10, "big": MANIFEST_STREAMS}
    pdhs: dict[str, str] = {}
    with EmbeddedWarehouse(home) as wh:
        lines = []
        for i in range(MANIFEST_STREAMS):
            block = b"%09d\n" % i * 100  # 100 files of 10 bytes
            loc = wh.store.put(block).locator
            segments = " ".join(f"{10 * j}:10:{LONG_NAME}{j:02d}" for j in range(100))
            lines.append(f"./d{i:04d} {loc} {segments}\n")
        wh.store.flush()
    for size, streams in sizes.items():
        text = "".join(lines[:streams]).encode()
        (tmp_path / "m.txt").write_bytes(text)
        out, _ = _run(["put", "--manifest", str(tmp_path / "m.txt")], env, tmp_path)
        pdhs[size] = out.decode().strip()
        assert pdhs[size] == f"{hashlib.md5(text).hexdigest()}+{len(text)}"
    del lines, text
    (tmp_path / "m.txt").unlink()

    peaks: dict[tuple[str, str], int] = {}
    for size, pdh in pdhs.items():
        files = sizes[size] * 100
        last = sizes[size] - 1
        out, peaks[size, "get"] = _run(["get", "--no-write", pdh], env, tmp_path)
        got = out.decode().splitlines()
        assert len(got) == files
        first_md5, last_md5 = (hashlib.md5(b"%09d\n" % i).hexdigest() for i in (0, last))
        assert got[0] == f"{first_md5}  d0000/{LONG_NAME}00"
        assert got[-1] == f"{last_md5}  d{last:04d}/{LONG_NAME}99"
        del got
        out, peaks[size, "ls"] = _run(["ls", "-l", pdh], env, tmp_path)
        listed = out.decode().splitlines()
        assert len(listed) == files
        assert listed[-1].split() == ["10", f"d{last:04d}/{LONG_NAME}99"]
        del listed, out
    for how in ("get", "ls"):
        small, big = peaks["small", how], peaks["big", how]
        assert big - small < LONG_GROWTH, (
            f"{how} of {sizes['big'] * 100} files (long names) peaked at {big >> 20} MB, "
            f"of {sizes['small'] * 100} at {small >> 20} MB"
        )
