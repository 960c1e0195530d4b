"""One volume suite, every backend: a local directory and an S3 bucket
(SeaweedFS, tests/s3_helpers.py) pass the same tests of the ``Volume``
interface: put, get, streamed writes, verification, index, trash.
What only a directory has (layout, page cache, marks, SIGKILL of a writer)
stays in test_volume.py."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from s3_helpers import (  # noqa: F401 (fixtures)
    moved_aside,
    replace_bytes,
    s3_server,
    s3_spec,
    s3_specs,
)
from warehouse.errors import CorruptDataError, NotFoundError, UsageError
from warehouse.volumes.base import Volume, open_volume
from warehouse.volumes.store import VolumeBlockStore


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@pytest.fixture(params=["local", "s3"])
def volume(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Volume]:
    """A fresh volume of each kind, opened from its spec as keepd opens one."""
    if request.param == "local":
        yield open_volume(tmp_path / "v", trash_lifetime=100)
    else:
        yield open_volume(request.getfixturevalue("s3_spec"), trash_lifetime=100)


def test_put_get_stat(volume: Volume) -> None:
    h = md5(b"abc")
    assert volume.put(h, b"abc") is True
    assert volume.get(h) == b"abc"
    st = volume.stat(h)
    assert st is not None and (st.md5, st.size) == (h, 3)
    assert volume.check(h, 3) and not volume.check(h, 4)
    assert volume.stat(md5(b"other")) is None
    buf = bytearray(10)
    assert volume.get_into(h, buf) == b"abc"
    got: list[bytes] = []
    assert volume.copy_to(h, got.append) == 3 and b"".join(got) == b"abc"


def test_reput_only_refreshes_the_mtime(volume: Volume) -> None:
    h = md5(b"abc")
    volume.put(h, b"abc")
    before = volume.stat(h)
    assert before is not None
    # An object store keeps whole seconds: wait for the next one.
    deadline = time.time() + 30
    while time.time() < deadline:
        time.sleep(0.2)
        assert volume.put(h, b"abc") is False, "already stored: not written again"
        after = volume.stat(h)
        assert after is not None
        if after.mtime_ns > before.mtime_ns:
            break
    else:
        pytest.fail("a re-write never refreshed the block's mtime")
    assert volume.get(h) == b"abc"


def test_missing_and_bad_hashes(volume: Volume) -> None:
    with pytest.raises(NotFoundError):
        volume.get("0" * 32)
    with pytest.raises(NotFoundError):
        volume.get_into("0" * 32, bytearray(1))
    for bad in ("../etc/passwd", "ABC" + "0" * 29, "0" * 31):
        with pytest.raises(UsageError):
            volume.stat(bad)
    with pytest.raises(UsageError):
        list(volume.index("xyz"))


def test_a_changed_copy_is_never_returned_and_moved_aside(volume: Volume) -> None:
    data = b"good data " * 100
    h = md5(data)
    readers = [
        lambda: volume.get(h),
        lambda: volume.get_into(h, bytearray(len(data) * 2)),
        lambda: volume.copy_to(h, lambda _: None),
    ]
    for read in readers:
        volume.put(h, data)
        replace_bytes(volume, h, b"evil data " * 100)
        with pytest.raises(CorruptDataError, match=h):
            read()
        # Moved aside: missing now, so a write stores it anew.
        with pytest.raises(NotFoundError):
            read()
        assert volume.stat(h) is None
    # Kept for inspection (a directory keeps one per second: same name).
    assert moved_aside(volume, h)
    assert all(b.md5 != h for b in volume.index())
    # Removed with the trash once past its lifetime.
    assert volume.empty_trash(now=time.time() + volume.trash_lifetime + 1) >= 1
    assert not moved_aside(volume, h)


def test_a_write_replaces_a_changed_copy(volume: Volume) -> None:
    data = b"block data " * 1000
    h = md5(data)
    assert volume.put(h, data) is True
    replace_bytes(volume, h, b"x" * len(data))  # same size, other bytes
    assert not volume.check(h, len(data)), "a changed copy is read and found bad"
    assert volume.put(h, data) is True, "written anew"
    assert volume.get(h) == data
    replace_bytes(volume, h, b"y" * len(data))
    w = volume.open_write(h, len(data))
    assert not w.exists
    w.write(data)
    assert w.commit() is True
    assert volume.get(h) == data


def test_index_lists_blocks_not_trash(volume: Volume) -> None:
    blobs = [f"block {i}".encode() for i in range(40)]
    for b in blobs:
        volume.put(md5(b), b)
    volume.trash(md5(blobs[1]))
    listed = list(volume.index())
    assert [s.md5 for s in listed] == sorted(md5(b) for b in blobs if b != blobs[1])
    sizes = {md5(b): len(b) for b in blobs}
    assert all(s.size == sizes[s.md5] for s in listed)
    for n in (1, 2, 3, 5, 32):
        prefix = md5(blobs[2])[:n]
        got = [s.md5 for s in volume.index(prefix)]
        assert got == sorted(md5(b) for b in blobs if b != blobs[1] and md5(b).startswith(prefix))


def test_trash_untrash_and_lifetime(volume: Volume) -> None:
    h = md5(b"x")
    volume.put(h, b"x")
    st = volume.stat(h)
    assert st is not None
    assert volume.trash(h, if_mtime_ns=st.mtime_ns + 1) is False, "a rewritten block stays"
    assert volume.trash(h, if_mtime_ns=st.mtime_ns, now=1000) is True
    assert volume.stat(h) is None and volume.trash(h) is False
    assert volume.untrash(h) is True
    assert volume.get(h) == b"x"
    volume.trash(h, now=1000)
    assert volume.empty_trash(now=1099) == 0
    assert volume.untrash(h) is True
    volume.trash(h, now=1000)
    assert volume.empty_trash(now=1100) == 1
    assert volume.untrash(h) is False
    assert volume.remove_stale_temporaries(0) == 0


def test_block_writer_takes_pieces(volume: Volume) -> None:
    pieces: list[bytes | bytearray | memoryview] = [os.urandom(i % 7) for i in range(2500)]
    pieces += [bytearray(b"tail"), memoryview(b"end")]
    data = b"".join(pieces)
    writer = volume.open_write(md5(data), len(data))
    writer.write_pieces(pieces[:1500])
    writer.write(b"")
    writer.write_pieces(pieces[1500:])
    assert writer.size == len(data)
    assert writer.commit() is True
    assert volume.get(md5(data)) == data
    again = volume.open_write(md5(data), len(data))
    assert again.exists
    again.write_pieces(pieces)
    assert again.commit() is False
    wrong = volume.open_write(md5(b"x"), len(data))
    wrong.write_pieces(pieces)
    with pytest.raises(UsageError, match="MD5"):
        wrong.commit()
    assert volume.stat(md5(b"x")) is None
    aborted = volume.open_write(md5(b"later"), 5)
    aborted.write(b"lat")
    aborted.abort()
    assert volume.stat(md5(b"later")) is None


def test_space_and_names(volume: Volume) -> None:
    space = volume.space()
    assert 0 < space.free_bytes <= space.total_bytes
    assert volume.name and volume.device()


def test_block_store_on_any_volume(volume: Volume, tmp_path: Path) -> None:
    """The embedded store over the interface alone (what an S3 volume gets)."""
    store = VolumeBlockStore(volume)
    data = os.urandom(3000)
    stored = store.put(data)
    assert stored.new and store.exists(stored.locator)
    assert store.put(data).new is False
    assert store.get(stored.locator) == data
    scratch = tmp_path / "scratch"
    scratch.write_bytes(b"head" + data + b"tail")
    fd = os.open(scratch, os.O_RDONLY)
    try:
        assert store.put_range(fd, 4, len(data)) == stored.locator
    finally:
        os.close(fd)
    copied: list[bytes] = []
    store.copy_block(stored.locator, lambda b: copied.append(bytes(b)))
    assert b"".join(copied) == data


def test_an_s3_spec_without_boto3_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)  # as on a client-only install
    with pytest.raises(UsageError, match=r"needs boto3: pip install 'warehouse\[s3\]'"):
        open_volume("s3://wh-test/x?endpoint=http://127.0.0.1:9")


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("s3://", "not an S3 volume"),
        ("s3://user:pw@bucket/x", "credentials do not belong"),
        ("s3://Bad_Bucket!/x", "not a bucket name"),
        ("s3://bucket/x?colour=blue", "unknown option 'colour'"),
        ("s3://bucket/x?endpoint=ftp://h", "http:// or https://"),
        ("s3://bucket/a//b", "not a key prefix"),
    ],
)
def test_bad_s3_specs_are_refused(spec: str, says: str) -> None:
    with pytest.raises(UsageError, match=says):
        open_volume(spec)
