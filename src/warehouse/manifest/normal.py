"""Manifest text already in normalized form, checked and summed up stream by stream.

A big collection's manifest is nearly always written normalized (every
writer here produces that form). Such text needs no file table to store or
list: each line is parsed, checked against the normalized form's rules and
dropped. :func:`normal_summary` answers None as soon as a line breaks a rule;
the caller then builds the whole :class:`~warehouse.manifest.Manifest` and
normalizes it as before.

The rules (DESIGN 3.2): streams in depth-first order of their directories,
one per directory; a directory's stream holds its files in name order, each
file's segments together, adjacent ones merged, an empty file as ``0:0:name``;
each block once, in the order first used; an empty directory is a stream of
its own made of the empty block and ``0:0:\\056``, with nothing below it.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

from warehouse.blocks.locator import EMPTY_LOCATOR, Locator
from warehouse.manifest.escape import escape_name
from warehouse.manifest.parse import (
    LinePieces,
    RawSegment,
    RawStream,
    Text,
    iter_line_pieces,
    iter_raw_parts,
    iter_raw_streams,
)

__all__ = [
    "Ancestors",
    "NormalOrder",
    "NormalSummary",
    "TooManyNames",
    "is_marker",
    "iter_normal_dirs",
    "iter_normal_files",
    "normal_pdh",
    "normal_summary",
    "portable_line",
]

_MARKER_TAIL = f" {EMPTY_LOCATOR.key} 0:0:\\056"


@dataclass(frozen=True)
class NormalSummary:
    """What recording a collection needs of its normalized manifest text."""

    pdh: str
    portable: bytes  # the text to store: the normalized text without hints
    file_count: int
    size: int
    blocks: tuple[Locator, ...]  # distinct stored blocks, first use first


class NormalOrder:
    """Whether each stream comes where the normalized form puts it, and is
    written as that form writes it (``line``)."""

    def __init__(self) -> None:
        self.previous: list[str] | None = None
        self.previous_empty = False  # the previous stream was an empty directory

    def next(self, name: str) -> bool:
        key = [] if name == "." else name[2:].split("/")
        previous = self.previous
        if previous is not None:
            if key <= previous:
                return False
            if self.previous_empty and key[: len(previous)] == previous:
                return False  # a directory with a subdirectory is not empty
        self.previous = key
        return True

    def line(
        self, line: str, name: str, locators: tuple[Locator, ...], segments: list[RawSegment]
    ) -> tuple[int, int] | None:
        """(files, bytes) of the next stream, ``line`` parsed; None if it
        breaks a rule of the normalized form, here or where it comes."""
        if not self.next(name):
            return None
        if escape_name(name) != line[: line.find(" ")]:
            return None
        marker = is_marker(segments[0][2])
        if marker:
            if name == "." or not line.endswith(_MARKER_TAIL) or len(segments) > 1:
                return None
            if len(line) != line.find(" ") + len(_MARKER_TAIL):
                return None
            sums = (0, 0)
        else:
            found = _stream_sums(locators, segments)
            if found is None or not _names_canonical(line, segments):
                return None
            sums = found
        self.previous_empty = marker
        return sums


class TooManyNames(Exception):
    """A stream and those above it name more characters of files than allowed."""


class Ancestors:
    """The streams above the current one, with their files' names: a file
    that is also a directory is found as the directory's stream comes
    (normalized text puts a directory's stream after its parent's). Each
    is held as the length of its path, a prefix of the current stream's,
    so that deep paths cost their own line only; the names held together
    are bounded (``limit`` characters), or a chain of directories, each
    with a large stream, would hold the manifest."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._path = ""  # the current stream's path ("" for ".")
        # (length of its path, line, its files' names, their characters)
        self._stack: list[tuple[int, int, set[str], int]] = []
        self._held = 0

    def enter(self, number: int, name: str, files: set[str]) -> str | None:
        """Stream ``name`` on line ``number``: the path of a file it makes a
        directory of, with the file's line, if any."""
        path = "" if name == "." else name[2:]
        stack, last = self._stack, self._path
        while stack:
            n = stack[-1][0]
            if n == 0 or (path[:n] == last[:n] and path[n : n + 1] in ("", "/")):
                break  # an ancestor (or "."), and so are those under it
            self._held -= stack.pop()[3]
        clash = None
        # Only the nearest ancestor's files need a look: what this path has
        # below each one further up, the stream before had too (and it was
        # looked at then), so a chain of nested streams costs no more.
        if stack and (len(path) > stack[-1][0] or not stack[-1][0]):
            n, line, names, _ = stack[-1]
            start = n + 1 if n else 0
            stop = path.find("/", start)
            below = path[start:] if stop < 0 else path[start:stop]
            if below in names:
                where = path[: start + len(below)]
                clash = f"{where!r} is a file and also a directory (line {line}: {below!r})"
        size = sum(map(len, files))
        self._held += size
        if self._held > self._limit:
            raise TooManyNames(
                f"manifest line {number}: it and the streams above it name over "
                f"{self._limit} characters of files"
            )
        stack.append((len(path), number, files, size))
        self._path = path
        return clash


def _names_canonical(line: str, segments: list[RawSegment]) -> bool:
    """Every segment name written the way the writer writes it."""
    tail = line[line.find(" ") :]
    if "\\" not in tail:
        # Two colons a segment: no name holds a raw ':' (which must be escaped).
        return tail.count(":") == 2 * len(segments)
    tokens = line.split(" ")
    for token, (_, _, name) in zip(tokens[len(tokens) - len(segments) :], segments, strict=True):
        if token.split(":", 2)[2] != escape_name(name):
            return False
    return True


def _stream_sums(
    locators: tuple[Locator, ...], segments: list[RawSegment]
) -> tuple[int, int] | None:
    """(files, bytes) of a normalized stream of files; None if it is not normalized."""
    sums = _StreamSums.of(locators)
    if sums is None or not sums.add(segments):
        return None
    return sums.end()


class _StreamSums:
    """(files, bytes) of a normalized stream of files, its segments given a
    run at a time, in order (a long line's a piece at a time)."""

    def __init__(self, locators: tuple[Locator, ...], starts: list[int]) -> None:
        self.locators = locators
        self.starts = starts
        self.used = 0  # blocks used so far: the next block first used must be this one
        self.files = self.size = 0
        self.previous: str | None = None
        self.previous_end = self.previous_length = -1

    @classmethod
    def of(cls, locators: tuple[Locator, ...]) -> _StreamSums | None:
        """None if the block list is not normalized."""
        count = len(locators)
        starts: list[int] = []
        total = 0
        keys: set[str] = set()
        for locator in locators:
            # A block of no bytes holds nothing any file uses: normalizing drops it.
            if locator.size == 0 and count > 1:
                return None
            keys.add(locator.key)
            starts.append(total)
            total += locator.size
        if len(keys) != count:
            return None
        return cls(locators, starts)

    def add(self, segments: list[RawSegment]) -> bool:
        """False if these segments break the normalized form."""
        count = len(self.locators)
        starts = self.starts
        used, files, size = self.used, self.files, self.size
        previous, previous_end, previous_length = (
            self.previous,
            self.previous_end,
            self.previous_length,
        )
        for position, length, name in segments:
            if name == previous:
                # The same file again: only after a non-empty piece, not adjacent.
                if not length or not previous_length or position == previous_end:
                    return False
            else:
                if previous is not None and name < previous:
                    return False
                if "/" in name or name == ".":
                    return False
                if not length and position:
                    return False
                files += 1
            if length:
                if count == 1:
                    first = last = 0
                else:
                    first = bisect_right(starts, position) - 1
                    last = bisect_right(starts, position + length - 1) - 1
                if first > used:
                    return False
                if last >= used:
                    used = last + 1
            size += length
            previous, previous_end, previous_length = name, position + length, length
        self.used, self.files, self.size = used, files, size
        self.previous, self.previous_end, self.previous_length = (
            previous,
            previous_end,
            previous_length,
        )
        return True

    def end(self) -> tuple[int, int] | None:
        """(files, bytes) of the stream; None if it is not normalized."""
        locators = self.locators
        count = len(locators)
        if self.used != count and not (self.used == 0 and count == 1 and locators[0].is_empty):
            return None
        return self.files, self.size


def normal_summary(text: str | bytes) -> NormalSummary | None:
    """Check ``text`` and sum it up, if it is in normalized form; else None.

    Raises ManifestError for malformed text met before the first line found
    not normalized (the caller's whole parse reports any later one).
    Holds one stream at a time, besides the text and its portable form.
    """
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    order = NormalOrder()
    portable: list[str] | None = None  # built only when a locator has hints
    blocks: dict[str, Locator] = {}
    files = size = 0
    for count, (line, (name, locators, segments)) in enumerate(iter_raw_streams(text)):
        sums = order.line(line, name, locators, segments)
        if sums is None:
            return None
        files += sums[0]
        size += sums[1]
        hinted = False
        for locator in locators:
            hinted = hinted or bool(locator.hints)
            if not locator.is_empty:
                blocks.setdefault(locator.key, locator)
        if hinted and portable is None:
            portable = [] if count == 0 else _lines_before(data, count)
        if portable is not None:
            portable.append(portable_line(line, locators) if hinted else line)
    out = data if portable is None else "".join(p + "\n" for p in portable).encode()
    pdh = f"{hashlib.md5(out).hexdigest()}+{len(out)}" if out else EMPTY_LOCATOR.key
    return NormalSummary(pdh, out, files, size, tuple(blocks.values()))


def normal_pdh(text: Text) -> str | None:
    """The PDH of ``text`` (the MD5 and length of its portable form), if it
    is in normalized form; else None. Checked as ``normal_summary`` checks,
    but a line at a time: nothing is held but one stream, whatever the size
    of the text (which may be a scratch file), and of a long line of a
    scratch file a piece (``iter_line_pieces``)."""
    order = NormalOrder()
    md5 = hashlib.md5()
    length = 0
    for _, line, got in iter_line_pieces(text):
        if line is None:
            found = _long_line_portable(order, cast(LinePieces, got), md5)
            if found is None:
                return None
            length += found
            continue
        name, locators, segments = cast(RawStream, got)
        if order.line(line, name, locators, segments) is None:
            return None
        hinted = any(locator.hints for locator in locators)
        data = ((portable_line(line, locators) if hinted else line) + "\n").encode()
        md5.update(data)
        length += len(data)
    return f"{md5.hexdigest()}+{length}" if length else EMPTY_LOCATOR.key


def _long_line_portable(order: NormalOrder, pieces: LinePieces, md5: Any) -> int | None:
    """Check a long line a piece at a time as ``NormalOrder.line`` checks a
    line, adding its portable form to ``md5``; its length, or None if it
    breaks a rule of the normalized form."""
    sums: _StreamSums | None = None
    length = 0
    for count, ((name, locators, segments), written) in enumerate(pieces):
        if count == 0:
            if not order.next(name) or escape_name(name) != written[: written.find(" ")]:
                return None
            if is_marker(segments[0][2]):
                # Only a stream name of over a piece makes a marker's line long.
                if name == "." or len(segments) > 1:
                    return None
                if written != written[: written.find(" ")] + _MARKER_TAIL:
                    return None
                order.previous_empty = True
            else:
                sums = _StreamSums.of(locators)
                if sums is None:
                    return None
                order.previous_empty = False
            canonical = written
            if any(locator.hints for locator in locators):
                written = portable_line(written, locators)
        else:
            if sums is None:  # a marker's line goes on
                return None
            canonical = written = " " + written
        if sums is not None and (
            not sums.add(segments) or not _names_canonical(canonical, segments)
        ):
            return None
        data = written.encode()
        md5.update(data)
        length += len(data)
    if sums is not None and sums.end() is None:
        return None
    md5.update(b"\n")
    return length + 1


def _lines_before(data: bytes, count: int) -> list[str]:
    return data.decode("utf-8").split("\n")[:count]


def is_marker(name: str) -> bool:
    return name == "." or name.endswith("/.")


def portable_line(line: str, locators: tuple[Locator, ...]) -> str:
    tokens = line.split(" ")
    keys = [locator.key for locator in locators]
    return " ".join([tokens[0], *keys, *tokens[1 + len(keys) :]])


def iter_normal_files(text: Text) -> Iterator[tuple[str, int | None]]:
    """Each file of normalized ``text`` as (path, size), in manifest order, and
    each empty directory as (path, None), one stream at a time.

    Only for text known to be normalized (a stored manifest, checked against
    its PDH): in other text a file may be split over several streams.
    """
    for prefix, names, sizes in iter_normal_dirs(text):
        if names is None:
            yield prefix[:-1], None
        else:
            yield from zip([prefix + name for name in names], sizes, strict=True)


def iter_normal_dirs(text: Text) -> Iterator[tuple[str, list[str] | None, list[int]]]:
    """Each stream of normalized ``text`` as (its path prefix, its files' names,
    their sizes); an empty directory's as (prefix, None, []).

    The prefix is ``""`` for the root, else the directory's path and a '/'.
    A long stream comes in parts, one after another, each with its prefix
    (``iter_raw_parts``); a file lies in one. Whole lists, so that a caller
    can format a stream's files at C speed.
    """
    for stream_name, _, segments in iter_raw_parts(text):
        prefix = "" if stream_name == "." else stream_name[2:] + "/"
        if is_marker(segments[0][2]):
            yield prefix, None, []
            continue
        names = [segment[2] for segment in segments]
        if len(set(names)) == len(names):  # one segment a file: the usual case
            yield prefix, names, [segment[1] for segment in segments]
            continue
        merged: list[str] = []
        sizes: list[int] = []
        for _, length, name in segments:
            if merged and merged[-1] == name:
                sizes[-1] += length
            else:
                merged.append(name)
                sizes.append(length)
        yield prefix, merged, sizes
