"""``wh mount`` on an embedded warehouse, through a real FUSE mount: every
file's MD5 through the mount equals ``wh get``'s listing, stat sizes equal
the manifest's, awkward names stay inside, and SIGINT or ``fusermount3 -u``
unmounts (docs/mount.md)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import WH_BIN, make_tree, wh_process
from mount_helpers import DEADLINE, fuse_or_skip, mounted, wait_for
from warehouse.blocks.volume import LocalVolume
from warehouse.embedded import EmbeddedWarehouse

fuse_or_skip()


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    return {**env, "WH_HOME": str(home), "WH_USER": "alice"}


def _wh(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [WH_BIN, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (args, done.stderr)
    return done.stdout


def _listing(env: dict[str, str], key: str) -> list[dict[str, object]]:
    out: list[dict[str, object]] = json.loads(_wh(env, "get", key, "--no-write", "--json"))
    return out


def _sizes_through(root: Path) -> dict[str, int]:
    """What `ls -lR` shows: every file's size by stat, walking the mount."""
    sizes: dict[str, int] = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = Path(d) / f
            sizes[str(p.relative_to(root))] = p.stat().st_size
    return sizes


def test_every_file_through_the_mount_has_the_listed_md5_and_size(
    ram_dir: Path, tmp_path: Path
) -> None:
    env = _env(tmp_path / "home")
    tree = ram_dir / "tree"
    for i in range(40):
        d = tree / f"d{i:02d}"
        d.mkdir(parents=True)
        for j in range(60):  # 2,400 small files
            (d / f"f{j:03d}.txt").write_bytes(f"{i} {j}\n".encode() * (j + 1))
    (tree / "big.bin").write_bytes(os.urandom(40 << 20))
    _wh(env, "put", str(tree), "--name", "many")
    listed = _listing(env, "many")
    assert len(listed) == 2401
    with mounted(tmp_path / "mnt", env):
        root = tmp_path / "mnt" / "by_name" / "many"
        # md5sum -c reads every file through the mount against wh get's listing.
        lines = "".join(f"{e['md5']}  {e['path']}\n" for e in listed)
        check = subprocess.run(
            ["md5sum", "-c", "--quiet", "-"],
            cwd=root,
            input=lines,
            capture_output=True,
            text=True,
            timeout=DEADLINE * 5,
        )
        assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
        assert _sizes_through(root) == {str(e["path"]): e["size"] for e in listed}
        # ls -lR lists the same files (names only: sizes are checked above).
        ls = subprocess.run(["ls", "-lR", str(root)], capture_output=True, text=True, check=True)
        assert ls.stdout.count("f059.txt") == 40
        # The same collection by its PDH.
        pdh = _wh(env, "name", "get", "many").split()[0]
        by_id = tmp_path / "mnt" / "by_id" / pdh / "big.bin"
        assert by_id.stat().st_size == 40 << 20
        with by_id.open("rb") as f:  # a ranged read
            f.seek((20 << 20) + 3)
            part = f.read(1000)
        assert part == (tree / "big.bin").read_bytes()[(20 << 20) + 3 : (20 << 20) + 1003]


def test_awkward_names_read_back_and_stay_inside(tmp_path: Path) -> None:
    env = _env(tmp_path / "home")
    tree = make_tree(tmp_path / "awkward")
    (tmp_path / "awkward" / "ctl\x01\x1f\x7fname").write_bytes(b"control\n")
    _wh(env, "put", str(tree), "--name", "odd")
    listed = _listing(env, "odd")
    mnt = tmp_path / "mnt"
    with mounted(mnt, env):
        root = mnt / "by_name" / "odd"
        for e in listed:
            data = (root / str(e["path"])).read_bytes()
            assert hashlib.md5(data).hexdigest() == e["md5"], e
        assert _sizes_through(root) == {str(e["path"]): e["size"] for e in listed}
        # ".." from a collection leads to the mount's own directories, never out.
        assert sorted(os.listdir(root / ".." / "..")) == ["by_id", "by_name"]
        assert os.path.realpath(root / ".." / ".." / "..") == str(tmp_path.resolve())
        for bad in ("..%2F..", "a\x01b", "nope", "x" * 300):
            with pytest.raises(OSError) as caught:
                (mnt / "by_name" / bad).stat()
            assert caught.value.errno in (errno.ENOENT, errno.ENAMETOOLONG), bad
        for bad in ("0" * 32, "0" * 32 + "+1", "0" * 32 + "+1/.."):
            assert not (mnt / "by_id" / bad).exists()
        # Read-only: nothing may be written, made or removed.
        for attempt in (
            lambda: (root / "hello.txt").write_bytes(b"x"),
            lambda: (root / "new").mkdir(),
            lambda: (root / "hello.txt").unlink(),
        ):
            with pytest.raises(OSError):
                attempt()
        assert sorted(os.listdir(mnt / "by_name")) == ["odd"]
        assert os.listdir(mnt / "by_id") == []


def test_sigint_sigterm_and_fusermount_unmount_cleanly(tmp_path: Path) -> None:
    env = _env(tmp_path / "home")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "f").write_text("f\n")
    _wh(env, "put", str(tmp_path / "t"), "--name", "t")
    mnt = tmp_path / "mnt"
    with mounted(mnt, env) as proc:
        assert (mnt / "by_name" / "t" / "f").read_text() == "f\n"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=DEADLINE) == 0, proc.communicate()
        assert not os.path.ismount(mnt)
    with mounted(mnt, env) as proc:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 0, proc.communicate()
        assert not os.path.ismount(mnt)
    with mounted(mnt, env) as proc:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=True, timeout=DEADLINE)
        assert proc.wait(timeout=DEADLINE) == 0, proc.communicate()
        wait_for("no mount", lambda: not os.path.ismount(mnt))


def test_a_moved_name_shows_its_new_collection(tmp_path: Path) -> None:
    env = _env(tmp_path / "home")
    for version in ("one", "two"):
        (tmp_path / version).mkdir()
        (tmp_path / version / "v.txt").write_text(f"{version}\n")
    _wh(env, "put", str(tmp_path / "one"), "--name", "n")
    mnt = tmp_path / "mnt"
    with mounted(mnt, env):
        assert (mnt / "by_name" / "n" / "v.txt").read_text() == "one\n"
        _wh(env, "put", str(tmp_path / "two"), "--name", "n", "--replace")
        wait_for(
            "the moved name",
            lambda: (mnt / "by_name" / "n" / "v.txt").read_text() == "two\n",
        )


def test_files_across_blocks_read_right_in_any_order(tmp_path: Path) -> None:
    """Files whose pieces start mid-block and span several blocks (a
    manifest written by hand over small blocks): sequential reads, reads
    across block edges and seeks back all give the right bytes."""
    env = _env(tmp_path / "home")
    blocks = [os.urandom(300_000 + i * 1000) for i in range(5)]
    with EmbeddedWarehouse(tmp_path / "home") as wh:
        locs = [str(wh.store.put(b).locator.key) for b in blocks]
        wh.store.flush()
        data = b"".join(blocks)
        a = (150_000, 1_000_000)  # from inside block 0 to inside block 3
        text = f". {' '.join(locs)} {a[0]}:{a[1]}:a 0:{len(data)}:whole 7:0:empty\n"
        pdh = wh.put_manifest_text(text.encode(), name="spans").pdh
    expect = {"a": data[a[0] : a[0] + a[1]], "whole": data, "empty": b""}
    mnt = tmp_path / "mnt"
    with mounted(mnt, env):
        root = mnt / "by_id" / pdh
        for name, want in expect.items():
            assert (root / name).stat().st_size == len(want)
            assert (root / name).read_bytes() == want, name
        with (root / "whole").open("rb", buffering=0) as f:
            for offset, size in ((299_990, 20), (len(data) - 5, 100), (0, 10), (601_000, 5000)):
                f.seek(offset)
                assert f.read(size) == data[offset : offset + size], offset


def test_a_file_of_big_blocks_reads_right_through_views_of_them(tmp_path: Path) -> None:
    """Blocks of a MiB and more that a file covers whole are read past the
    RAM cache (mapped) and sent as views of them: sequential reads, reads
    across block edges and seeks back give the right bytes, and a block
    two files share (one covers it whole, one a part) reads right in both."""
    env = _env(tmp_path / "home")
    blocks = [os.urandom((1 << 20) + i * 4096 + 7) for i in range(4)]
    with EmbeddedWarehouse(tmp_path / "home") as wh:
        locs = [str(wh.store.put(b).locator.key) for b in blocks]
        wh.store.flush()
        data = b"".join(blocks)
        part = (len(blocks[0]) + 10, 5000)  # inside block 1, which "big" covers whole
        text = f". {' '.join(locs)} 0:{len(data)}:big {part[0]}:{part[1]}:part\n"
        pdh = wh.put_manifest_text(text.encode(), name="big").pdh
    mnt = tmp_path / "mnt"
    with mounted(mnt, env):
        root = mnt / "by_id" / pdh
        assert (root / "big").read_bytes() == data
        assert (root / "part").read_bytes() == data[part[0] : part[0] + part[1]]
        edge = len(blocks[0])
        with (root / "big").open("rb", buffering=0) as f:
            for offset, size in ((edge - 100, 200), (len(data) - 5, 100), (3, 1 << 20), (edge, 9)):
                f.seek(offset)
                assert f.read(size) == data[offset : offset + size], offset


def test_a_damaged_block_of_a_large_file_read_on_reads_as_eio(tmp_path: Path) -> None:
    """A file of big blocks read from its start goes on as a one-pass read
    (blocks checked ahead): a block with one byte changed further on is EIO
    when reached, never its bytes; what lies well before it reads right."""
    env = _env(tmp_path / "home")
    blocks = [os.urandom((1 << 20) + i) for i in range(5)]
    with EmbeddedWarehouse(tmp_path / "home") as wh:
        locs = [wh.store.put(b).locator for b in blocks]
        wh.store.flush()
        data = b"".join(blocks)
        text = f". {' '.join(str(x.key) for x in locs)} 0:{len(data)}:big\n"
        pdh = wh.put_manifest_text(text.encode(), name="big").pdh
    path = LocalVolume(tmp_path / "home" / "blocks").path_for(locs[3].md5)
    with open(path, "r+b") as f:
        f.seek(77)
        byte = f.read(1)
        f.seek(77)
        f.write(bytes([byte[0] ^ 0xFF]))
    mnt = tmp_path / "mnt"
    with mounted(mnt, env) as proc:
        # Short of the bad block by more than the kernel reads ahead (a
        # request across its edge is EIO whole).
        before = sum(len(b) for b in blocks[:3]) - (1 << 19)
        with (mnt / "by_id" / pdh / "big").open("rb", buffering=0) as f:
            got = bytearray()
            while len(got) < before:
                got += f.read(before - len(got))
            assert got == data[:before]
            with pytest.raises(OSError) as caught:
                while part := f.read(1 << 20):  # a short read up to the bad block, then EIO
                    got += part
            assert caught.value.errno == errno.EIO
            assert got == data[: len(got)] and len(got) <= sum(len(b) for b in blocks[:3])
        assert proc.poll() is None


def test_a_damaged_block_reads_as_eio_never_as_its_bytes(tmp_path: Path) -> None:
    env = _env(tmp_path / "home")
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "f.bin").write_bytes(os.urandom(1 << 20))
    _wh(env, "put", str(tmp_path / "t"), "--name", "t")
    md5 = _wh(env, "manifest", "t").split()[1].split("+")[0]
    block = LocalVolume(tmp_path / "home" / "blocks").path_for(md5)
    with open(block, "r+b") as f:  # one byte changed in place, as a bad disk would
        f.seek(1000)
        byte = f.read(1)
        f.seek(1000)
        f.write(bytes([byte[0] ^ 0xFF]))
    mnt = tmp_path / "mnt"
    with mounted(mnt, env) as proc:
        path = mnt / "by_name" / "t" / "f.bin"
        assert path.stat().st_size == 1 << 20  # sizes come from the manifest
        with pytest.raises(OSError) as caught:
            path.read_bytes()
        assert caught.value.errno == errno.EIO
        assert proc.poll() is None  # the mount stays up


def test_a_bad_directory_is_one_error_line(tmp_path: Path) -> None:
    done = wh_process("mount", str(tmp_path / "missing"), home=tmp_path / "home")
    assert done.returncode == 2, done
    assert done.stderr.startswith("Error: ") and done.stderr.count("\n") == 1, done.stderr
