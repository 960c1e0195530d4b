"""The collection writer and reader over a real local block store."""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import random
from pathlib import Path
from typing import Any

import pytest

from conftest import make_tree
from warehouse.blocks import Locator
from warehouse.blocks.cache import BlockCache
from warehouse.blocks.store import LocalBlockStore, StoredBlock
from warehouse.blocks.volume import LocalVolume
from warehouse.collection.extract import extract
from warehouse.collection.readahead import SMALL_FILE
from warehouse.collection.reader import CollectionReader
from warehouse.collection.scan import scan_paths
from warehouse.collection.writer import FileChangedError, write_tree
from warehouse.errors import CorruptDataError, NotFoundError, WarehouseError
from warehouse.manifest import Manifest
from warehouse.manifest.normalize import normalized_streams


@pytest.fixture
def store(tmp_path: Path) -> LocalBlockStore:
    return LocalBlockStore(LocalVolume(tmp_path / "vol"), BlockCache(1 << 20))


def tree_files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("block_size", [7, 1000, 64 * 1024 * 1024])
def test_round_trip_with_any_block_size(
    tmp_path: Path, store: LocalBlockStore, block_size: int
) -> None:
    root = make_tree(tmp_path / "tree")
    result = write_tree(store, [root], block_size=block_size, workers=3)
    assert result.manifest.format() == result.manifest.normalized().format()
    assert Manifest.parse(result.manifest.format()).pdh == result.pdh
    reader = CollectionReader(store, result.manifest, readahead=2)
    expected = tree_files(root)
    assert set(reader.files) == set(expected)
    for path, data in expected.items():
        assert reader.read_file(path) == data
    assert set(result.manifest.empty_directories()) == {"empty dir/inner empty"}


def test_same_tree_same_pdh_and_no_new_blocks(tmp_path: Path, store: LocalBlockStore) -> None:
    root = make_tree(tmp_path / "tree")
    first = write_tree(store, [root], block_size=4096)
    again = write_tree(store, [root], block_size=4096)
    assert again.pdh == first.pdh
    assert first.blocks_new > 0 and again.blocks_new == 0 and again.bytes_new == 0


def test_block_size_bounds_the_blocks(tmp_path: Path, store: LocalBlockStore) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "big").write_bytes(os.urandom(10_000))
    result = write_tree(store, [tmp_path / "d"], block_size=3000)
    assert [b.locator.size for b in result.blocks] == [3000, 3000, 3000, 1000]


def test_read_range(tmp_path: Path, store: LocalBlockStore) -> None:
    data = os.urandom(20_000)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_bytes(b"x" * 123)
    (tmp_path / "d" / "f").write_bytes(data)
    reader = CollectionReader(store, write_tree(store, [tmp_path / "d"], block_size=999).manifest)
    for off, n in [(0, 1), (0, 20_000), (998, 3), (5000, 7000), (19_999, 10), (25_000, 5)]:
        assert reader.read_range("f", off, n) == data[off : off + n]


def test_corrupt_block_names_block_and_files(tmp_path: Path, store: LocalBlockStore) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "one").write_bytes(b"1" * 50)
    (tmp_path / "d" / "two").write_bytes(b"2" * 50)
    manifest = write_tree(store, [tmp_path / "d"], block_size=80).manifest
    first = manifest.blocks()[0]
    store.volume.path_for(first.md5).write_bytes(b"?" * first.size)
    reader = CollectionReader(LocalBlockStore(store.volume), manifest)
    with pytest.raises(CorruptDataError) as err:
        reader.read_file("two")
    assert first.md5 in str(err.value) and "one" in str(err.value) and "two" in str(err.value)


def test_several_paths_are_stored_by_base_name(tmp_path: Path, store: LocalBlockStore) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "in").write_bytes(b"in")
    (tmp_path / "f.txt").write_bytes(b"f")
    reader = CollectionReader(
        store, write_tree(store, [tmp_path / "x", tmp_path / "f.txt"]).manifest
    )
    assert sorted(reader.files) == ["f.txt", "x/in"]
    with pytest.raises(NotFoundError):
        reader.entry("nope")


def test_memory_is_bounded_by_workers(tmp_path: Path, store: LocalBlockStore) -> None:
    """However many blocks a tree has, only workers + 2 buffers are ever allocated
    (one being filled, one per worker, one the file hasher may still read)."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(os.urandom(200_000))
    allocated: list[int] = []
    real = bytearray

    class Counting(bytearray):
        def __init__(self, n: int) -> None:
            allocated.append(n)
            real.__init__(self, n)

    import warehouse.collection.packing as packing

    packing.bytearray = Counting  # type: ignore[attr-defined]
    try:
        result = write_tree(store, [tmp_path / "d"], block_size=1000, workers=2)
    finally:
        del packing.bytearray  # type: ignore[attr-defined]
    assert len(result.blocks) == 200
    assert len(allocated) <= 4
    got = CollectionReader(store, result.manifest).read_file("f")
    assert hashlib.md5(got).digest() == hashlib.md5((tmp_path / "d" / "f").read_bytes()).digest()


def test_a_failing_check_stops_the_put_at_the_next_block(
    tmp_path: Path, store: LocalBlockStore
) -> None:
    """The caller's check runs before each block is stored; once it raises,
    nothing more is read or stored and the error reaches the caller."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(os.urandom(100_000))
    calls = 0

    def check() -> None:
        nonlocal calls
        calls += 1
        if calls > 3:
            raise WarehouseError("the catalog is gone")

    with pytest.raises(WarehouseError, match="the catalog is gone"):
        write_tree(store, [tmp_path / "d"], block_size=1000, workers=2, check=check)
    assert calls == 4
    store.flush()  # blocks already handed to the store (some may have been dropped)
    assert len(list(store.volume.index())) <= 3


def _md5s(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.md5(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


@pytest.mark.parametrize("block_size", [64, 100, 1000, 4096])
def test_recorded_digests_are_the_files_md5s(
    tmp_path: Path, store: LocalBlockStore, block_size: int
) -> None:
    """Every way a file's MD5 is taken: alone, sharing a block with others,
    first in its block (hashed along with the block), spanning blocks from a
    block's start (continuing from the block's MD5) or from inside one."""
    root = tmp_path / "d"
    (root / "s").mkdir(parents=True)
    sizes = [0, 0, 1, 99, 100, 101, 999, 1000, 1001, 2500, 0, 4096, 4097, 3, 12_000]
    for i, size in enumerate(sizes):
        (root / f"f{i:02}").write_bytes(os.urandom(size))
        (root / "s" / f"g{i:02}").write_bytes(os.urandom(size // 3))
    result = write_tree(store, [root], block_size=block_size, workers=3)
    assert result.file_md5s == _md5s(root)
    reader = CollectionReader(store, result.manifest)
    for path in result.file_md5s:
        assert reader.read_file(path) == (root / path).read_bytes()


def test_a_file_of_a_block_or_more_has_blocks_of_its_own(
    tmp_path: Path, store: LocalBlockStore
) -> None:
    """It starts a block and the block with its end is cut there, so the same
    big file is the same blocks whatever stands before or after it."""
    big = os.urandom(2500)
    one, two = tmp_path / "one", tmp_path / "two"
    for root, before, after in ((one, b"a" * 300, b"z" * 100), (two, b"b" * 42, b"")):
        root.mkdir()
        (root / "a").write_bytes(before)
        (root / "big").write_bytes(big)
        if after:
            (root / "c").write_bytes(after)
    first = write_tree(store, [one], block_size=1000)
    assert [b.locator.size for b in first.blocks] == [300, 1000, 1000, 500, 100]
    second = write_tree(store, [two], block_size=1000)
    assert [b.locator.size for b in second.blocks] == [42, 1000, 1000, 500]
    assert [b.new for b in second.blocks] == [True, False, False, False]
    assert CollectionReader(store, second.manifest).read_file("big") == big


class FailingStore(LocalBlockStore):
    """A real local store whose disk fills up after ``ok`` blocks."""

    def __init__(self, volume: LocalVolume, ok: int) -> None:
        super().__init__(volume)
        self.ok = ok

    def put(self, data: bytes | bytearray | memoryview, *, md5: str | None = None) -> StoredBlock:
        with self._lock:
            self.ok -= 1
            full = self.ok < 0
        if full:
            raise OSError(28, "No space left on device")
        return super().put(data, md5=md5)


@pytest.mark.parametrize("ok", [0, 1, 2, 5])
def test_a_failed_block_write_ends_the_put_with_its_error(tmp_path: Path, ok: int) -> None:
    """Whichever block fails, also one a spanning file's MD5 waits for, the put
    stops with that error instead of hanging or storing a collection."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_bytes(os.urandom(5000))
    (tmp_path / "d" / "b").write_bytes(os.urandom(300))
    (tmp_path / "d" / "c").write_bytes(os.urandom(2500))
    store = FailingStore(LocalVolume(tmp_path / "vol"), ok)
    with pytest.raises(OSError, match="No space left"):
        write_tree(store, [tmp_path / "d"], block_size=1000, workers=2)


def test_a_small_file_gone_after_the_scan_is_named(tmp_path: Path, store: LocalBlockStore) -> None:
    """Small files are read ahead on other threads; an error still names its
    file and ends the put where that file comes."""
    root = tmp_path / "d"
    root.mkdir()
    for i in range(300):
        (root / f"f{i:03}").write_bytes(os.urandom(i))
    tree = scan_paths([root])
    (root / "f200").unlink()
    with pytest.raises(NotFoundError, match=f"cannot read {root / 'f200'}"):
        write_tree(store, tree)


@pytest.mark.parametrize("grown", [150, SMALL_FILE + 1])
def test_a_small_file_grown_after_the_scan_is_a_change(
    tmp_path: Path, store: LocalBlockStore, grown: int
) -> None:
    root = tmp_path / "d"
    root.mkdir()
    for i in range(100):
        (root / f"f{i:03}").write_bytes(os.urandom(100))
    tree = scan_paths([root])
    (root / "f050").write_bytes(os.urandom(grown))
    with pytest.raises(FileChangedError, match=f"from 100 to {grown} bytes before it was read"):
        write_tree(store, tree)
    result = write_tree(store, tree, allow_changing=True, block_size=4096)
    assert result.changed == ("f050",)
    assert result.file_md5s == _md5s(root)
    reader = CollectionReader(store, result.manifest)
    for path in result.file_md5s:
        assert reader.read_file(path) == (root / path).read_bytes()


@pytest.mark.parametrize("block_size", [7, 64, 1000, 4096, 64 * 1024 * 1024])
def test_the_writers_manifest_is_the_normalized_form(
    tmp_path: Path, store: LocalBlockStore, block_size: int
) -> None:
    """The writer's manifest is taken as normalized without normalizing it
    when its layout allows: it must be what normalizing its files gives."""
    root = make_tree(tmp_path / "tree")
    same = os.urandom(3000)
    (root / "twins").mkdir()  # the same blocks twice in one stream
    (root / "twins" / "a").write_bytes(same)
    (root / "twins" / "b").write_bytes(same)
    (root / "tail").mkdir()  # empty files after a file of a block or more
    (root / "tail" / "big").write_bytes(os.urandom(5000))
    (root / "tail" / "y-empty").write_bytes(b"")
    (root / "tail" / "z-empty").write_bytes(b"")
    (root / "empties").mkdir()
    for name in ("e1", "e2"):
        (root / "empties" / name).write_bytes(b"")
    result = write_tree(store, [root], block_size=block_size, workers=2)
    manifest = result.manifest
    files = manifest.files()
    normal = Manifest(normalized_streams(files.values(), manifest.empty_directories()))
    assert manifest.format() == normal.format()
    assert manifest.pdh == normal.pdh == Manifest.parse(manifest.format()).pdh
    assert manifest.size == sum(f.size for f in files.values()) == normal.size
    assert manifest.file_count() == len(files) == normal.file_count()
    assert manifest.file_paths() == set(files) == set(normal.files())


def _drop_from_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # only clean pages can be dropped
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _share_cached(path: Path) -> float:
    """The share of a file's pages in the page cache (mincore(2))."""
    size = path.stat().st_size
    with path.open("rb") as f:
        pages = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)  # writable: has an address
    start = ctypes.c_char.from_buffer(pages)
    count = -(-size // mmap.PAGESIZE)
    vec = (ctypes.c_ubyte * count)()
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mincore(ctypes.c_void_p(ctypes.addressof(start)), ctypes.c_size_t(size), vec) == 0
    del start
    pages.close()
    return sum(v & 1 for v in vec) / count


@pytest.mark.parametrize("block_size", [1 << 20, (1 << 20) + 512, 64 * 1024 * 1024])
def test_files_not_in_the_page_cache_are_read_directly(
    tmp_path: Path, store: LocalBlockStore, block_size: int
) -> None:
    """A big file read from the disk lands in the block buffers with O_DIRECT
    (not through the page cache, which it leaves as it was); its bytes,
    blocks and digests are those of an ordinary read."""
    root = tmp_path / "cold"
    root.mkdir()
    contents = {
        "a-big": os.urandom(3 * (1 << 20) + 123),  # first: starts the block, at 0
        "b-exact": os.urandom(2 << 20),
        "c-small": b"x" * 100,
    }
    for name, data in contents.items():
        (root / name).write_bytes(data)
        _drop_from_page_cache(root / name)
    assert _share_cached(root / "a-big") < 0.1
    result = write_tree(store, [root], block_size=block_size)
    assert result.file_md5s == {n: hashlib.md5(d).hexdigest() for n, d in contents.items()}
    if block_size % 4096 == 0:
        assert _share_cached(root / "a-big") < 0.1  # read around the cache
    reader = CollectionReader(store, result.manifest)
    for name, data in contents.items():
        assert reader.read_file(name) == data
    plain = LocalBlockStore(LocalVolume(tmp_path / "plain"))
    assert write_tree(plain, [root], block_size=block_size).pdh == result.pdh  # cached now


def test_a_one_pass_read_of_a_big_block_checks_its_mapped_pages(
    tmp_path: Path, store: LocalBlockStore
) -> None:
    """A one-pass read maps a big block's pages instead of copying them; they
    are checked all the same, and a damaged copy is moved aside."""
    root = tmp_path / "d"
    root.mkdir()
    data = os.urandom(3 << 20)
    (root / "f").write_bytes(data)
    result = write_tree(store, [root])
    (block,) = result.blocks
    assert isinstance(store.get(block.locator, cache=False), memoryview)  # mapped, not read
    assert CollectionReader(store, result.manifest, one_pass=True).read_file("f") == data
    path = store.volume.path_for(block.locator.md5)
    damaged = bytearray(path.read_bytes())
    damaged[len(damaged) // 2] ^= 1
    path.write_bytes(damaged)
    with pytest.raises(CorruptDataError, match=block.locator.md5):
        CollectionReader(store, result.manifest, one_pass=True).read_file("f")
    assert not path.exists()  # moved aside: the next put stores it anew


def test_a_range_of_a_file_is_stored_as_the_block_of_its_bytes(
    tmp_path: Path, store: LocalBlockStore
) -> None:
    """``put_range`` (a put's manifest text, a piece at a time) stores what
    ``put`` of the same bytes stores; a file shorter than the range stores
    nothing."""
    data = random.Random(4).randbytes(3_500_000)
    path = tmp_path / "text"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        loc = store.put_range(fd, 1000, 2_600_001)  # over several pieces, not a whole one
        want = data[1000:2_601_001]
        assert loc == Locator(hashlib.md5(want).hexdigest(), len(want))
        assert bytes(store.get(loc, cache=False)) == want
        assert store.put_range(fd, 1000, 2_600_001) == loc  # already stored: the same
        assert store.put_range(fd, 5, 0) == Locator(hashlib.md5(b"").hexdigest(), 0)
        with pytest.raises(WarehouseError, match="cannot store a block"):
            store.put_range(fd, 3_000_000, 600_000)  # past the end of the file
        assert sorted(p.name for p in store.volume.root.rglob("*") if p.is_file()) == [loc.md5]
    finally:
        os.close(fd)


def _big_blocks(tmp_path: Path, store: LocalBlockStore) -> tuple[dict[str, bytes], Any]:
    """Files of many 1 MiB blocks (big enough to be mapped), small files and
    an empty one between them, stored."""
    root = tmp_path / "big"
    root.mkdir()
    rnd = random.Random(3)
    contents = {
        "a": rnd.randbytes(12 << 20),
        "b-small": b"tiny",
        "c-empty": b"",
        "d": rnd.randbytes((9 << 20) + 12345),
        "e": rnd.randbytes(1 << 20),
    }
    for name, data in contents.items():
        (root / name).write_bytes(data)
    return contents, write_tree(store, [root], block_size=1 << 20)


def test_big_blocks_checked_ahead_together_are_the_bytes_checked(
    tmp_path: Path, store: LocalBlockStore
) -> None:
    """``get_ahead`` checks big blocks at once and holds their files open:
    each call gives the checked bytes even if the file is gone since."""
    if not store.checks_ahead():
        pytest.skip("the native library is not used here: blocks are checked one by one")
    _, result = _big_blocks(tmp_path, store)
    locators = [b.locator for b in result.blocks if b.locator.size >= 1 << 20]
    assert len(locators) > 16  # more than one batch of lanes
    calls = store.get_ahead(locators)
    for loc in locators:
        store.volume.path_for(loc.md5).unlink()
    for loc, call in zip(locators, calls, strict=True):
        data = call()
        assert isinstance(data, memoryview) and hashlib.md5(data).hexdigest() == loc.md5


def test_blocks_checked_ahead_are_read_where_a_mapping_cannot_be_faulted_in(
    tmp_path: Path, store: LocalBlockStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel without MADV_POPULATE_READ (before 5.14) refuses the advice
    with EINVAL: the blocks checked ahead are then read from their open
    files, and the get goes on (main's reads fell back the same way)."""
    import warehouse.blocks.volume as volume_module

    if not store.checks_ahead():
        pytest.skip("the native library is not used here: blocks are checked one by one")
    contents, result = _big_blocks(tmp_path, store)
    monkeypatch.setattr(volume_module, "_MADV_POPULATE_READ", 0x7FFF)  # no such advice
    monkeypatch.setattr(LocalVolume, "can_map", True)  # set back after the test
    out = tmp_path / "out"
    extract(CollectionReader(store, result.manifest, one_pass=True), out)
    assert tree_files(out) == contents
    assert not LocalVolume.can_map  # found out once, then not tried again


@pytest.mark.parametrize("damage", ["flipped", "missing", "short"])
def test_a_one_pass_read_of_many_big_blocks_checks_each(
    tmp_path: Path, store: LocalBlockStore, damage: str
) -> None:
    """A get reads batches of big blocks checked together; every byte is as
    stored, and a bad block among them fails it with the error a block read
    alone gives (naming the file; a damaged copy moved aside)."""
    contents, result = _big_blocks(tmp_path, store)
    out = tmp_path / "out"
    extract(CollectionReader(store, result.manifest, one_pass=True), out)
    assert tree_files(out) == contents
    (entry,) = [e for p, e in result.manifest.files_view().items() if p == "d"]
    bad = entry.pieces[4].locator
    path = store.volume.path_for(bad.md5)
    if damage == "flipped":
        data = bytearray(path.read_bytes())
        data[1000] ^= 1
        path.write_bytes(data)
    elif damage == "missing":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:-1])
    seen: list[str] = []
    with pytest.raises(CorruptDataError, match=f"{bad.md5}.*it holds data of: d"):
        extract(
            CollectionReader(store, result.manifest, one_pass=True),
            tmp_path / "again",
            on_file=lambda f: seen.append(f.path),
        )
    assert seen == ["a", "b-small", "c-empty"]  # the files before it, whole
    assert not path.exists()  # a damaged copy moved aside; a missing one still missing


@pytest.mark.parametrize("parsed", [False, True])
def test_a_sub_path_get_from_the_stored_text_writes_only_its_files(
    tmp_path: Path, store: LocalBlockStore, parsed: bool
) -> None:
    """Whether or not the reader has parsed its manifest already."""
    root = tmp_path / "t"
    for rel in ("a/x", "a/y", "b/z", "top"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(rel.encode())
    text = write_tree(store, [root]).manifest.portable_text().encode()
    reader = CollectionReader(store, None, normal_text=text, one_pass=True)
    if parsed:
        assert len(reader.files) == 4
    out = tmp_path / "out"
    done = extract(reader, out, subpath="a")
    assert sorted(f.path for f in done) == ["x", "y"]
    assert tree_files(out) == {"x": b"a/x", "y": b"a/y"}
