"""`wh` through operating-system failures, as a real subprocess.

A full disk (a 2 MiB tmpfs, or RLIMIT_FSIZE where nothing can be mounted),
permission refused (tests run as root in CI, so the command runs with the
capabilities that bypass permission bits dropped), names and paths too long,
symbolic link loops, a DEST that is a file. Each must end in exactly one
`Error: …` line with the documented exit code, name nothing and leave no
partial file or stray directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from conftest import WH_BIN

EMPTY = "d41d8cd98f00b204e9800998ecf8427e+0"


def wh(
    home: Path,
    *args: str,
    prefix: Sequence[str] = (),
    cwd: Path | None = None,
    limit_fsize: int | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WH_HOME": str(home), "WH_USER": "alice"}
    env.pop("WH_URL", None)

    def limit() -> None:
        if limit_fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_fsize, limit_fsize))

    return subprocess.run(
        [*prefix, WH_BIN, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=limit if limit_fsize is not None else None,
    )


def fails(done: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    """One `Error:` line on stderr, nothing else, and the exit code."""
    lines = done.stderr.splitlines()
    assert done.returncode == code, (done.returncode, done.stderr)
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def named(home: Path) -> list[object]:
    done = wh(home, "name", "ls", "--json")
    assert done.returncode == 0, done.stderr
    found: list[object] = json.loads(done.stdout)
    return found


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "wh-home"


# -- permission refused ---------------------------------------------------------


@pytest.fixture
def unprivileged() -> list[str]:
    """A command prefix under which permission bits apply to us."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: permission bits cannot be made to apply")
    # Root keeps its identity (so the files stay reachable) but loses the
    # capabilities that override permission bits.
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    if subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot drop capabilities here (no CAP_SETPCAP)")
    return prefix


def test_put_under_a_directory_one_cannot_enter(
    tmp_path: Path, home: Path, unprivileged: list[str]
) -> None:
    locked = tmp_path / "locked"
    (locked / "d").mkdir(parents=True)
    (locked / "d" / "f").write_text("x")
    (tmp_path / "open").mkdir()
    (tmp_path / "open" / "secret").write_text("s")
    locked.chmod(0)
    (tmp_path / "open" / "secret").chmod(0)
    try:
        fails(wh(home, "put", str(locked / "d"), "--name", "n", prefix=unprivileged), 6, "denied")
        fails(wh(home, "put", str(locked), "--name", "n", prefix=unprivileged), 6, str(locked))
        fails(wh(home, "put", str(tmp_path / "open"), "--name", "n", prefix=unprivileged), 6)
        fails(wh(home, "put", str(tmp_path / "open" / "secret"), prefix=unprivileged), 6)
    finally:
        locked.chmod(0o755)
    assert named(home) == []


def test_skipped_unreadable_entries_are_named(
    tmp_path: Path, home: Path, unprivileged: list[str]
) -> None:
    """`Skipped: REASON` says what was skipped, for a file as for a directory."""
    src = tmp_path / "src"
    (src / "closed").mkdir(parents=True)
    (src / "closed" / "f").write_text("c")
    (src / "ok").write_text("a")
    (src / "secret").write_text("s")
    (src / "secret").chmod(0)
    (src / "closed").chmod(0)
    try:
        done = wh(home, "put", "--skip-unreadable", "--json", str(src), prefix=unprivileged)
    finally:
        (src / "closed").chmod(0o755)
    assert done.returncode == 0, done.stderr
    skipped = sorted(done.stderr.splitlines())
    assert skipped == sorted(
        [
            f"Skipped: cannot read directory {src / 'closed'}: Permission denied",
            f"Skipped: cannot read {src / 'secret'}: Permission denied",
        ]
    )
    put = json.loads(done.stdout)
    assert sorted(s["reason"] for s in put["skipped"]) == [
        line.removeprefix("Skipped: ") for line in skipped
    ]
    assert put["files"] == 1


def test_get_into_a_directory_one_cannot_write(
    tmp_path: Path, home: Path, unprivileged: list[str]
) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "f").write_text("f")
    assert wh(home, "put", str(src), "--name", "n").returncode == 0
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        fails(wh(home, "get", "n", str(ro), prefix=unprivileged), 6, "permission denied")
        fails(wh(home, "get", "n", str(ro / "new" / "deeper"), prefix=unprivileged), 6)
    finally:
        ro.chmod(0o755)
    assert tree(ro) == set()


# -- a full disk ----------------------------------------------------------------


@contextlib.contextmanager
def small_disk(where: Path) -> Iterator[int | None]:
    """A 2 MiB file system at ``where`` (yields None), or else a 2 MiB file size limit."""
    where.mkdir()
    mounted = (
        os.geteuid() == 0
        and shutil.which("mount") is not None
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield None if mounted else 2 << 20
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(where)], check=True)


def test_put_on_a_full_disk_names_nothing_and_leaves_no_partial_block(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "small").write_bytes(os.urandom(1000))
    (data / "big").write_bytes(os.urandom(3 << 20))
    with small_disk(tmp_path / "disk") as limit:
        home = tmp_path / "disk" / "home"
        line = fails(wh(home, "put", str(data), "--name", "n", limit_fsize=limit), 1)
        assert "No space left" in line or "File too large" in line
        assert named(home) == []
        assert not [p for p in (home / "blocks").rglob("*") if p.is_file() and ".tmp" in p.name]


def test_put_with_the_catalog_on_a_full_disk(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "f").write_bytes(b"stored before the disk filled up\n")
    with small_disk(tmp_path / "disk") as limit:
        if limit is not None:
            pytest.skip("no small file system could be mounted (a file size limit fills no disk)")
        home = tmp_path / "disk" / "home"
        assert wh(home, "put", str(data)).returncode == 0
        filler = tmp_path / "disk" / "filler"
        with filler.open("wb") as f, contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 65536)
        # Every block is stored already: only the catalog has to write.
        fails(wh(home, "put", str(data), "--name", "n"), 1, "catalog")
        filler.unlink()
        assert named(home) == []


def test_get_on_a_full_disk_leaves_no_partial_file_and_no_stray_directory(
    tmp_path: Path, home: Path
) -> None:
    src = tmp_path / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "a").write_bytes(b"a" * 1000)
    (src / "sub" / "deeper" / "big").write_bytes(os.urandom(3 << 20))
    assert wh(home, "put", str(src), "--name", "n").returncode == 0
    with small_disk(tmp_path / "disk") as limit:
        out = tmp_path / "disk" / "out"
        line = fails(wh(home, "get", "n", str(out), limit_fsize=limit), 1, "sub/deeper/big")
        assert "No space left" in line or "File too large" in line
        # The file completed before the failure stays; nothing else does.
        assert tree(out) == {"a"}


# -- names and paths too long, and names just short enough -------------------------


def test_names_of_239_to_255_bytes_are_written(tmp_path: Path, home: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for n in (239, 250, 255):
        (src / ("f" * n)).write_text(str(n))
    (src / ("d" * 255)).mkdir()
    (src / ("d" * 255) / ("é" * 127)).write_text("two-byte characters: 254 bytes")
    assert wh(home, "put", str(src), "--name", "n").returncode == 0
    out = tmp_path / "out"
    done = wh(home, "get", "n", str(out))
    assert done.returncode == 0, done.stderr
    assert tree(out) == tree(src)
    check = subprocess.run(["md5sum", "-c", "--quiet", "-"], cwd=out, input=done.stdout, text=True)
    assert check.returncode == 0


def test_names_and_paths_too_long_are_refused_before_anything_is_written(
    tmp_path: Path, home: Path
) -> None:
    long_name = tmp_path / "long-name.txt"
    long_name.write_text(f". {EMPTY} 0:0:ok 0:0:{'n' * 256}\n")
    deep = "/".join(["d" * 250] * 17)  # 4266 bytes: over PATH_MAX
    long_path = tmp_path / "long-path.txt"
    long_path.write_text(f". {EMPTY} 0:0:ok\n./{deep} {EMPTY} 0:0:f\n")
    for manifest, words in ((long_name, "256 bytes"), (long_path, "bytes is longer")):
        pdh = wh(home, "put", "--manifest", str(manifest)).stdout.strip()
        out = tmp_path / "out"
        fails(wh(home, "get", pdh, str(out)), 1, words)
        assert not out.exists()
    # A path given to put that is too long for the system.
    fails(wh(home, "put", "x/" * 2100, "--name", "n"), 1, "too long")
    assert named(home) == []


# -- symbolic link loops, a DEST that is a file ---------------------------------------


def test_symbolic_link_loops_are_refused_with_exit_2(tmp_path: Path, home: Path) -> None:
    to_parent = tmp_path / "to-parent"
    to_parent.mkdir()
    (to_parent / "self").symlink_to("..")
    two_links = tmp_path / "two-links"
    two_links.mkdir()
    (two_links / "a").symlink_to("b")
    (two_links / "b").symlink_to("a")
    for src in (to_parent, two_links, two_links / "a"):
        fails(wh(home, "put", str(src), "--name", "n"), 2, "loop")
    assert named(home) == []


def test_get_into_a_dest_that_is_a_file(tmp_path: Path, home: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("f")
    assert wh(home, "put", str(src), "--name", "n").returncode == 0
    dest = tmp_path / "dest"
    dest.write_text("keep me")
    fails(wh(home, "get", "n", str(dest)), 1, "not a directory")
    fails(wh(home, "get", "n", str(dest / "below")), 1, "not a directory")
    assert dest.read_text() == "keep me"
