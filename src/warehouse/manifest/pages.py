"""A directory's files, whole or in pages of its one stream: what the mount,
the S3 gateway and WebDAV read (docs/mount.md, "A directory of many files").

A directory's files come from its one stream (normalized text: files in
name order, each file's segments together). ``Files`` holds them all;
``PagedFiles`` (a directory of more than ``PAGED_FROM`` files) holds a
sparse index made in one pass over the stream: every ``PAGE``-th file's
name and where its first segment lies in the text, and every
``LOCATOR_PAGE``-th block's place in the stream. A file is then found by
bisecting the index and parsing one page of the text; files at a position
likewise. So a directory of a million files costs some 4,000 names and
the few pages in use, not a million entries.
"""

from __future__ import annotations

import bisect
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from itertools import accumulate, compress
from operator import gt, ne

from warehouse.blocks.locator import Locator, LocatorError
from warehouse.errors import CorruptDataError
from warehouse.manifest import FileEntry, FilePiece
from warehouse.manifest.escape import unescape_name
from warehouse.manifest.layout import _append_piece

__all__ = ["LOCATOR_PAGE", "PAGE", "PAGES_HELD", "DirFiles", "Files", "PagedFiles"]

# Files a page (one parse: some 5 KB of text).
PAGE = 256
# Pages of one directory kept parsed (the last used).
PAGES_HELD = 16
# Blocks a page of a stream's block list.
LOCATOR_PAGE = 1024
# What the stream is read by at once when its index is made.
_PIECE = 1 << 18
# A segment as normalized text writes it (numbers below 2**63).
_NUM = rb"(0|[1-9][0-9]{0,18})"
_SEGMENTS = re.compile(rb"(?:^| )" + _NUM + rb":" + _NUM + rb":([^ ]+)")
_NAME = re.compile(rb"(?:^| )[0-9]+:[0-9]+:([^ ]+)")

Read = Callable[[int, int], bytes]  # the text's bytes from start to end
Run = list[tuple[str, FileEntry]]


class DirFiles:
    """What the tree asks of a directory's files, by name or by place in
    name order (a file's place is in its inode)."""

    count: int
    weight: int  # entries it may hold, for the tree's budget

    def find(self, name: str) -> tuple[int, FileEntry] | None:
        """The place and entry of file ``name``; None if there is none."""
        raise NotImplementedError

    def run(self, start: int, count: int) -> Run:
        """Up to ``count`` files from place ``start`` on, in name order."""
        raise NotImplementedError

    def place_of(self, name: str) -> int:
        """The place of the first file whose name is not less than ``name``
        (code point order; ``count`` if there is none)."""
        raise NotImplementedError

    def at(self, place: int) -> tuple[str, FileEntry] | None:
        found = self.run(place, 1) if place >= 0 else []
        return found[0] if found else None


@dataclass(frozen=True, eq=False)
class Files(DirFiles):
    """One directory's files, all held: their names in order, and each one's entry."""

    names: list[str]
    entries: dict[str, FileEntry]

    @property
    def count(self) -> int:  # type: ignore[override]
        return len(self.names)

    @property
    def weight(self) -> int:  # type: ignore[override]
        return len(self.names)

    def index(self, name: str) -> int:
        return bisect.bisect_left(self.names, name)

    def place_of(self, name: str) -> int:
        return self.index(name)

    def find(self, name: str) -> tuple[int, FileEntry] | None:
        entry = self.entries.get(name)
        return None if entry is None else (self.index(name), entry)

    def run(self, start: int, count: int) -> Run:
        return [(n, self.entries[n]) for n in self.names[start : start + count]]


class _Page:
    __slots__ = ("entries", "names", "places")

    def __init__(self, names: list[str], entries: list[FileEntry]) -> None:
        self.names = names
        self.entries = entries
        self.places = {n: i for i, n in enumerate(names)}


class PagedFiles(DirFiles):
    """A large directory's files, read a page at a time from its stream."""

    def __init__(self, directory: str, read: Read, span: tuple[int, int]) -> None:
        self.directory = directory
        self.read = read
        self.span = span
        self.count = 0
        self.size = 0  # bytes of the stream's blocks
        # Every PAGE-th file: its name and the offset in the text of its first segment.
        self.firsts: list[str] = []
        self.offsets: list[int] = []
        # Every LOCATOR_PAGE-th block: where it starts in the stream, and in the text.
        self.block_starts: list[int] = []
        self.block_offsets: list[int] = []
        self.blocks_end = 0  # the text offset just past the last block
        self.ordered = True
        self._lock = threading.Lock()
        self._pages: OrderedDict[int, _Page] = OrderedDict()
        self._blocks: OrderedDict[int, tuple[list[int], list[Locator]]] = OrderedDict()
        # The page of blocks used last, and the stream positions it covers.
        self._last_blocks: tuple[int, int, tuple[list[int], list[Locator]]] = (0, 0, ([], []))
        self.weight = 0

    @classmethod
    def of_stream(cls, directory: str, read: Read, span: tuple[int, int]) -> PagedFiles | None:
        """The index of the stream at ``span`` of the text, made in one pass;
        None if its files are not in name order (text not normalized: it
        is then read whole)."""
        made = cls(directory, read, span)
        made._index()
        if not made.ordered:
            return None
        made.weight = len(made.firsts) + PAGES_HELD * PAGE
        return made

    def _index(self) -> None:
        start, end = self.span
        carry = b""
        at = start  # text offset of carry[0]
        state = _Indexing()
        pos = start
        while pos < end:
            piece = self.read(pos, min(pos + _PIECE, end))
            if not piece:
                raise CorruptDataError("the scratch copy of a manifest ends early")
            pos += len(piece)
            data = carry + piece
            if pos < end:
                cut = data.rfind(b" ")
                if cut < 0:
                    carry = data
                    continue
                chunk, carry = data[:cut], data[cut + 1 :]
            else:
                chunk, carry = data, b""
            self._tokens(state, chunk, at)
            at += len(chunk) + 1
        if not state.segments:
            raise CorruptDataError(f"the stream of {self.directory!r} holds no file")

    def _tokens(self, state: _Indexing, chunk: bytes, base: int) -> None:
        """Index the whole tokens ``chunk`` (joined by spaces) at text offset ``base``."""
        tokens = chunk.split(b" ")
        first = 0
        if not state.named:
            state.named = True
            first = 1
        if not state.segments:
            # The block list: (almost always) a few tokens; a Python loop.
            offset = base + sum(map(len, tokens[:first])) + first
            while first < len(tokens) and b":" not in tokens[first]:
                token = tokens[first]
                if state.blocks % LOCATOR_PAGE == 0:
                    self.block_starts.append(self.size)
                    self.block_offsets.append(offset)
                self.size += _block_size(token)
                state.blocks += 1
                offset += len(token) + 1
                first += 1
            if first == len(tokens):
                return
            if not state.blocks:
                raise CorruptDataError(f"the stream of {self.directory!r} lists no block")
            state.segments = True
            self.blocks_end = offset - 1
        segments = tokens[first:] if first else tokens
        names = _NAME.findall(b" ".join(segments)) if first else _NAME.findall(chunk)
        if len(names) != len(segments):
            raise CorruptDataError(f"a segment of {self.directory!r} does not parse")
        # Offsets of the tokens in the text, at C speed: a million files' worth.
        lengths = [len(t) + 1 for t in segments]
        starts = [0, *accumulate(lengths)]
        head = base + sum(len(t) + 1 for t in tokens[:first])
        previous = [state.last, *names[:-1]]
        changes = list(map(ne, names, previous))
        if b"\\" in chunk:
            plain = [_unescaped(n) for n in names]
            before = [_unescaped(state.last) if state.last else "", *plain[:-1]]
            disorder = any(map(gt, before, plain))
        else:
            disorder = any(map(gt, previous, names))
        if disorder:
            self.ordered = False
        new = list(compress(range(len(names)), changes)) if not all(changes) else None
        count = len(new) if new is not None else len(names)
        skip = (-self.count) % PAGE
        for k in range(skip, count, PAGE):
            i = new[k] if new is not None else k
            self.firsts.append(_unescaped(names[i]))
            self.offsets.append(head + starts[i])
        self.count += count
        state.last = names[-1]

    # -- reading pages --------------------------------------------------------

    def _page(self, number: int) -> _Page:
        with self._lock:
            held = self._pages.get(number)
            if held is not None:
                self._pages.move_to_end(number)
                return held
        start = self.offsets[number]
        end = self.offsets[number + 1] - 1 if number + 1 < len(self.offsets) else self.span[1]
        page = self._parse(self.read(start, end), number)
        with self._lock:
            self._pages[number] = page
            while len(self._pages) > PAGES_HELD:
                self._pages.popitem(last=False)
        return page

    def _parse(self, text: bytes, number: int) -> _Page:
        found = _SEGMENTS.findall(text)
        if len(found) != text.count(b" ") + 1:
            raise CorruptDataError(f"a segment of {self.directory!r} does not parse")
        prefix = self.directory + "/" if self.directory else ""
        names: list[str] = []
        entries: list[FileEntry] = []
        i, count = 0, len(found)
        while i < count:
            raw = found[i][2]
            j = i + 1
            while j < count and found[j][2] == raw:
                j += 1  # the file's other segments
            name = _unescaped(raw)
            if "/" in name or name in (".", ".."):
                raise CorruptDataError(f"a file of {self.directory!r} is named {name!r}")
            names.append(name)
            if j == i + 1:
                entries.append(self._entry(prefix + name, int(found[i][0]), int(found[i][1])))
            else:
                spans = [(int(p), int(n)) for p, n, _ in found[i:j]]
                entries.append(self._pieces(prefix + name, spans))
            i = j
        expected = min(PAGE, self.count - number * PAGE)
        if len(names) != expected or names[0] != self.firsts[number]:
            raise CorruptDataError(f"the stream of {self.directory!r} changed under its index")
        return _Page(names, entries)

    def _entry(self, path: str, position: int, length: int) -> FileEntry:
        """The file of one segment: most often inside one block."""
        if position + length > self.size:
            raise CorruptDataError(f"{path!r} lies past its stream")
        if not length:
            return FileEntry(path, 0, ())
        starts, locators = self._blocks_at(position)
        i = bisect.bisect_right(starts, position) - 1
        offset = position - starts[i]
        if offset + length <= locators[i].size:
            return FileEntry(path, length, (FilePiece(locators[i], offset, length),))
        return self._pieces(path, [(position, length)])

    def _pieces(self, path: str, spans: list[tuple[int, int]]) -> FileEntry:
        """The file at ``spans`` of the stream, piece by piece (as a whole
        parse makes it: a piece a block touched, touching pieces merged)."""
        pieces: list[FilePiece] = []
        size = 0
        for position, length in spans:
            size += length
            if position + length > self.size:
                raise CorruptDataError(f"{path!r} lies past its stream")
            while length:
                starts, locators = self._blocks_at(position)
                i = bisect.bisect_right(starts, position) - 1
                while length and i < len(locators):
                    locator = locators[i]
                    offset = position - starts[i]
                    take = min(length, locator.size - offset)
                    if take > 0:
                        _append_piece(pieces, locator, offset, take)
                        position += take
                        length -= take
                    i += 1
        return FileEntry(path, size, tuple(pieces))

    def _blocks_at(self, position: int) -> tuple[list[int], list[Locator]]:
        """The page of blocks holding stream ``position``: their starts and locators."""
        low, high, last = self._last_blocks
        if low <= position < high:
            return last  # most streams have one page of blocks
        number = max(bisect.bisect_right(self.block_starts, position) - 1, 0)
        with self._lock:
            held = self._blocks.get(number)
            if held is not None:
                self._blocks.move_to_end(number)
        if held is not None:
            self._last_blocks = (held[0][0], held[0][-1] + held[1][-1].size, held)
            return held
        start = self.block_offsets[number]
        final = number + 1 >= len(self.block_offsets)
        end = self.blocks_end if final else self.block_offsets[number + 1] - 1
        starts: list[int] = []
        locators: list[Locator] = []
        at = self.block_starts[number]
        for token in self.read(start, end).split(b" "):
            try:
                locator = Locator.parse(token.decode("ascii"))
            except (LocatorError, UnicodeDecodeError):
                raise CorruptDataError(f"a block of {self.directory!r} does not parse") from None
            starts.append(at)
            locators.append(locator)
            at += locator.size
        with self._lock:
            self._blocks[number] = (starts, locators)
            while len(self._blocks) > 4:
                self._blocks.popitem(last=False)
        self._last_blocks = (starts[0], at, (starts, locators))
        return starts, locators

    # -- what the tree asks ---------------------------------------------------

    def find(self, name: str) -> tuple[int, FileEntry] | None:
        number = bisect.bisect_right(self.firsts, name) - 1
        if number < 0:
            return None
        page = self._page(number)
        i = page.places.get(name)
        return None if i is None else (number * PAGE + i, page.entries[i])

    def place_of(self, name: str) -> int:
        # One bisect of the index, one page parsed.
        number = bisect.bisect_right(self.firsts, name) - 1
        if number < 0:
            return 0
        page = self._page(number)
        return number * PAGE + bisect.bisect_left(page.names, name)

    def run(self, start: int, count: int) -> Run:
        out: Run = []
        place = max(start, 0)
        while len(out) < count and place < self.count:
            number, i = divmod(place, PAGE)
            page = self._page(number)
            take = page.names[i : i + count - len(out)]
            out += zip(take, page.entries[i : i + len(take)], strict=True)
            place += len(take)
        return out

    def holds(self, place: int) -> bool:
        """Whether the page of the file at ``place`` is parsed and kept."""
        with self._lock:
            return place // PAGE in self._pages


@dataclass
class _Indexing:
    named: bool = False
    segments: bool = False
    blocks: int = 0
    last: bytes = b""


def _unescaped(raw: bytes) -> str:
    try:
        return unescape_name(raw.decode("utf-8"))
    except ValueError:  # UnicodeDecodeError is one
        raise CorruptDataError(f"a file name in a manifest does not parse: {raw[:80]!r}") from None


def _block_size(token: bytes) -> int:
    parts = token.split(b"+", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise CorruptDataError(f"a block in a manifest does not parse: {token[:80]!r}")
    return int(parts[1])
