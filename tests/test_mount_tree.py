"""The mount's tree (and WebDAV's) without FUSE: a directory is listed from
its own stream, the files held stay within ``ENTRIES_HELD`` whatever the
collection's size, and an inode the kernel forgot is dropped
(docs/mount.md "Large collections")."""

from __future__ import annotations

from pathlib import Path

import pytest

from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import NotFoundError
from warehouse.manifest.outline import Outline
from warehouse.mount import _tree
from warehouse.mount._tree import ROOT, Node, Tree


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
    names = [n for n, _, _ in tree.children(top)]
    assert names == [*(f"d{d:03}" for d in range(20)), "empty", "top.txt"]
    seen = 0
    for d in range(20):
        node, entry = tree.lookup(top, f"d{d:03}")
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


def test_a_forgotten_inode_is_dropped(wh: EmbeddedWarehouse, tmp_path: Path) -> None:
    pdh = _put_dirs(wh, tmp_path / "c", dirs=1, files=3)
    tree = Tree(wh)
    by_id, _ = tree.lookup(ROOT, "by_id")
    before = tree.known_inodes()
    node = Node("file", "id", pdh, "d000/f001.txt")
    ino = tree.inode(node)
    tree.told(ino)
    tree.told(ino)
    tree.forget(ino, 1)
    assert tree.node(ino) == node
    tree.forget(ino, 1)
    with pytest.raises(NotFoundError):
        tree.node(ino)
    assert tree.known_inodes() == before
    assert tree.inode(node) != ino  # a new number, never the old one again
    assert by_id.kind == "by_id"


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
