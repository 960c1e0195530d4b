"""The local volume: what only a directory has (layout, atomic writes and a
killed writer, the page cache, verified marks). The tests of the volume
interface run on every backend in test_volume_backends.py."""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from warehouse.blocks.store import LocalBlockStore
from warehouse.blocks.volume import LocalVolume
from warehouse.errors import CorruptDataError, NotFoundError


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def test_put_get_layout(tmp_path: Path) -> None:
    vol = LocalVolume(tmp_path / "v")
    h = md5(b"abc")
    assert vol.put(h, b"abc") is True
    assert (tmp_path / "v" / h[:3] / h).read_bytes() == b"abc"
    assert vol.get(h) == b"abc"
    st = vol.stat(h)
    assert st is not None and st.size == 3


def test_reput_only_touches_mtime(tmp_path: Path) -> None:
    vol = LocalVolume(tmp_path)
    h = md5(b"abc")
    vol.put(h, b"abc")
    path = vol.path_for(h)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    inode = path.stat().st_ino
    assert vol.put(h, b"abc") is False
    assert path.stat().st_ino == inode, "an existing block is not rewritten"
    assert path.stat().st_mtime_ns > 1_000_000_000


def test_corrupt_block_is_never_returned(tmp_path: Path) -> None:
    vol = LocalVolume(tmp_path)
    h = md5(b"good data")
    vol.put(h, b"good data")
    buf = bytearray(20)
    assert vol.get_into(h, buf) == b"good data"
    if LocalVolume.can_map:
        assert vol.get_mapped(h) == b"good data"
    # Every read verifies, and a corrupt copy is moved aside at once: it is
    # then missing (so a write stores it anew) and kept for inspection.
    readers = [lambda: vol.get(h), lambda: vol.get_into(h, buf)]
    if LocalVolume.can_map:
        readers.append(lambda: vol.get_mapped(h))
    for read in readers:
        vol.path_for(h).write_bytes(b"evil data")
        with pytest.raises(CorruptDataError, match=h):
            read()
        assert not vol.path_for(h).exists()
        with pytest.raises(NotFoundError):
            read()
    vol.path_for(h).write_bytes(b"")
    with pytest.raises(CorruptDataError, match=h):
        vol.get_into(h, buf)
    # Longer than the buffer, which holds any block: not a block at all.
    vol.path_for(h).write_bytes(b"good data" * 3)
    with pytest.raises(CorruptDataError, match="longer than any block"):
        vol.get_into(h, buf)
    aside = [p.name for p in vol.path_for(h).parent.iterdir() if ".corrupt." in p.name]
    assert len(aside) >= 1
    assert vol.index() is not None and all(b.md5 != h for b in vol.index())
    # Removed with the trash once past its lifetime.
    assert vol.empty_trash(now=time.time() + vol.trash_lifetime + 1) >= 1


def test_index_lists_blocks_not_temporaries_or_trash(tmp_path: Path) -> None:
    vol = LocalVolume(tmp_path)
    blobs = [f"block {i}".encode() for i in range(50)]
    for b in blobs:
        vol.put(md5(b), b)
    shard = vol.path_for(md5(blobs[0])).parent
    (shard / f".{md5(blobs[0])}.x.tmp").write_bytes(b"partial")
    vol.trash(md5(blobs[1]))
    listed = list(vol.index())
    assert [s.md5 for s in listed] == sorted(md5(b) for b in blobs if b != blobs[1])
    prefix = md5(blobs[2])[:2]
    assert all(s.md5.startswith(prefix) for s in vol.index(prefix))
    assert md5(blobs[2]) in {s.md5 for s in vol.index(prefix)}


_WRITER = """
import hashlib, sys
from pathlib import Path
from warehouse.blocks.volume import LocalVolume
data = b"z" * (48 * 1024 * 1024)
print("go", flush=True)
while True:
    LocalVolume(Path(sys.argv[1])).put(hashlib.md5(data).hexdigest(), data)
    data = data[1:]
"""


def test_killed_writer_leaves_no_partial_block(tmp_path: Path) -> None:
    """SIGKILL in the middle of writes: every block visible under its name is whole."""
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"go\n"
    vol = LocalVolume(tmp_path)
    # Killed once a block is stored and the next one is being written (its
    # temporary file there), not after a fixed time a loaded machine stretches.
    deadline = time.monotonic() + 60
    while not (any(vol.index()) and any(tmp_path.glob("*/.*.tmp"))):
        assert time.monotonic() < deadline, "the writer stored no block in 60 s"
        assert proc.poll() is None, "the writer ended"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    blocks = list(vol.index())
    assert blocks, "the writer stored something before it was killed"
    for st in blocks:
        vol.get(st.md5)  # raises if a partial block were visible


def test_pending_write_is_invisible_until_finished(tmp_path: Path) -> None:
    vol = LocalVolume(tmp_path)
    h = md5(b"later")
    pending = vol.put_pending(h, b"later")
    assert pending is not None
    assert vol.stat(h) is None and list(vol.index()) == []
    pending.finish()
    assert vol.get(h) == b"later"
    assert vol.put_pending(h, b"later") is None, "already stored: nothing to write"


def _cached_pages(path: Path) -> int:
    """How many of the file's pages are in the page cache (mincore(2))."""
    libc = ctypes.CDLL(None, use_errno=True)
    size = path.stat().st_size
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * pages)()
    with path.open("rb") as f:
        m = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
        # Taking the mapping's address does not touch (and so cache) a page.
        anchor = ctypes.c_char.from_buffer(m)
        try:
            if libc.mincore(ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(size), vec):
                raise OSError(ctypes.get_errno(), "mincore failed")
        finally:
            del anchor
            m.close()
    return sum(v & 1 for v in vec)


def test_blocks_stored_for_a_put_leave_the_page_cache(tmp_path: Path) -> None:
    """Once durable, a block the block store wrote is dropped from the page
    cache; a block written by the volume alone (keepd's path) stays."""
    probe = tmp_path / "probe"
    probe.write_bytes(os.urandom(1 << 20))
    with probe.open("rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    if _cached_pages(probe) > 128:
        pytest.skip("this file system keeps its pages whatever the advice (tmpfs, ZFS)")
    volume = LocalVolume(tmp_path / "vol")
    kept, dropped = os.urandom(4 << 20), os.urandom(4 << 20)
    volume.put(hashlib.md5(kept).hexdigest(), kept)
    store = LocalBlockStore(volume)
    store.put(dropped)
    store.close()
    assert _cached_pages(volume.path_for(hashlib.md5(kept).hexdigest())) > 512
    assert _cached_pages(volume.path_for(hashlib.md5(dropped).hexdigest())) < 64


def _flip_byte(path: Path, offset: int = 0) -> None:
    """Corrupt a stored copy the way a stray writer would: one byte, in place."""
    time.sleep(0.02)  # a later write than the block's own, as in life
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_a_write_replaces_a_corrupt_copy(tmp_path: Path) -> None:
    vol = LocalVolume(tmp_path)
    data = b"block data " * 1000
    h = md5(data)
    assert vol.put(h, data) is True
    assert vol.check(h, len(data))  # marked when written: no read needed
    assert vol.put(h, data) is False  # a good copy: only its mtime is refreshed
    _flip_byte(vol.path_for(h), 5)
    assert not vol.check(h, len(data))  # changed behind our back: read, found bad
    assert not vol.path_for(h).exists()
    assert vol.put(h, data) is True  # written anew
    assert vol.get(h) == data
    # The streaming writer (keepd PUT) does the same.
    _flip_byte(vol.path_for(h), 7)
    w = vol.open_write(h, len(data))
    assert not w.exists
    w.write(data)
    assert w.commit() is True
    assert vol.get(h) == data
    # And the embedded block store.
    _flip_byte(vol.path_for(h), 9)
    store = LocalBlockStore(vol)
    try:
        assert store.put(data).new is True
        store.flush()
    finally:
        store.close()
    assert vol.get(h) == data


def test_a_good_copy_touched_stays_trusted(tmp_path: Path) -> None:
    vol = LocalVolume(tmp_path)
    h = md5(b"x" * 100)
    vol.put(h, b"x" * 100)
    before = vol.stat(h)
    assert before is not None
    time.sleep(0.02)
    assert vol.touch(h)
    assert vol.check(h, 100)
    assert (
        os.getxattr(vol.path_for(h), "user.wh.verified")
        == str(vol.path_for(h).stat().st_mtime_ns).encode()
    )
