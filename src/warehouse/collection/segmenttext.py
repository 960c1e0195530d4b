"""A spilled directory's segments as manifest text, in a scratch file."""

from __future__ import annotations

import os
import tempfile
from bisect import bisect_right
from collections.abc import (
    Iterable,
    Iterator,
    Sequence,
)
from typing import IO, Any

from warehouse.blocks import Locator
from warehouse.collection.scratch import ScratchFile
from warehouse.manifest import Segment, Stream
from warehouse.manifest.entries import FileEntry, FilePiece
from warehouse.manifest.escape import escape_name
from warehouse.manifest.parse import parse_streams


class SegmentText(ScratchFile):
    """The segments of a directory of spilled files (``SpilledFiles``), as
    the text of its manifest line has them (" position:length:name" each),
    in an unnamed scratch file: written as the files are read, copied after
    the stream's locators once its blocks are stored."""

    def __init__(self) -> None:
        # Closed by close() (or with the object): no `with`.
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="put-segments-", buffering=1 << 20)  # noqa: SIM115
        self.size = 0
        self.data_size = 0
        self._pending: list[str] = []  # segments not written yet, written together

    def append(self, segment: Segment) -> None:
        # As format_stream writes it. A file's name here has no "/" and is
        # no "." (which it would escape further): a directory's entry.
        text = f" {segment.position}:{segment.length}:{escape_name(segment.name)}"
        self._pending.append(text)
        self.data_size += segment.length  # as read (a changing file may differ from its scan)
        if len(self._pending) >= 8192:
            self._write()

    def _write(self) -> None:
        data = "".join(self._pending).encode()
        self._pending.clear()
        self._file.write(data)
        self.size += len(data)

    def pieces(self, size: int = 1 << 18) -> Iterator[bytes]:
        if self._pending:
            self._write()
        self._file.flush()
        fd = self._file.fileno()
        pos = 0
        while pos < self.size:
            piece = os.pread(fd, min(size, self.size - pos), pos)
            if not piece:
                raise OSError(f"a scratch file of a put ends at {pos} of {self.size} bytes")
            pos += len(piece)
            yield piece

    def positions(self) -> Iterator[tuple[int, int]]:
        """Each segment's position and length, in order, read back from scratch."""
        rest = b""
        for piece in self.pieces():
            words = (rest + piece).split(b" ")
            rest = words.pop()  # may go on in the next piece
            for word in words:
                if word:
                    position, length, _ = word.split(b":", 2)
                    yield int(position), int(length)
        if rest:
            position, length, _ = rest.split(b":", 2)
            yield int(position), int(length)

    def entries(
        self, rel: str, names: Iterable[str], locators: Sequence[Locator]
    ) -> Iterator[FileEntry]:
        """Each file's entry (its pieces block by block), as ``file_entries``
        makes them of a stream laid out normalized (one segment a file, no
        block named twice), a file at a time in the order of ``names``."""
        starts = [0]
        for loc in locators:
            starts.append(starts[-1] + loc.size)
        prefix = rel + "/" if rel else ""
        for name, (position, length) in zip(names, self.positions(), strict=True):
            pieces: list[FilePiece] = []
            if length and len(locators) == 1:
                pieces.append(FilePiece(locators[0], position, length))
            elif length:
                # bisect_right skips empty blocks that share a start.
                index = bisect_right(starts, position) - 1
                left = length
                while left:
                    loc = locators[index]
                    take = min(left, loc.size - (position - starts[index]))
                    if take > 0:
                        pieces.append(FilePiece(loc, position - starts[index], take))
                        position += take
                        left -= take
                    index += 1
            yield FileEntry(prefix + name, length, tuple(pieces))

    def stream(self, name: str, locators: Sequence[Any]) -> Stream:
        """The stream whole (where it must be normalized again, or is kept in memory)."""
        head = " ".join([escape_name(name), *(str(loc) for loc in locators)]).encode()
        (stream,) = parse_streams(b"".join([head, *self.pieces(), b"\n"]))
        return stream
