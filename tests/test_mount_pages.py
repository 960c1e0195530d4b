"""A large directory of the mount's tree (and WebDAV's) read in pages of
its stream, without FUSE: the same entries, names, inodes and listings as
the directory made whole, from a sparse index of it (docs/mount.md "Large
collections"); and an outline made of long lines a piece at a time equals
one made whole."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import NotFoundError
from warehouse.manifest import Manifest
from warehouse.manifest import outline as outline_module
from warehouse.manifest import pages as _pages
from warehouse.manifest.outline import Outline
from warehouse.manifest.pages import Files, PagedFiles
from warehouse.mount import _collection, _tree
from warehouse.mount._collection import Dropped
from warehouse.mount._tree import Node, Tree

_LOC = "0123456789abcdef0123456789abcdef+67108864"


def _awkward(wh: EmbeddedWarehouse, files: int, name: str = "flat") -> tuple[str, Manifest]:
    """A root of ``files`` files over ten small blocks, among them names
    with escaped spaces and colons, files of two segments, files across
    blocks and empty files, beside two subdirectories."""
    blocks = [os.urandom(1000 + i) for i in range(10)]
    locs = [str(wh.store.put(b).locator.key) for b in blocks]
    wh.store.flush()
    total = sum(map(len, blocks))
    segments = []
    pos = 0
    for i in range(files):
        name = f"f{i:05}" + (" x:y" if i % 5 == 0 else "")
        escaped = name.replace(" ", "\\040").replace(":", "\\072")
        length = (i * 7) % 300
        if pos + length > total:
            pos = 0
        if i % 11 == 0 and length > 2:
            other = (pos + 5000) % (total - length)
            segments += [
                f"{pos}:{length // 2}:{escaped}",
                f"{other}:{length - length // 2}:{escaped}",
            ]
        else:
            segments.append(f"{pos}:{length}:{escaped}")
        pos += length
    text = (
        f". {' '.join(locs)} {' '.join(segments)}\n"
        f"./f00003a {locs[0]} 0:3:a 3:4:b\n./zz {locs[1]} 0:5:c\n"
    )
    manifest = Manifest.parse(text).normalized()
    normal = manifest.portable_text().encode()
    pdh = wh.put_manifest_file(io.BytesIO(normal), 1 << 30, name=name).pdh
    return pdh, manifest


def test_a_paged_directory_equals_it_whole(
    wh: EmbeddedWarehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    pdh, manifest = _awkward(wh, 2000)
    whole_tree = Tree(wh)
    whole_top = whole_tree.inode(Node("dir", "id", pdh, ""))
    whole = whole_tree.children(whole_top)
    assert isinstance(whole_tree.files(pdh, ""), Files)
    # Pages of 7 files, of 3 blocks: every edge is met many times.
    monkeypatch.setattr(_pages, "PAGE", 7)
    monkeypatch.setattr(_pages, "LOCATOR_PAGE", 3)
    monkeypatch.setattr(_pages, "PAGES_HELD", 2)
    monkeypatch.setattr(_tree, "PAGED_FROM", 100)
    tree = Tree(wh)
    top = tree.inode(Node("dir", "id", pdh, ""))
    paged = tree.children(top)
    files = tree.files(pdh, "")
    assert isinstance(files, PagedFiles) and files.count == 2000
    assert len(files.firsts) == 2000 // 7 + 1 and len(files._pages) <= 2
    assert paged == whole
    expected = {p: e for p, e in manifest.files().items() if "/" not in p}
    assert {n.path: e for _, _, n, e in paged if e is not None} == expected
    assert [c[0] for c in paged][:5] == ["f00000 x:y", "f00001", "f00002", "f00003", "f00003a"]
    for name, ino, node, entry in paged[::13]:
        assert tree.lookup(top, name) == (ino, node, entry)
        assert tree.node(ino) == node and tree.inode(node) == ino
        assert tree.walk(["by_id", pdh, name]) == (node, entry)
    for absent in ["a", "f00000", "f00001 ", "f99999", "zzz"]:
        with pytest.raises(NotFoundError):
            tree.lookup(top, absent)
    with pytest.raises(NotFoundError):
        tree.node(paged[-1][1] + 5000)
    # A listing goes on from any offset it gave, in batches of any size.
    listing = tree.listing(top)
    for batch in [1, 6, 7, 8, 500]:
        offset, seen = 0, []
        while found := listing.entries(offset, batch):
            seen += found
            offset = found[-1][4]
        assert [c[:4] for c in seen] == whole
    middle = listing.entries(0, 1000)[733][4]
    assert listing.entries(middle, 3) == listing.entries(0, 1000)[734:737]
    assert tree.children_of(Node("dir", "id", pdh, "")) == [(n, c, e) for n, _, c, e in whole]


def test_a_paged_directory_is_read_again_after_its_collection_is_dropped(
    wh: EmbeddedWarehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its pages are read through whichever copy of the text the tree holds.
    pdh, manifest = _awkward(wh, 500)
    other, _ = _awkward(wh, 50, "other")
    monkeypatch.setattr(_pages, "PAGE", 5)
    monkeypatch.setattr(_pages, "PAGES_HELD", 1)
    monkeypatch.setattr(_tree, "PAGED_FROM", 100)
    monkeypatch.setattr(_tree, "COLLECTIONS_HELD", 1)
    monkeypatch.setattr(_collection, "_TEXT_HELD", 0)  # texts stay in scratch files
    tree = Tree(wh)
    top = tree.inode(Node("dir", "id", pdh, ""))
    listing = tree.listing(top)
    first = listing.entries(0, 10)
    dropped = tree.collection(pdh)
    tree.collection(other)  # drops (and closes) the first
    with pytest.raises(Dropped):
        dropped.read(0, 10)
    later = listing.entries(first[-1][4], 10)
    assert tree.collection(pdh) is not dropped
    assert [c[0] for c in first + later] == sorted(
        [p for p in manifest.files() if "/" not in p] + ["f00003a", "zz"]
    )[:20]


def test_a_directory_not_in_name_order_is_read_whole(
    wh: EmbeddedWarehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_tree, "PAGED_FROM", 2)
    block = wh.store.put(b"abcdef").locator.key
    collection = _tree.Collection("x", f". {block} 0:1:b 1:1:a 2:1:c\n".encode())
    assert PagedFiles.of_stream("", collection.read, (0, len(collection.text) - 1)) is None
    ordered = _tree.Collection("y", f". {block} 0:1:a 1:1:b 2:1:c\n".encode())
    paged = PagedFiles.of_stream("", ordered.read, (0, len(ordered.text) - 1))
    assert paged is not None and [n for n, _ in paged.run(0, 10)] == ["a", "b", "c"]


def test_long_lines_make_the_outline_they_make_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [
        f". {_LOC} "
        + " ".join(f"{i}:{i % 3}:f{i:05}" for i in range(500))
        + " 600:5:g\\040x 9:5:g\\040x",
        f"./a {_LOC} 0:1:x",
        f"./a/b {_LOC} " + " ".join(f"{i}:7:n{i:04}" for i in range(300)),
        "./e d41d8cd98f00b204e9800998ecf8427e+0 0:0:\\056",
        f"./z {_LOC} 0:3:q",
    ]
    text = ("\n".join(lines) + "\n").encode()
    whole = vars(Outline(text)).copy()
    assert whole["counts"] == {"": 803, "a": 301, "a/b": 300, "e": 0, "z": 1}
    assert whole["sizes"][""] == 2613 and "e" in whole["markers"]
    for long in [100, 60]:
        monkeypatch.setattr(outline_module, "_LONG_LINE", long)
        assert vars(Outline(text)) == whole, long
        for piece in [1, 5, 64, 1 << 20]:
            parts = Outline.of_pieces(text[i : i + piece] for i in range(0, len(text), piece))
            assert vars(parts) == whole, (long, piece)


def test_paged_files_of_a_real_put(wh: EmbeddedWarehouse, tmp_path: Path) -> None:
    # A flat directory put as a user puts it, over the default page sizes.
    root = tmp_path / "flat"
    root.mkdir()
    for i in range(700):
        (root / f"n{i:04}.txt").write_text(f"{i}\n" * (i % 9))
    pdh = wh.put(root, name="put").pdh
    collection = Tree(wh).collection(pdh)
    span = collection.outline.stream_span("")
    assert span is not None
    paged = PagedFiles.of_stream("", collection.read, span)
    assert paged is not None and paged.count == 700
    whole = collection.files("")
    assert paged.run(0, 1000) == whole.run(0, 1000)
    assert paged.find("n0699.txt") == whole.find("n0699.txt") == (699, whole.entries["n0699.txt"])
