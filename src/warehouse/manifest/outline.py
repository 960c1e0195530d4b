"""A collection's directories, from one pass over its normalized text.

An :class:`Outline` is made in one pass over a collection's normalized
manifest text (one stream a directory, streams in depth-first order, each
stream's files in name order). It keeps, for each directory, the bytes and
files under it, its subdirectories and where its own stream lies in the
text: nothing per file. A reader of one directory then parses the one
stream of that directory, so a collection of a million files costs its
directories, not its files. Used by the web pages (``web/tree.py``), the
mount and the WebDAV gateway.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from operator import ne

from warehouse.blocks.locator import EMPTY_LOCATOR
from warehouse.errors import NotFoundError
from warehouse.manifest.escape import unescape_name

__all__ = ["DIRECTORY_BYTES", "Outline"]

# A file segment ("position:length:name"; a locator holds no colon, a name
# none unescaped): its length and its name as written.
_SEGMENT = re.compile(rb" \d+:(\d+):([^ ]+)")
_MARKER_TAIL = f" {EMPTY_LOCATOR.key} 0:0:\\056".encode()
# A line longer than this (a flat directory of a million files is one line
# of some 20 MB) is gone through a piece of this size at a time: its
# segments are never all held at once.
_LONG_LINE = 1 << 18
# Memory an outline holds per directory (its path, sums, place among its
# parent's children, line offsets): 350 bytes measured for 10,000 short
# names; longer paths cost more. Used to budget caches of outlines.
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
            self._add_stream(text, start, end, 0)
            start = end + 1
        self._sort()

    @classmethod
    def of_pieces(cls, pieces: Iterable[bytes]) -> Outline:
        """The outline of the text given in ``pieces`` (a scratch copy read
        a piece at a time): only the line being gone through is held."""
        outline = cls(b"")
        held = bytearray()
        base = 0  # offset in the text of held[0]
        scan: _LongLine | None = None  # the line being gone through, once long
        for piece in pieces:
            held += piece
            start = 0
            while (end := held.find(b"\n", start)) >= 0:
                if scan is None:
                    outline._add_stream(held, start, end, base)
                else:
                    scan.feed_span(held, start, end)
                    outline._add_long(scan, base + end)
                    scan = None
                start = end + 1
            if len(held) - start > _LONG_LINE:
                # A long line: what it holds so far up to its last space is
                # counted and let go.
                cut = held.rfind(b" ", start)
                if cut > start:
                    if scan is None:
                        scan = _LongLine(base + start)
                    scan.feed_span(held, start, cut)
                    start = cut + 1
            del held[:start]
            base += start
            outline.text_bytes = base + len(held)
        outline._sort()
        return outline

    def _sort(self) -> None:
        for children in self.subdirs.values():
            children.sort()  # siblings share their parent's prefix: sorted by name

    def _add_stream(self, text: bytes | bytearray, start: int, end: int, base: int) -> None:
        if end - start > _LONG_LINE:
            scan = _LongLine(base + start)
            scan.feed_span(text, start, end)
            self._add_long(scan, base + end)
            return
        space = text.find(b" ", start, end)
        name = unescape_name(bytes(text[start:space]).decode("utf-8"))
        directory = "" if name == "." else name[2:]
        self._add_directory(directory)
        line = bytes(text[space:end])
        if line.endswith(_MARKER_TAIL) and len(line) == len(_MARKER_TAIL):
            # An empty directory: its marker alone.
            self.markers[directory] = (base + start, base + end)
            return
        segments = _SEGMENT.findall(line)
        if not segments:
            return
        lengths, names = zip(*segments, strict=True)
        size = sum(map(int, lengths))
        files = len(set(names))  # a file's segments come together, each file once
        self.lines[directory] = (base + start, base + end)
        d: str | None = directory
        while d is not None:
            self.sizes[d] += size
            self.counts[d] += files
            d = None if d == "" else d.rpartition("/")[0]

    def _add_long(self, scan: _LongLine, end: int) -> None:
        """Add a long line gone through by ``scan``, which ends at ``end``."""
        directory = scan.directory
        self._add_directory(directory)
        if not scan.files:
            return
        self.lines[directory] = (scan.start, end)
        d: str | None = directory
        while d is not None:
            self.sizes[d] += scan.size
            self.counts[d] += scan.files
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


class _LongLine:
    """One long line of normalized text gone through a piece at a time: its
    directory, and the bytes and files its segments hold (a file's segments
    lie together: a file is a run of segments of one name)."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.directory: str = ""
        self.named = False
        self.size = 0
        self.files = 0
        self.last = b""

    def feed_span(self, text: bytes | bytearray, start: int, end: int) -> None:
        """The whole tokens of ``text`` from ``start`` to ``end``, at most
        ``_LONG_LINE`` bytes of them at a time."""
        while start < end:
            cut = text.find(b" ", min(start + _LONG_LINE, end), end)
            cut = end if cut < 0 else cut
            self.feed(bytes(text[start:cut]))
            start = cut + 1

    def feed(self, tokens: bytes) -> None:
        """The next whole tokens of the line, joined by spaces."""
        if not self.named:
            name, _, tokens = tokens.partition(b" ")
            text = unescape_name(name.decode("utf-8"))
            self.directory = "" if text == "." else text[2:]
            self.named = True
        segments = _SEGMENT.findall(b" " + tokens)
        if not segments:
            return
        lengths, names = zip(*segments, strict=True)
        self.size += sum(map(int, lengths))
        self.files += (names[0] != self.last) + sum(map(ne, names[1:], names[:-1]))
        self.last = names[-1]
