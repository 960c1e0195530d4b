"""A collection's directories, for listing one directory a page at a time.

An :class:`Outline` is made in one pass over the collection's normalized
manifest text (one stream a directory, streams in depth-first order, each
stream's files in name order). It keeps, for each directory, the bytes and
files under it, its subdirectories and where its own stream lies in the
text: nothing per file. A page then parses the one stream of the directory
it shows (:func:`listing`), so a collection of a million files costs its
directories, not its files.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

from warehouse.blocks.locator import EMPTY_LOCATOR
from warehouse.errors import NotFoundError
from warehouse.manifest.escape import unescape_name
from warehouse.manifest.normal import iter_normal_dirs

__all__ = ["Entry", "Listing", "Outline", "listing", "parent_paths"]


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


# A file segment ("position:length:name"; a locator holds no colon, a name
# none unescaped): its length and its name as written.
_SEGMENT = re.compile(rb" \d+:(\d+):([^ ]+)")
_MARKER_TAIL = f" {EMPTY_LOCATOR.key} 0:0:\\056".encode()
# Memory an outline holds per directory (its path, sums, place among its
# parent's children, line offsets): 350 bytes measured for 10,000 short
# names; longer paths cost more. Used to budget the cache.
DIRECTORY_BYTES = 500


class Outline:
    """Every directory of a collection: bytes and files under it, its
    subdirectories, and the byte range of its own stream in the text."""

    def __init__(self, text: bytes) -> None:
        """``text``: normalized manifest text (stored text checked against its PDH)."""
        self.sizes: dict[str, int] = {"": 0}
        self.counts: dict[str, int] = {"": 0}
        self.subdirs: dict[str, list[str]] = {"": []}
        self.lines: dict[str, tuple[int, int]] = {}  # directory -> [start, end) of its stream
        # An empty directory -> its marker stream, so a folder's archive holds it too.
        self.markers: dict[str, tuple[int, int]] = {}
        self.text_bytes = len(text)
        start = 0
        find = text.find
        while (end := find(b"\n", start)) >= 0:
            self._add_stream(text, start, end)
            start = end + 1
        for children in self.subdirs.values():
            children.sort()  # siblings share their parent's prefix: sorted by name

    def _add_stream(self, text: bytes, start: int, end: int) -> None:
        space = text.find(b" ", start, end)
        name = unescape_name(text[start:space].decode("utf-8"))
        directory = "" if name == "." else name[2:]
        self._add_directory(directory)
        line = text[space:end]
        if line.endswith(_MARKER_TAIL) and len(line) == len(_MARKER_TAIL):
            self.markers[directory] = (start, end)  # an empty directory: its marker alone
            return
        segments = _SEGMENT.findall(line)
        if not segments:
            return
        lengths, names = zip(*segments, strict=True)
        size = sum(map(int, lengths))
        files = len(set(names))  # a file's segments come together, each file once
        self.lines[directory] = (start, end)
        d: str | None = directory
        while d is not None:
            self.sizes[d] += size
            self.counts[d] += files
            d = None if d == "" else d.rpartition("/")[0]

    def _add_directory(self, directory: str) -> None:
        while directory not in self.sizes:
            self.sizes[directory] = self.counts[directory] = 0
            self.subdirs.setdefault(directory, [])  # its first child may be in already
            parent = directory.rpartition("/")[0]
            self.subdirs.setdefault(parent, []).append(directory)
            directory = parent

    @property
    def directories(self) -> int:
        return len(self.sizes)

    def is_dir(self, path: str) -> bool:
        return path.strip("/") in self.sizes

    def size(self, path: str) -> int:
        return self.sizes.get(path.strip("/"), 0)

    def count(self, path: str) -> int:
        return self.counts.get(path.strip("/"), 0)

    def stream_span(self, path: str) -> tuple[int, int] | None:
        """The byte range of directory ``path``'s own stream (None: it holds no file)."""
        return self.lines.get(path.strip("/"))

    def tree_span(self, path: str) -> tuple[int, int] | None:
        """The byte range of the streams of ``path`` and everything below it
        (consecutive in normalized text), the marker streams of empty
        directories included; None if neither a file nor one is under it."""
        path = path.strip("/")
        spans = [
            span
            for d, own in self._below(path)
            for span in (own, self.markers.get(d))
            if span is not None
        ]
        if not spans:
            return None
        return min(s for s, _ in spans), max(e for _, e in spans)

    def _below(self, path: str) -> Iterator[tuple[str, tuple[int, int] | None]]:
        todo = [path]
        while todo:
            d = todo.pop()
            yield d, self.lines.get(d)
            todo.extend(self.subdirs.get(d, ()))

    def subdirectories(self, path: str) -> list[str]:
        """The paths of the subdirectories of ``path``, sorted by name."""
        path = path.strip("/")
        if path not in self.sizes:
            raise NotFoundError(f"no directory {path!r} in this collection")
        return self.subdirs[path]

    def directory_entry(self, path: str) -> Entry:
        return Entry(path.rpartition("/")[2], path, True, self.sizes[path], self.counts[path])


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
            return self._outline.directory_entry(self._dirs[i])
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
