"""The collection writer and reader over a real local block store."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from conftest import make_tree
from warehouse.blocks.cache import BlockCache
from warehouse.blocks.store import LocalBlockStore
from warehouse.blocks.volume import LocalVolume
from warehouse.collection.reader import CollectionReader
from warehouse.collection.writer import write_tree
from warehouse.errors import CorruptDataError, NotFoundError, WarehouseError
from warehouse.manifest import Manifest


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

    import warehouse.collection.writer as writer

    writer.bytearray = Counting  # type: ignore[attr-defined]
    try:
        result = write_tree(store, [tmp_path / "d"], block_size=1000, workers=2)
    finally:
        del writer.bytearray  # type: ignore[attr-defined]
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
