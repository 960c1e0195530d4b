"""The mounted tree as plain data: inodes, directories and files, with no FUSE.

``Tree`` answers what the FUSE layer asks (look a name up in a directory,
list a directory, where a file's bytes are) from manifests and names only;
it never reads a block. Its methods that ask the warehouse (a manifest, a
name) block, so the FUSE layer calls them on a worker thread; the tables
they change are guarded by one lock.

The layout (docs/mount.md)::

    by_id/<PDH>/...     a collection by its portable data hash (not listed)
    by_name/<name>/...  a name's current collection; a name with "/" in it
                        (``lab/run42``) is a folder ``lab`` holding ``run42``

Every name shown here comes from a manifest or the catalog and is only ever
a key in these tables, never a path on the local disk; the kernel refuses
``/`` and NUL in names and resolves ``.`` and ``..`` itself.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from warehouse.errors import NotFoundError
from warehouse.interface import Warehouse
from warehouse.keys import is_pdh
from warehouse.manifest import FileEntry

__all__ = ["ROOT", "Listing", "Node", "Tree"]

ROOT = 1
# How long a name is taken to hold the PDH last read for it: a name moved
# shows its new collection after at most this long.
NAME_TTL = 2.0
# Collections whose listings are held at once; one more drops the least
# recently used (it is built again from its manifest when next asked for).
COLLECTIONS_HELD = 16


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


@dataclass(slots=True)
class Listing:
    """One collection's directories: each maps a child's name to its file
    entry, or to None for a subdirectory."""

    pdh: str
    dirs: dict[str, dict[str, FileEntry | None]] = field(default_factory=dict)

    def add_dir(self, path: str) -> None:
        while path not in self.dirs:
            self.dirs[path] = {}
            if not path:
                return
            parent, _, name = path.rpartition("/")
            self.dirs.setdefault(parent, {})[name] = None
            path = parent

    def add_file(self, entry: FileEntry) -> None:
        parent, _, name = entry.path.rpartition("/")
        self.add_dir(parent)
        self.dirs[parent][name] = entry


class Tree:
    def __init__(self, warehouse: Warehouse) -> None:
        self.warehouse = warehouse
        self._lock = threading.Lock()
        self._nodes: dict[int, Node] = {ROOT: Node("root")}
        self._inodes: dict[Node, int] = {Node("root"): ROOT}
        self._listings: OrderedDict[str, Listing] = OrderedDict()
        self._names: dict[str, tuple[float, str]] = {}  # name -> (when read, pdh)

    # -- inodes ---------------------------------------------------------------

    def inode(self, node: Node) -> int:
        with self._lock:
            ino = self._inodes.get(node)
            if ino is None:
                ino = len(self._nodes) + 1
                self._nodes[ino] = node
                self._inodes[node] = ino
            return ino

    def node(self, inode: int) -> Node:
        with self._lock:
            found = self._nodes.get(inode)
        if found is None:
            raise NotFoundError(f"no inode {inode}")
        return found

    def held(self, inode: int) -> bool:
        """Whether inode ``inode`` lies in a collection whose listing is held
        (so that looking in it asks nothing of the warehouse)."""
        with self._lock:
            node = self._nodes.get(inode)
            # A name's directory too: its inode is that of one PDH.
            return node is not None and node.kind in ("dir", "file") and node.pdh in self._listings

    # -- collections and names (these ask the warehouse) ----------------------

    def listing(self, pdh: str) -> Listing:
        """The directories of collection ``pdh``, from its manifest read stream by stream."""
        with self._lock:
            held = self._listings.get(pdh)
            if held is not None:
                self._listings.move_to_end(pdh)
                return held
        listing = Listing(pdh)
        listing.add_dir("")
        with self.warehouse.reader(pdh) as reader:
            for entries, empty_dirs in reader.iter_streams():
                for entry in entries:
                    listing.add_file(entry)
                for d in empty_dirs:
                    listing.add_dir(d)
        with self._lock:
            self._listings[pdh] = listing
            while len(self._listings) > COLLECTIONS_HELD:
                self._listings.popitem(last=False)
        return listing

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
        node = self.node(parent)
        if node.kind == "root":
            if name in ("by_id", "by_name"):
                child = Node(name)
                return self.inode(child), child, None
        elif node.kind == "by_id":
            if is_pdh(name):
                self.listing(name)  # NotFoundError (or refused) if it is not readable
                child = Node("dir", "id", name, "")
                return self.inode(child), child, None
        elif node.kind in ("by_name", "folder"):
            full = f"{node.path}/{name}" if node.path else name
            try:
                pdh = self.name_pdh(full)
            except NotFoundError:
                if self.names_under(full):
                    child = Node("folder", path=full)
                    return self.inode(child), child, None
                raise
            self.listing(pdh)
            child = Node("dir", full, pdh, "")
            return self.inode(child), child, None
        elif node.kind == "dir":
            children = self.listing(node.pdh).dirs.get(node.path, {})
            if name in children:
                entry = children[name]
                path = f"{node.path}/{name}" if node.path else name
                child = Node("dir" if entry is None else "file", node.root, node.pdh, path)
                return self.inode(child), child, entry
        raise NotFoundError(f"no {name!r} here")

    def children(self, inode: int) -> list[tuple[str, Node, FileEntry | None]]:
        """A directory's entries in name order (by_id lists none: a PDH is
        not guessed, and every collection would be far too many)."""
        node = self.node(inode)
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
            listing = self.listing(node.pdh)
            base = node.path + "/" if node.path else ""
            return [
                (
                    name,
                    Node("dir" if e is None else "file", node.root, node.pdh, base + name),
                    e,
                )
                for name, e in sorted(listing.dirs.get(node.path, {}).items())
            ]
        return []

    def file_entry(self, inode: int) -> FileEntry:
        node = self.node(inode)
        if node.kind != "file":
            raise NotFoundError("not a file")
        parent, _, name = node.path.rpartition("/")
        entry = self.listing(node.pdh).dirs.get(parent, {}).get(name)
        if entry is None:
            raise NotFoundError(f"no file {node.path!r} in {node.pdh}")
        return entry
