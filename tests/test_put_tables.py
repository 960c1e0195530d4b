"""The compact tables a put holds for every file: the scanned names and
sizes (``Files``) and the digests the writer records (``FileDigests``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from warehouse.blocks.store import LocalBlockStore
from warehouse.blocks.volume import LocalVolume
from warehouse.collection.digests import FileDigests
from warehouse.collection.scan import Files, scan_paths
from warehouse.collection.writer import write_tree


def test_files_keep_paths_only_where_they_are_not_prefix_and_name() -> None:
    files = Files("/src/d/")
    files.append("a", "/src/d/a", 1)
    files.append("b", "/src/d/b", 2)
    assert list(files) == [("a", "/src/d/a", 1), ("b", "/src/d/b", 2)]
    files.append("c", "/elsewhere/c", 3)  # a file named on the command line
    files.append("0", "/src/d/0", 0)
    files.sort()
    assert list(files) == [
        ("0", "/src/d/0", 0),
        ("a", "/src/d/a", 1),
        ("b", "/src/d/b", 2),
        ("c", "/elsewhere/c", 3),
    ]
    assert [files.path(i) for i in range(4)] == ["/src/d/0", "/src/d/a", "/src/d/b", "/elsewhere/c"]
    assert files.total_size == 6 and len(files) == 4
    assert list(files.only(lambda n: n in ("a", "c"))) == [
        ("a", "/src/d/a", 1),
        ("c", "/elsewhere/c", 3),
    ]


def test_digests_are_found_by_path_and_unset_ones_are_not_listed() -> None:
    d = FileDigests(4)
    root = d.add_directory("", ["x", "y"])
    sub = d.add_directory("s/t", ["a", "b"])
    assert (root, sub) == (0, 2)
    md5 = hashlib.md5(b"x").digest()
    d.set(0, md5)
    d.set(3, hashlib.md5(b"b").digest())
    assert dict(d) == {"x": md5.hex(), "s/t/b": hashlib.md5(b"b").hexdigest()}
    assert len(d) == 2
    assert "y" not in d and "s/t/a" not in d and "s/t" not in d and "nope/x" not in d
    assert d.get("s/t/zz") is None
    with pytest.raises(KeyError):
        d["y"]
    with pytest.raises(ValueError, match="not sorted"):
        FileDigests(2).add_directory("", ["b", "a"])
    with pytest.raises(ValueError, match="more files"):
        FileDigests(1).add_directory("", ["a", "b"])


def test_a_put_of_paths_from_several_places_lists_every_files_digest(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (one / "b.txt").write_bytes(b"bee\n")
    (two / "a.txt").write_bytes(b"")
    (two / "sub").mkdir()
    (two / "sub" / "c").write_bytes(b"sea" * 1000)
    tree = scan_paths([one / "b.txt", two / "a.txt", two / "sub"])
    assert list(tree.files) == [
        ("a.txt", str(two / "a.txt"), 0),
        ("b.txt", str(one / "b.txt"), 4),
    ]
    result = write_tree(LocalBlockStore(LocalVolume(tmp_path / "vol")), tree)
    assert dict(result.file_md5s) == {
        "a.txt": hashlib.md5(b"").hexdigest(),
        "b.txt": hashlib.md5(b"bee\n").hexdigest(),
        "sub/c": hashlib.md5(b"sea" * 1000).hexdigest(),
    }
