"""A collection's files as a directory tree, for listing one directory a page at a time."""

from __future__ import annotations

from dataclasses import dataclass

from warehouse.errors import NotFoundError
from warehouse.manifest import Manifest

__all__ = ["Entry", "Tree", "parent_paths"]


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    path: str  # from the collection's root, no leading slash
    is_dir: bool
    size: int  # a directory: all the bytes under it
    files: int  # a directory: all the files under it; a file: 1


def parent_paths(path: str) -> list[tuple[str, str]]:
    """(name, path) of each directory from the root down to ``path``, for breadcrumbs."""
    out: list[tuple[str, str]] = []
    if path:
        parts = path.split("/")
        for i, part in enumerate(parts):
            out.append((part, "/".join(parts[: i + 1])))
    return out


class Tree:
    """Every directory's entries, directories first, each group sorted by name."""

    def __init__(self, manifest: Manifest) -> None:
        sizes: dict[str, int] = {"": 0}
        counts: dict[str, int] = {"": 0}
        children: dict[str, dict[str, bool]] = {"": {}}  # dir -> {child path: is_dir}
        for directory in manifest.directories():
            sizes.setdefault(directory, 0)
            counts.setdefault(directory, 0)
            children.setdefault(directory, {})
            parent = directory.rpartition("/")[0]
            children.setdefault(parent, {})[directory] = True
        self.file_sizes: dict[str, int] = {}
        for path, entry in manifest.files().items():
            self.file_sizes[path] = entry.size
            parent = path.rpartition("/")[0]
            children.setdefault(parent, {})[path] = False
            d: str | None = parent
            while d is not None:
                sizes[d] = sizes.get(d, 0) + entry.size
                counts[d] = counts.get(d, 0) + 1
                d = None if d == "" else d.rpartition("/")[0]
        self._sizes = sizes
        self._counts = counts
        self._listings: dict[str, list[Entry]] = {}
        self._children = children

    def is_dir(self, path: str) -> bool:
        return path in self._children

    def listing(self, path: str) -> list[Entry]:
        """The entries of directory ``path`` ("" is the root)."""
        path = path.strip("/")
        if path not in self._children:
            raise NotFoundError(f"no directory {path!r} in this collection")
        found = self._listings.get(path)
        if found is None:
            dirs: list[Entry] = []
            files: list[Entry] = []
            for child, is_dir in self._children[path].items():
                name = child.rpartition("/")[2]
                if is_dir:
                    dirs.append(Entry(name, child, True, self._sizes[child], self._counts[child]))
                else:
                    files.append(Entry(name, child, False, self.file_sizes[child], 1))
            dirs.sort(key=lambda e: e.name)
            files.sort(key=lambda e: e.name)
            found = self._listings[path] = dirs + files
        return found

    def size(self, path: str) -> int:
        return self._sizes.get(path.strip("/"), 0)

    def count(self, path: str) -> int:
        return self._counts.get(path.strip("/"), 0)
