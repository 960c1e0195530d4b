"""The mount's tree (and WebDAV's) without FUSE: a directory is listed from
its own stream, the files held stay within ``ENTRIES_HELD`` whatever the
collection's size, and an inode says where it lies: no table of inodes
grows with the files the kernel was told of (docs/mount.md "Large
collections")."""

from __future__ import annotations

from pathlib import Path

import pytest

from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import NotFoundError
from warehouse.manifest.outline import Outline
from warehouse.mount import _tree
from warehouse.mount._tree import Node, Tree


def _put_dirs(wh: EmbeddedWarehouse, root: Path, dirs: int, files: int) -> str:
    for d in range(dirs):
        sub = root / f"d{d:03}"
        sub.mkdir(parents=True)
        for f in range(files):
            (sub / f"f{f:03}.txt").write_text(f"{d}/{f}\n")
    (root / "empty").mkdir()
    (root / "top.txt").write_text("top\n")
    return wh.put(root, name="many").pdh


def test_listings_come_from_streams_and_held_files_stay_bounded(
    wh: EmbeddedWarehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_tree, "ENTRIES_HELD", 100)
    pdh = _put_dirs(wh, tmp_path / "many", dirs=20, files=30)
    tree = Tree(wh)
    top = tree.inode(Node("dir", "id", pdh, ""))
    names = [n for n, _, _, _ in tree.children(top)]
    assert names == [*(f"d{d:03}" for d in range(20)), "empty", "top.txt"]
    seen = 0
    for d in range(20):
        _, node, entry = tree.lookup(top, f"d{d:03}")
        assert entry is None and node.kind == "dir"
        children = tree.children_of(node)
        assert [n for n, _, _ in children] == [f"f{f:03}.txt" for f in range(30)]
        for name, child, e in children:
            assert e is not None and e.size == len(f"{d}/{name[1:4].lstrip('0') or '0'}\n")
            assert tree.entry_of(child) == e
            seen += 1
        # Never more than the bound and the directory in use.
        assert tree._held <= 100 + 30
    assert seen == 600
    assert tree.children_of(Node("dir", "id", pdh, "empty")) == []
    with pytest.raises(NotFoundError):
        tree.lookup(top, "nothing")


def test_inodes_say_where_they_lie_and_no_table_of_them_grows(
    wh: EmbeddedWarehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One collection held and a few files: everything is made again from the
    # manifest when asked, and gives the same inodes.
    monkeypatch.setattr(_tree, "COLLECTIONS_HELD", 1)
    monkeypatch.setattr(_tree, "ENTRIES_HELD", 10)
    pdh = _put_dirs(wh, tmp_path / "c", dirs=5, files=40)
    other = wh.put(tmp_path / "c" / "d000", name="other").pdh
    tree = Tree(wh)
    top = tree.inode(Node("dir", "id", pdh, ""))
    before = tree.table_size()
    seen: dict[int, Node] = {}
    for d in range(5):
        ino, node, _ = tree.lookup(top, f"d{d:03}")
        for name, child_ino, child, entry in tree.children(ino):
            assert entry is not None and child.path == f"d{d:03}/{name}"
            assert tree.lookup(ino, name)[0] == child_ino
            seen[child_ino] = child
        seen[ino] = node
        tree.collection(other)  # pushes the first out
    assert len(seen) == 5 * 41
    assert tree.table_size() == before  # nothing kept per file or directory
    for ino, node in seen.items():
        assert tree.node(ino) == node
        assert tree.inode(node) == ino
    with pytest.raises(NotFoundError):
        tree.node(max(seen) + 1000)
    # The same collection by a name is another directory (its own inodes).
    by_name, _ = tree.lookup_in(Node("by_name"), "many")
    assert tree.inode(by_name) != top and tree.node(tree.inode(by_name)) == by_name


@pytest.mark.parametrize("piece", [1, 7, 1 << 20])
def test_an_outline_made_in_pieces_equals_one_made_whole(
    wh: EmbeddedWarehouse, tmp_path: Path, piece: int
) -> None:
    pdh = _put_dirs(wh, tmp_path / "o", dirs=3, files=4)
    text = wh.manifest_text(pdh)
    assert text is not None
    whole = Outline(text)
    parts = Outline.of_pieces(text[i : i + piece] for i in range(0, len(text), piece))
    assert vars(parts) == vars(whole)
