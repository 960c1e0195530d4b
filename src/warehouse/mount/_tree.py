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
``ENTRIES_HELD`` files. A directory of more than ``PAGED_FROM`` files is
read in pages of its stream instead (``manifest/pages.py``: a sparse index of it).
So a collection of a million files costs its directories and the pages in
use, not its files, even all in one directory (docs/mount.md).

The layout (docs/mount.md)::

    by_id/<PDH>/...     a collection by its portable data hash (not listed)
    by_name/<name>/...  a name's current collection; a name with "/" in it
                        (``lab/run42``) is a folder ``lab`` holding ``run42``

Every name shown here comes from a manifest or the catalog and is only ever
a key in these tables, never a path on the local disk; the kernel refuses
``/`` and NUL in names and resolves ``.`` and ``..`` itself.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from warehouse import catalog
from warehouse.blocks.store import BlockStore
from warehouse.collection.storedtext import StoredText
from warehouse.errors import NotFoundError, WarehouseError
from warehouse.keys import is_pdh
from warehouse.manifest import FileEntry, Manifest
from warehouse.manifest.pages import DirFiles, Files, PagedFiles
from warehouse.mount._collection import Collection, Dropped

__all__ = ["ROOT", "Child", "Collection", "Files", "Listing", "Node", "Source", "Tree"]

ROOT = 1
_T = TypeVar("_T")
# How long a name is taken to hold the PDH last read for it: a name moved
# shows its new collection after at most this long.
NAME_TTL = 2.0
# Collections whose outlines are held at once; one more drops the least
# recently used (made again from its manifest when next asked for).
COLLECTIONS_HELD = 16
# Files of directories in use whose entries are held (about 400 bytes
# each): past it the least recently used directories are dropped.
ENTRIES_HELD = 50_000
# A directory of more files than this is read in pages of its stream (a
# sparse index of it and the pages in use), never whole.
PAGED_FROM = 20_000
# Where an inode inside a collection keeps its parts (``Tree.inode``).
_SLOT_SHIFT = 47
_DIR_SHIFT = 24
_DIR_MASK = (1 << 23) - 1
_FILE_MASK = (1 << 24) - 1
# A directory listing's offsets (``Listing``): files passed, then subdirectories passed.
_LISTED_SHIFT = 23


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
        # Collections, and large directories, being made: one maker each.
        self._making: dict[object, threading.Lock] = {}
        # (pdh, directory) -> its files; ``_held`` counts their weight.
        self._dirs: OrderedDict[tuple[str, str], DirFiles] = OrderedDict()
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
            found = self.files(node.pdh, parent).find(name)
            if found is None:
                raise NotFoundError(f"no file {node.path!r} in {node.pdh}")
            return self._in_collection(slot, collection.dir_index[parent], found[0] + 1)
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
        file = self.files(pdh, directory).at(f - 1)
        if file is None:
            raise NotFoundError(f"no inode {inode}")
        name = file[0]
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
        slot, d, f = inode >> _SLOT_SHIFT, (inode >> _DIR_SHIFT) & _DIR_MASK, inode & _FILE_MASK
        with self._lock:
            if slot >= len(self._slots):
                return False
            pdh = self._slots[slot][1]
            collection = self._collections.get(pdh)
            if collection is None or d >= len(collection.dirs):
                return False
            files = self._dirs.get((pdh, collection.dirs[d]))
        if isinstance(files, PagedFiles):  # a file whose page is parsed
            return f > 0 and files.holds(f - 1)
        return files is not None

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

    def files(self, pdh: str, directory: str) -> DirFiles:
        """The files of ``directory`` in collection ``pdh``, whole or in pages."""
        key = (pdh, directory)
        with self._lock:
            held = self._dirs.get(key)
            if held is not None:
                self._dirs.move_to_end(key)
                return held
            making = self._making.setdefault(key, threading.Lock())
        with making:  # a large directory is gone through once, not once a caller
            with self._lock:
                held = self._dirs.get(key)
            if held is not None:
                return held
            made = self._dir_files(pdh, directory)
            with self._lock:
                self._making.pop(key, None)
                self._dirs[key] = made
                self._held += made.weight
                while self._held > ENTRIES_HELD and len(self._dirs) > 1:
                    _, dropped = self._dirs.popitem(last=False)
                    self._held -= dropped.weight
        return made

    def _dir_files(self, pdh: str, directory: str) -> DirFiles:
        collection = self.collection(pdh)
        span = collection.outline.stream_span(directory)
        if span is not None and collection.own_files(directory) > PAGED_FROM:
            paged = PagedFiles.of_stream(directory, self._reader(pdh), span)
            if paged is not None:
                return paged
        return self._again(pdh, lambda c: c.files(directory))

    def _again(self, pdh: str, fn: Callable[[Collection], _T]) -> _T:
        """``fn`` of collection ``pdh``, made again if it is dropped (its
        text closed) as it is used: the same text, the same offsets."""
        for _ in range(3):
            try:
                return fn(self.collection(pdh))
            except Dropped:
                continue
        raise WarehouseError(f"collection {pdh} is dropped as soon as it is read")

    def _reader(self, pdh: str) -> Callable[[int, int], bytes]:
        """Reads of collection ``pdh``'s text, through whichever copy the tree holds."""
        return lambda start, end: self._again(pdh, lambda c: c.read(start, end))

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
            found = self.files(node.pdh, node.path).find(name)
            if found is not None:
                return Node("file", node.root, node.pdh, path), found[1]
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
                found = self.files(node.pdh, parent).find(base)
                if found is None:
                    raise NotFoundError(f"no {path!r} in {node.pdh}")
                return Node("file", node.root, node.pdh, path), found[1]
            if node.kind == "file":
                raise NotFoundError(f"{node.path!r} is a file")
            node, entry = self.lookup_in(node, name)
        return node, entry

    def listing(self, inode: int) -> Listing:
        """Directory ``inode``'s entries, to be given a batch at a time."""
        return Listing(self, self.node(inode))

    def children(self, inode: int) -> list[tuple[str, int, Node, FileEntry | None]]:
        """A directory's entries in name order, each with its inode (all at once)."""
        return [c[:4] for c in self.listing(inode).every()]

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
            listing = Listing(self, node, numbered=False)
            return [(name, n, e) for name, _, n, e, _ in listing.every()]
        return []

    def file_entry(self, inode: int) -> FileEntry:
        return self.entry_of(self.node(inode))

    def entry_of(self, node: Node) -> FileEntry:
        if node.kind != "file":
            raise NotFoundError("not a file")
        parent, _, name = node.path.rpartition("/")
        found = self.files(node.pdh, parent).find(name)
        if found is None:
            raise NotFoundError(f"no file {node.path!r} in {node.pdh}")
        return found[1]


# A directory's entry as a listing gives it: name, inode, node, entry (of a
# file), and the offset that goes on after it.
Child = tuple[str, int, Node, FileEntry | None, int]
_LISTED_MASK = (1 << _LISTED_SHIFT) - 1


class Listing:
    """A directory's entries in name order, a batch at a time from an
    offset (FUSE's readdir asks so): a large directory's files are read a
    page at a time, never all at once. Inside a collection an offset says
    how many files and how many subdirectories lie before it, so a listing
    goes on from any offset it gave."""

    def __init__(self, tree: Tree, node: Node, *, numbered: bool = True) -> None:
        self.tree = tree
        self.node = node
        self.fixed: list[Child] | None = None
        if node.kind != "dir":
            found = tree.children_of(node)
            self.fixed = [
                (name, tree.inode(n) if numbered else 0, n, e, i + 1)
                for i, (name, n, e) in enumerate(found)
            ]
            return
        collection = tree.collection(node.pdh)
        self.base = node.path + "/" if node.path else ""
        self.subdirs = collection.outline.subdirectories(node.path)
        self.dir_index = collection.dir_index
        self.slot = tree._slot(node.root, node.pdh) if numbered else 0

    def _inode(self, d: int, f: int) -> int:
        if not self.slot:
            return 0
        if f > _FILE_MASK:  # checked here: numbered a batch at a time
            raise WarehouseError("too many files in one directory for the mount's inodes")
        return self.slot << _SLOT_SHIFT | d << _DIR_SHIFT | f

    def entries(self, offset: int, count: int) -> list[Child]:
        """Up to ``count`` entries from ``offset`` (0: the first) on."""
        if self.fixed is not None:
            return self.fixed[offset : offset + count]
        node, subdirs, cut = self.node, self.subdirs, len(self.base)
        i, j = offset & _LISTED_MASK, offset >> _LISTED_SHIFT
        files = self.tree.files(node.pdh, node.path).run(j, count)
        number = self.dir_index[node.path]
        out: list[Child] = []
        f = 0
        while len(out) < count:
            if i < len(subdirs) and (f >= len(files) or subdirs[i][cut:] < files[f][0]):
                d = subdirs[i]
                i += 1
                child = Node("dir", node.root, node.pdh, d)
                ino = self._inode(self.dir_index[d], 0)
                out.append((d[cut:], ino, child, None, (j + f) << _LISTED_SHIFT | i))
            elif f < len(files):
                name, entry = files[f]
                f += 1
                child = Node("file", node.root, node.pdh, self.base + name)
                ino = self._inode(number, j + f)
                out.append((name, ino, child, entry, (j + f) << _LISTED_SHIFT | i))
            else:
                break
        return out

    def every(self, batch: int = 10_000) -> list[Child]:
        """Every entry (a WebDAV listing, a test)."""
        out: list[Child] = []
        while found := self.entries(out[-1][4] if out else 0, batch):
            out += found
        return out
