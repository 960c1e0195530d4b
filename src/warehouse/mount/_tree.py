"""The mounted tree as plain data: inodes, directories and files, with no FUSE.

``Tree`` answers what the FUSE layer (and the WebDAV gateway) asks (look a
name up in a directory, list a directory, where a file's bytes are) from
manifests and names only; it never reads a block. Its methods that ask the
warehouse (a manifest, a name) block, so the FUSE layer calls them on a
worker thread; the tables they change are guarded by one lock.

A collection is held as its outline (``manifest/outline.py``: its
directories and where each one's stream lies in the text, nothing per file)
over a scratch copy of its text on disk; a directory's files are made from
its one stream when it is first used, and kept among the last used within
``ENTRIES_HELD`` files. So a collection of a million files costs its
directories and the directories in use, not its files (docs/mount.md).

The layout (docs/mount.md)::

    by_id/<PDH>/...     a collection by its portable data hash (not listed)
    by_name/<name>/...  a name's current collection; a name with "/" in it
                        (``lab/run42``) is a folder ``lab`` holding ``run42``

Every name shown here comes from a manifest or the catalog and is only ever
a key in these tables, never a path on the local disk; the kernel refuses
``/`` and NUL in names and resolves ``.`` and ``..`` itself.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from warehouse import catalog
from warehouse.blocks.store import BlockStore
from warehouse.collection.storedtext import StoredText
from warehouse.errors import NotFoundError, WarehouseError
from warehouse.keys import is_pdh
from warehouse.manifest import FileEntry, Manifest
from warehouse.manifest.outline import Outline

__all__ = ["ROOT", "Collection", "Node", "Source", "Tree"]

ROOT = 1
# How long a name is taken to hold the PDH last read for it: a name moved
# shows its new collection after at most this long.
NAME_TTL = 2.0
# Collections whose outlines are held at once; one more drops the least
# recently used (made again from its manifest when next asked for).
COLLECTIONS_HELD = 16
# Files of directories in use whose entries are held (about 400 bytes
# each): past it the least recently used directories are dropped. One
# directory of more files than this is held whole while it is used.
ENTRIES_HELD = 50_000
# A text this short is held in memory rather than read back from its scratch copy.
_TEXT_HELD = 1 << 20
# Where an inode inside a collection keeps its parts (``Tree.inode``).
_SLOT_SHIFT = 47
_DIR_SHIFT = 24
_DIR_MASK = (1 << 23) - 1
_FILE_MASK = (1 << 24) - 1


class Source(Protocol):
    """What the tree reads: a ``Warehouse`` (the mount), or one user's view
    of a controller's catalog (the WebDAV gateway). Each refuses (as not
    found) what its user may not read."""

    @property
    def store(self) -> BlockStore: ...

    def stored_text(self, key: str) -> bytes | StoredText | None: ...

    def manifest(self, key: str) -> Manifest: ...

    def get_name(self, name: str) -> catalog.NameRecord: ...

    def list_names(self, prefix: str = "") -> list[catalog.NameRecord]: ...


@dataclass(frozen=True, slots=True)
class Node:
    """What an inode is. ``kind``: "root", "by_id", "by_name", "folder" (a
    prefix of names), "dir" or "file" (inside a collection)."""

    kind: str
    # Where a collection node hangs: "id" under by_id, else the name it came
    # through (two inodes for one directory reached two ways: the kernel
    # refuses a directory with two parents).
    root: str = ""
    pdh: str = ""
    path: str = ""  # inside the collection, or the name prefix of a folder

    @property
    def is_dir(self) -> bool:
        return self.kind != "file"


class Collection:
    """One collection's outline and its text (held, or a scratch copy)."""

    def __init__(self, pdh: str, text: bytes | StoredText) -> None:
        self.pdh = pdh
        if isinstance(text, StoredText):
            self.outline = Outline.of_pieces(text.pieces(1 << 20))
            if text.size <= _TEXT_HELD:
                held = b"".join(text.pieces(_TEXT_HELD))
                text.close()
                text = held
        else:
            self.outline = Outline(text)
        self.text: bytes | StoredText = text
        # Directories numbered in text order: the same numbers each time the
        # outline is made again from the same text (they are in inodes).
        self.dirs = list(self.outline.sizes)
        self.dir_index = {d: i for i, d in enumerate(self.dirs)}

    def stream(self, directory: str) -> bytes | None:
        """The text of directory ``directory``'s own stream (None: it has no file)."""
        span = self.outline.stream_span(directory)
        if span is None:
            return None
        start, end = span
        if isinstance(self.text, StoredText):
            return b"".join(self.text.pieces(1 << 20, start, end))
        return self.text[start:end]

    def files(self, directory: str) -> Files:
        """The files of directory ``directory`` (not its subdirectories)."""
        line = self.stream(directory)
        if line is None:
            return Files([], {})
        cut = len(directory) + 1 if directory else 0
        entries = {p[cut:]: e for p, e in Manifest.parse(line + b"\n").files_view().items()}
        # Normalized text lists a stream's files in name order already.
        return Files(sorted(entries), entries)

    def close(self) -> None:
        if isinstance(self.text, StoredText):
            self.text.close()


@dataclass(frozen=True, slots=True)
class Files:
    """One directory's files: their names in order, and each one's entry."""

    names: list[str]
    entries: dict[str, FileEntry]

    def index(self, name: str) -> int:
        return bisect.bisect_left(self.names, name)


class Tree:
    def __init__(self, warehouse: Source) -> None:
        self.warehouse = warehouse
        self._lock = threading.Lock()
        # Inodes outside collections (the root, by_id, by_name, folders of
        # names): few, numbered as met and kept.
        self._next = itertools.count(ROOT + 1)
        self._table: dict[int, Node] = {ROOT: Node("root")}
        self._numbers: dict[Node, int] = {Node("root"): ROOT}
        # Each (root, pdh) met, numbered from 1: the slot in its inodes.
        self._slots: list[tuple[str, str]] = [("", "")]
        self._slot_of: dict[tuple[str, str], int] = {}
        self._collections: OrderedDict[str, Collection] = OrderedDict()
        self._making: dict[str, threading.Lock] = {}
        # (pdh, directory) -> its files; ``_held`` counts them.
        self._dirs: OrderedDict[tuple[str, str], Files] = OrderedDict()
        self._held = 0
        self._names: dict[str, tuple[float, str]] = {}  # name -> (when read, pdh)

    # -- inodes ---------------------------------------------------------------
    #
    # An inode inside a collection says where it lies, so that no table of
    # every inode the kernel was told of is kept (it forgets them only under
    # memory pressure: a find over a million files would keep a million):
    # bits 47-62 the slot of its (root, pdh), bits 24-46 its directory's
    # number in the outline, bits 0-23 one more than the file's place in its
    # directory's name order (0: the directory itself).

    def _slot(self, root: str, pdh: str) -> int:
        with self._lock:
            slot = self._slot_of.get((root, pdh))
            if slot is None:
                slot = len(self._slots)
                if slot >= 1 << 16:
                    raise WarehouseError("the mount met too many collections: mount it again")
                self._slots.append((root, pdh))
                self._slot_of[(root, pdh)] = slot
            return slot

    def _in_collection(self, slot: int, d: int, f: int) -> int:
        if d > _DIR_MASK or f > _FILE_MASK:
            raise WarehouseError("too many directories or files in one for the mount's inodes")
        return slot << _SLOT_SHIFT | d << _DIR_SHIFT | f

    def inode(self, node: Node) -> int:
        """``node``'s inode: the same each time it is asked for."""
        if node.kind in ("dir", "file"):
            slot = self._slot(node.root, node.pdh)
            if node.kind == "dir" and not node.path:
                return self._in_collection(slot, 0, 0)  # the root is an outline's first
            collection = self.collection(node.pdh)
            if node.kind == "dir":
                return self._in_collection(slot, collection.dir_index[node.path], 0)
            parent, _, name = node.path.rpartition("/")
            f = self.files(node.pdh, parent).index(name) + 1
            return self._in_collection(slot, collection.dir_index[parent], f)
        with self._lock:
            ino = self._numbers.get(node)
            if ino is None:
                ino = next(self._next)
                self._table[ino] = node
                self._numbers[node] = ino
            return ino

    def node(self, inode: int) -> Node:
        """What ``inode`` is (it may read the collection's manifest again)."""
        if inode < 1 << _SLOT_SHIFT:
            with self._lock:
                found = self._table.get(inode)
            if found is None:
                raise NotFoundError(f"no inode {inode}")
            return found
        slot, d, f = inode >> _SLOT_SHIFT, (inode >> _DIR_SHIFT) & _DIR_MASK, inode & _FILE_MASK
        with self._lock:
            root, pdh = self._slots[slot] if slot < len(self._slots) else ("", "")
        if not pdh:
            raise NotFoundError(f"no inode {inode}")
        dirs = self.collection(pdh).dirs
        if d >= len(dirs):
            raise NotFoundError(f"no inode {inode}")
        directory = dirs[d]
        if not f:
            return Node("dir", root, pdh, directory)
        names = self.files(pdh, directory).names
        if f > len(names):
            raise NotFoundError(f"no inode {inode}")
        name = names[f - 1]
        return Node("file", root, pdh, f"{directory}/{name}" if directory else name)

    def table_size(self) -> int:
        """Inodes kept in a table (those outside collections) and collection slots."""
        with self._lock:
            return len(self._table) + len(self._slots)

    def held(self, inode: int) -> bool:
        """Whether inode ``inode`` lies in a directory whose files are held
        (so that looking in it asks nothing of the warehouse)."""
        if inode < 1 << _SLOT_SHIFT:
            return False
        slot, d = inode >> _SLOT_SHIFT, (inode >> _DIR_SHIFT) & _DIR_MASK
        with self._lock:
            if slot >= len(self._slots):
                return False
            pdh = self._slots[slot][1]
            collection = self._collections.get(pdh)
            if collection is None or d >= len(collection.dirs):
                return False
            return (pdh, collection.dirs[d]) in self._dirs

    # -- collections and names (these ask the warehouse) ----------------------

    def collection(self, pdh: str) -> Collection:
        """Collection ``pdh``'s outline, made from its manifest text once
        (requests for it meanwhile wait for that one) and kept among the last used."""
        with self._lock:
            held = self._collections.get(pdh)
            if held is not None:
                self._collections.move_to_end(pdh)
                return held
            making = self._making.setdefault(pdh, threading.Lock())
        with making:
            with self._lock:
                held = self._collections.get(pdh)
            if held is not None:
                return held
            made = self._make(pdh)
            with self._lock:
                self._making.pop(pdh, None)
                self._collections[pdh] = made
                while len(self._collections) > COLLECTIONS_HELD:
                    _, dropped = self._collections.popitem(last=False)
                    dropped.close()
            return made

    def _make(self, pdh: str) -> Collection:
        text = self.warehouse.stored_text(pdh)
        if text is None:  # stored some other way: normalized here, held
            text = self.warehouse.manifest(pdh).normalized().format().encode()
        try:
            return Collection(pdh, text)
        except BaseException:
            if isinstance(text, StoredText):
                text.close()
            raise

    def files(self, pdh: str, directory: str) -> Files:
        """The files of ``directory`` in collection ``pdh`` by name."""
        key = (pdh, directory)
        with self._lock:
            held = self._dirs.get(key)
            if held is not None:
                self._dirs.move_to_end(key)
                return held
        made = self.collection(pdh).files(directory)
        with self._lock:
            if key not in self._dirs:
                self._dirs[key] = made
                self._held += len(made.names)
                while self._held > ENTRIES_HELD and len(self._dirs) > 1:
                    _, dropped = self._dirs.popitem(last=False)
                    self._held -= len(dropped.names)
        return made

    def name_pdh(self, name: str) -> str:
        now = time.monotonic()
        with self._lock:
            seen = self._names.get(name)
        if seen is not None and now - seen[0] < NAME_TTL:
            return seen[1]
        pdh = self.warehouse.get_name(name).pdh
        with self._lock:
            self._names[name] = (now, pdh)
        return pdh

    def names_under(self, prefix: str) -> list[tuple[str, bool]]:
        """The children of the name folder ``prefix`` ("" for by_name): each
        (component, is a name) — a component that only begins longer names
        is a folder; one that is a name is its collection."""
        start = prefix + "/" if prefix else ""
        children: dict[str, bool] = {}
        now = time.monotonic()
        for record in self.warehouse.list_names(start):
            if not record.name.startswith(start):
                continue
            # The listing says what each name holds: no question per name after it.
            with self._lock:
                self._names[record.name] = (now, record.pdh)
            rest = record.name[len(start) :]
            head, slash, _ = rest.partition("/")
            if not head:
                continue
            children[head] = children.get(head, False) or not slash
        return sorted(children.items())

    # -- what FUSE asks -------------------------------------------------------

    def lookup(self, parent: int, name: str) -> tuple[int, Node, FileEntry | None]:
        """The child ``name`` of directory ``parent``: NotFoundError if none."""
        node, entry = self.lookup_in(self.node(parent), name)
        return self.inode(node), node, entry

    def stat(self, inode: int) -> tuple[Node, FileEntry | None]:
        node = self.node(inode)
        return node, self.entry_of(node) if node.kind == "file" else None

    def lookup_in(self, node: Node, name: str) -> tuple[Node, FileEntry | None]:
        if node.kind == "root":
            if name in ("by_id", "by_name"):
                return Node(name), None
        elif node.kind == "by_id":
            if is_pdh(name):
                self.collection(name)  # NotFoundError (or refused) if it is not readable
                return Node("dir", "id", name, ""), None
        elif node.kind in ("by_name", "folder"):
            full = f"{node.path}/{name}" if node.path else name
            try:
                pdh = self.name_pdh(full)
            except NotFoundError:
                if self.names_under(full):
                    return Node("folder", path=full), None
                raise
            self.collection(pdh)
            return Node("dir", full, pdh, ""), None
        elif node.kind == "dir":
            path = f"{node.path}/{name}" if node.path else name
            entry = self.files(node.pdh, node.path).entries.get(name)
            if entry is not None:
                return Node("file", node.root, node.pdh, path), entry
            if self.collection(node.pdh).outline.is_dir(path):
                return Node("dir", node.root, node.pdh, path), None
        raise NotFoundError(f"no {name!r} here")

    def walk(self, parts: list[str]) -> tuple[Node, FileEntry | None]:
        """The node at path ``parts`` from the root (as WebDAV names it):
        inside a collection, a directory is found in its outline and only a
        file's own directory is listed. NotFoundError if there is none."""
        node, entry = Node("root"), None
        for i, name in enumerate(parts):
            if node.kind == "dir":
                path = "/".join([node.path, *parts[i:]] if node.path else parts[i:])
                if self.collection(node.pdh).outline.is_dir(path):
                    return Node("dir", node.root, node.pdh, path), None
                parent, _, base = path.rpartition("/")
                found = self.files(node.pdh, parent).entries.get(base)
                if found is None:
                    raise NotFoundError(f"no {path!r} in {node.pdh}")
                return Node("file", node.root, node.pdh, path), found
            if node.kind == "file":
                raise NotFoundError(f"{node.path!r} is a file")
            node, entry = self.lookup_in(node, name)
        return node, entry

    def children(self, inode: int) -> list[tuple[str, int, Node, FileEntry | None]]:
        """A directory's entries in name order, each with its inode."""
        node = self.node(inode)
        found = self.children_of(node)
        if node.kind != "dir":
            return [(name, self.inode(n), n, e) for name, n, e in found]
        # Numbered here, not one by one: a directory of a million files.
        slot = self._slot(node.root, node.pdh)
        collection = self.collection(node.pdh)
        files = self.files(node.pdh, node.path)
        out = []
        for name, child, e in found:
            if e is None:
                ino = self._in_collection(slot, collection.dir_index[child.path], 0)
            else:
                ino = self._in_collection(
                    slot, collection.dir_index[node.path], files.index(name) + 1
                )
            out.append((name, ino, child, e))
        return out

    def children_of(self, node: Node) -> list[tuple[str, Node, FileEntry | None]]:
        """A directory's entries in name order (by_id lists none: a PDH is
        not guessed, and every collection would be far too many)."""
        if node.kind == "root":
            return [(n, Node(n), None) for n in ("by_id", "by_name")]
        if node.kind in ("by_name", "folder"):
            out: list[tuple[str, Node, FileEntry | None]] = []
            for head, is_name in self.names_under(node.path):
                full = f"{node.path}/{head}" if node.path else head
                if is_name:
                    out.append((head, Node("dir", full, self.name_pdh(full), ""), None))
                else:
                    out.append((head, Node("folder", path=full), None))
            return out
        if node.kind == "dir":
            subdirs = self.collection(node.pdh).outline.subdirectories(node.path)
            base = node.path + "/" if node.path else ""
            found: list[tuple[str, Node, FileEntry | None]] = [
                (d[len(base) :], Node("dir", node.root, node.pdh, d), None) for d in subdirs
            ]
            found += [
                (name, Node("file", node.root, node.pdh, base + name), e)
                for name, e in self.files(node.pdh, node.path).entries.items()
            ]
            found.sort(key=lambda c: c[0])
            return found
        return []

    def file_entry(self, inode: int) -> FileEntry:
        return self.entry_of(self.node(inode))

    def entry_of(self, node: Node) -> FileEntry:
        if node.kind != "file":
            raise NotFoundError("not a file")
        parent, _, name = node.path.rpartition("/")
        entry = self.files(node.pdh, parent).entries.get(name)
        if entry is None:
            raise NotFoundError(f"no file {node.path!r} in {node.pdh}")
        return entry
