"""From streams to files: where each file's bytes are, and which directories exist."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

from warehouse.blocks.locator import Locator
from warehouse.manifest.entries import FileEntry, FilePiece, Stream

__all__ = ["directories_of", "empty_directories_of", "file_entries", "marked_directories"]


def _prefix(stream_name: str) -> str:
    """What to put before a segment name to get a path from the root."""
    return "" if stream_name == "." else stream_name[2:] + "/"


def file_entries(streams: Iterable[Stream]) -> dict[str, FileEntry]:
    """Every file, in order of first appearance, with its pieces block by block.

    A file named in several segments (or streams) is their concatenation; a
    segment spanning blocks becomes one piece per block touched; touching
    pieces of the same block are merged into one.
    """
    sizes: dict[str, int] = {}
    pieces: dict[str, list[FilePiece]] = {}
    for stream in streams:
        prefix = _prefix(stream.name)
        locators = stream.locators
        if len(locators) == 1:
            _one_block(prefix, locators[0], stream, sizes, pieces)
            continue
        starts: list[int] = []
        total = 0
        for locator in locators:
            starts.append(total)
            total += locator.size
        for segment in stream.segments:
            name = segment.name
            if name == "." or name.endswith("/."):
                continue  # an empty-directory marker, not a file
            path = prefix + name if prefix else name
            file_pieces = pieces.get(path)
            if file_pieces is None:
                file_pieces = pieces[path] = []
                sizes[path] = 0
            remaining = segment.length
            if not remaining:
                continue
            sizes[path] += remaining
            position = segment.position
            # bisect_right skips zero-size blocks that share a start offset.
            index = bisect_right(starts, position) - 1
            while remaining:
                locator = locators[index]
                offset = position - starts[index]
                take = min(remaining, locator.size - offset)
                if take > 0:
                    _append_piece(file_pieces, locator, offset, take)
                    position += take
                    remaining -= take
                index += 1
    # Both dicts got their paths in the same order.
    return {
        path: FileEntry(path, size, tuple(file_pieces))
        for (path, file_pieces), size in zip(pieces.items(), sizes.values(), strict=True)
    }


def _one_block(
    prefix: str,
    locator: Locator,
    stream: Stream,
    sizes: dict[str, int],
    pieces: dict[str, list[FilePiece]],
) -> None:
    """``file_entries`` of a stream of one block (most are): each segment is
    one piece at its own position, with no search for its block."""
    for segment in stream.segments:
        name = segment.name
        if name == "." or name.endswith("/."):
            continue
        path = prefix + name
        length = segment.length
        file_pieces = pieces.get(path)
        if file_pieces is None:
            sizes[path] = length
            pieces[path] = [FilePiece(locator, segment.position, length)] if length else []
        elif length:
            sizes[path] += length
            _append_piece(file_pieces, locator, segment.position, length)


def _append_piece(pieces: list[FilePiece], locator: Locator, offset: int, length: int) -> None:
    if pieces:
        last = pieces[-1]
        if last.offset + last.length == offset and (
            last.locator is locator or last.locator.key == locator.key
        ):
            pieces[-1] = FilePiece(last.locator, last.offset, last.length + length)
            return
    pieces.append(FilePiece(locator, offset, length))


def marked_directories(streams: Iterable[Stream]) -> list[str]:
    """Directories named by empty-directory markers, root-relative, in order."""
    found: list[str] = []
    for stream in streams:
        prefix = _prefix(stream.name)
        for segment in stream.segments:
            if segment.is_directory_marker:
                # "." -> the stream's own directory; "sub/." -> prefix + "sub".
                found.append((prefix + segment.name[:-1]).rstrip("/"))
    return found


def _with_parents(paths: Iterable[str], into: set[str]) -> None:
    """Add each path and all its parent directories (but not the root) to ``into``."""
    for path in paths:
        while path and path not in into:
            into.add(path)
            path = path.rpartition("/")[0]


def directories_of(file_paths: Iterable[str], marked: Iterable[str]) -> set[str]:
    """Every directory that exists: parents of files and marked directories."""
    dirs: set[str] = set()
    _with_parents((path.rpartition("/")[0] for path in file_paths), dirs)
    _with_parents(marked, dirs)
    return dirs


def empty_directories_of(file_paths: Iterable[str], dirs: set[str]) -> list[str]:
    """The directories in ``dirs`` that hold neither files nor directories."""
    occupied = {path.rpartition("/")[0] for path in file_paths}
    occupied.update(path.rpartition("/")[0] for path in dirs)
    return sorted(dirs - occupied)
