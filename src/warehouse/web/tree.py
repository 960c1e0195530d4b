"""A collection's directories, for listing one directory a page at a time.

The collection's :class:`Outline` (``manifest/outline.py``: its directories,
nothing per file) says where a directory's own stream lies; a page parses
that one stream (:func:`listing`), so a collection of a million files costs
its directories, not its files.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

from warehouse.manifest.normal import iter_normal_dirs
from warehouse.manifest.outline import DIRECTORY_BYTES, Outline

__all__ = ["DIRECTORY_BYTES", "Entry", "Listing", "Outline", "listing", "parent_paths"]


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


def _directory_entry(outline: Outline, path: str) -> Entry:
    return Entry(path.rpartition("/")[2], path, True, outline.sizes[path], outline.counts[path])


class Listing(Sequence[Entry]):
    """One directory's entries, directories first, each group sorted by name;
    an :class:`Entry` is made only when asked for (a page of them)."""

    def __init__(
        self, outline: Outline, dirs: list[str], prefix: str, names: list[str], sizes: list[int]
    ) -> None:
        self._outline = outline
        self._dirs = dirs
        self._prefix = prefix
        self._names = names
        self._sizes = sizes

    def __len__(self) -> int:
        return len(self._dirs) + len(self._names)

    def _entry(self, i: int) -> Entry:
        if i < len(self._dirs):
            return _directory_entry(self._outline, self._dirs[i])
        i -= len(self._dirs)
        name = self._names[i]
        return Entry(name, self._prefix + name, False, self._sizes[i], 1)

    @overload
    def __getitem__(self, index: int) -> Entry: ...

    @overload
    def __getitem__(self, index: slice) -> list[Entry]: ...

    def __getitem__(self, index: int | slice) -> Entry | list[Entry]:
        if isinstance(index, slice):
            return [self._entry(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._entry(index)


def listing(outline: Outline, path: str, stream: bytes | None) -> Listing:
    """The entries of directory ``path`` ("" is the root); ``stream``: the
    text of its own stream (``outline.stream_span(path)``), None if it has none."""
    path = path.strip("/")
    dirs = outline.subdirectories(path)
    if stream is None:
        return Listing(outline, dirs, "", [], [])
    prefix, names, sizes = next(iter_normal_dirs(stream + b"\n"))
    if names is None:
        names, sizes = [], []
    if any(a >= b for a, b in itertools.pairwise(names)):
        # Normalized streams list their files in name order; kept as a
        # safeguard, since the page promises that order.
        pairs = sorted(zip(names, sizes, strict=True))
        names, sizes = [n for n, _ in pairs], [s for _, s in pairs]
    return Listing(outline, dirs, prefix, names, sizes)
