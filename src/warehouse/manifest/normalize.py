"""Building the normalized form (docs/formats.md, "Normalized form").

Normalizing only rearranges references to blocks: each file keeps exactly
the bytes it had, so the result can be computed from manifest text alone.
"""

from __future__ import annotations

from collections.abc import Iterable

from warehouse.blocks.locator import EMPTY_LOCATOR, Locator
from warehouse.errors import UsageError
from warehouse.manifest.entries import FileEntry, Segment, Stream

__all__ = ["StreamLayout", "normalized_streams"]

_MARKER = Segment(0, 0, ".")


def _check_path(path: str) -> None:
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts) or "\x00" in path:
        raise UsageError(f"bad path in collection: {path!r}")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates (undecodable file names) cannot be written as UTF-8.
        raise UsageError(f"path is not valid UTF-8: {path!r}") from None


def _check_pieces(entry: FileEntry) -> None:
    total = 0
    for piece in entry.pieces:
        if piece.offset < 0 or piece.length < 0 or piece.offset + piece.length > piece.locator.size:
            raise UsageError(f"piece of {entry.path!r} lies outside block {piece.locator.key}")
        total += piece.length
    if total != entry.size:
        raise UsageError(f"pieces of {entry.path!r} hold {total} bytes, not {entry.size}")


class StreamLayout:
    """Where the normalized form puts one directory's files, given a file at
    a time in name order: each block is listed at its first use, a file's
    pieces map onto that listing, and touching pieces are one segment.

    The same files given again to a fresh layout are placed the same way,
    so a stream too long to hold can be laid out twice: once for its block
    list (``locators``), then a file at a time for its segments.
    """

    __slots__ = ("_list", "_size", "_starts")

    def __init__(self) -> None:
        self._list: list[Locator] = []
        self._starts: dict[str, int] = {}
        self._size = 0

    def place(self, name: str, entry: FileEntry) -> list[Segment]:
        """The segments of ``entry`` (``name`` relative to the stream)."""
        segments: list[Segment] = []
        end = -1  # stream position where this file's last segment ends
        for piece in entry.pieces:
            if not piece.length:
                continue
            locator = piece.locator
            start = self._starts.get(locator.key)
            if start is None:
                # First use in this stream: append the block, hints as given.
                start = self._starts[locator.key] = self._size
                self._size += locator.size
                self._list.append(locator)
            position = start + piece.offset
            if position == end:
                last = segments[-1]
                segments[-1] = Segment(last.position, last.length + piece.length, name)
            else:
                segments.append(Segment(position, piece.length, name))
            end = position + piece.length
        if not segments:
            segments.append(Segment(0, 0, name))
        return segments

    @property
    def locators(self) -> tuple[Locator, ...]:
        """The blocks of the files placed so far, in the stream's order."""
        return tuple(self._list) or (EMPTY_LOCATOR,)


def _stream_for(directory: str, entries: list[FileEntry]) -> Stream:
    """One normalized stream for the files of one directory."""
    entries.sort(key=lambda entry: entry.path)
    layout = StreamLayout()
    segments: list[Segment] = []
    cut = len(directory) + 1 if directory else 0
    for entry in entries:
        segments.extend(layout.place(entry.path[cut:], entry))
    return Stream(_stream_name(directory), layout.locators, tuple(segments))


def _stream_name(directory: str) -> str:
    return "./" + directory if directory else "."


def normalized_streams(
    files: Iterable[FileEntry], empty_dirs: Iterable[str] = ()
) -> tuple[Stream, ...]:
    """The normalized streams holding ``files`` plus markers for ``empty_dirs``.

    Raises UsageError for bad paths, a path given twice or as both a file and
    a directory, or pieces that do not fit their blocks or do not add up to
    the file's size.
    """
    by_dir: dict[str, list[FileEntry]] = {}
    children: dict[str, set[str]] = {"": set()}
    seen: set[str] = set()

    def add_dir(path: str) -> None:
        # Register path and its parents; stop at the first one already known.
        children.setdefault(path, set())
        while path:
            parent, _, base = path.rpartition("/")
            siblings = children.setdefault(parent, set())
            if base in siblings:
                return
            siblings.add(base)
            path = parent

    for entry in files:
        _check_path(entry.path)
        if entry.path in seen:
            raise UsageError(f"file {entry.path!r} given twice")
        seen.add(entry.path)
        _check_pieces(entry)
        directory = entry.path.rpartition("/")[0]
        add_dir(directory)
        by_dir.setdefault(directory, []).append(entry)
    for directory in empty_dirs:
        directory = directory.rstrip("/")
        if directory:
            _check_path(directory)
            add_dir(directory)
    if both := seen & children.keys():
        raise UsageError(f"{min(both)!r} is both a file and a directory")

    streams: list[Stream] = []
    # Depth first, subdirectories in name order: "a", "a/b", then "a b".
    stack = [""]
    while stack:
        directory = stack.pop()
        entries = by_dir.get(directory)
        subdirs = children[directory]
        if entries:
            streams.append(_stream_for(directory, entries))
        elif not subdirs and directory:
            streams.append(Stream(_stream_name(directory), (EMPTY_LOCATOR,), (_MARKER,)))
        prefix = directory + "/" if directory else ""
        stack.extend(prefix + name for name in sorted(subdirs, reverse=True))
    return tuple(streams)
