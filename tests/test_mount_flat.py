"""One flat directory of many files through a real FUSE mount: listed in
name order, stat and read right, and the mount's memory bounded by the
pages of its stream in use, far below the directory made whole
(docs/mount.md "Large collections")."""

from __future__ import annotations

import errno
import hashlib
import io
import os
from pathlib import Path

import pytest

from mount_helpers import fuse_or_skip, mounted
from warehouse.embedded import EmbeddedWarehouse

fuse_or_skip()

# Ten times the size from which a directory is read in pages (20,000): made
# whole, these cost the mount some 580 bytes each (116 MB measured).
FILES = 200_000


def _kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == key:
            return int(value.split()[0])
    raise AssertionError(f"no {key} for process {pid}")


def _flat(wh: EmbeddedWarehouse, files: int) -> tuple[str, bytes]:
    """A collection of ``files`` files in its root over one block, its
    normalized text written here (a put of that many files would take
    most of the test's time): file i holds 1 + i % 4 bytes."""
    lengths = [1 + i % 4 for i in range(files)]
    block = os.urandom(sum(lengths))
    locator = wh.store.put(block).locator.key
    wh.store.flush()
    out = io.BytesIO()
    out.write(f". {locator}".encode())
    pos = 0
    for i, length in enumerate(lengths):
        out.write(f" {pos}:{length}:f{i:07}".encode())
        pos += length
    out.write(b"\n")
    text = out.getvalue()
    pdh = wh.put_manifest_file(io.BytesIO(text), 1 << 30, name="flat").pdh
    # Stored as written: the text is normalized, as the pages need.
    assert pdh == f"{hashlib.md5(text).hexdigest()}+{len(text)}"
    return pdh, block


def test_a_flat_directory_is_listed_and_read_in_pages(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with EmbeddedWarehouse(home) as wh:
        pdh, block = _flat(wh, FILES)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    env |= {"WH_HOME": str(home), "WH_USER": "alice"}
    mnt = tmp_path / "mnt"
    with mounted(mnt, env) as proc:
        (mnt / "by_name").stat()
        before = _kib(proc.pid, "VmRSS")
        root = mnt / "by_id" / pdh
        with os.scandir(root) as it:  # readdir order: the mount's
            names = [e.name for e in it]
        assert len(names) == FILES
        assert names == [f"f{i:07}" for i in range(FILES)]
        starts = [0]
        for i in range(FILES):
            starts.append(starts[-1] + 1 + i % 4)
        for i in [0, 1, 255, 256, 257, 99_999, FILES // 2 + 3, FILES - 1]:
            path = root / f"f{i:07}"
            assert path.stat().st_size == 1 + i % 4
            assert path.read_bytes() == block[starts[i] : starts[i + 1]], i
        for absent in ["f", "f0000000x", f"f{FILES:07}", "g"]:
            with pytest.raises(OSError) as caught:
                (root / absent).stat()
            assert caught.value.errno == errno.ENOENT
        # Inodes stay as they were: the same file by its name again.
        assert (root / "f0123456").stat().st_ino == os.stat(root / "f0123456").st_ino
        grown = _kib(proc.pid, "VmHWM") - before
    # Made whole, the directory grew the mount by 116 MB; in pages by 7 MB
    # (its outline made, the index, a few pages and the block read).
    assert grown < 30 * 1024, f"the mount grew by {grown} KiB listing {FILES} files"
