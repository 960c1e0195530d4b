"""A manifest's text held in an unnamed scratch file, read back a piece at
a time or line by line (see ``StoredText``)."""

from __future__ import annotations

import codecs
import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from warehouse.blocks.locator import EMPTY_LOCATOR
from warehouse.collection.scratchfile import ScratchFile
from warehouse.errors import CorruptDataError
from warehouse.manifest.parse import ManifestError, decode_line

__all__ = ["StoredText", "stored_text_damage"]

# What a stored text is read and written by at once: little beside a 100,000
# files' text (1.4 MB), which is what it replaces.
_PIECE = 1 << 18
_TEXT_BUFFER = 1 << 18


class StoredText(ScratchFile):
    """A manifest's text in an unnamed scratch file, read back a piece at a time.

    Written once (``write``, then ``done``), then read as often as wanted:
    each ``lines()`` reads from its own position, so two readers of it, one
    of them stopped halfway, do not disturb each other. The text's MD5 and
    length are taken as it is written (``pdh``). Holding a ten-million-file
    manifest (140 MB) this way costs a piece of it, not all of it.
    """

    def __init__(self, directory: Path | None = None) -> None:
        # Held open for the reader's life and closed by close(): no `with`.
        self._file: IO[bytes] = tempfile.TemporaryFile(  # noqa: SIM115
            dir=directory, prefix="text-", buffering=_TEXT_BUFFER
        )
        self._md5 = hashlib.md5()
        self.size = 0
        self._last = b""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        self._file.write(data)
        self._md5.update(data)
        self.size += len(data)
        self._last = bytes(data[-1:])

    def done(self) -> StoredText:
        """Every piece is written: flush them for the readers."""
        self._file.flush()
        return self

    @property
    def pdh(self) -> str:
        """The portable data hash of the text, if it is its portable form."""
        if not self.size:
            return str(EMPTY_LOCATOR)
        return f"{self._md5.hexdigest()}+{self.size}"

    def ends_with_newline(self) -> bool:
        return self._last == b"\n"

    def pieces(self, size: int, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The text (or its bytes from ``start`` to ``end``) in pieces of at
        most ``size`` bytes, in order."""
        fd = self._file.fileno()
        pos = start
        stop = self.size if end is None else min(end, self.size)
        while pos < stop:
            piece = os.pread(fd, min(size, stop - pos), pos)
            if not piece:  # an unnamed file nobody else can reach: cut short means gone
                raise OSError(f"the scratch copy of a manifest ends at {pos} of {self.size} bytes")
            pos += len(piece)
            yield piece

    def line_spans(self, limit: int) -> Iterator[str | tuple[int, int]]:
        """Each line as ``lines`` gives it, but a line of more than ``limit``
        bytes as where it lies instead, (start, end) without its newline,
        never held: a reader goes through it a piece at a time (``pieces``)."""
        number = 0
        held: list[bytes] = []  # the start of a short line begun in an earlier piece
        held_size = 0
        long = False  # the current line is past ``limit``: only its start is kept
        line_start = 0
        offset = 0  # of the piece
        for piece in self.pieces(_PIECE):
            start = 0
            find = piece.find
            while (end := find(b"\n", start)) >= 0:
                number += 1
                if long or held_size + end - start > limit:
                    yield (line_start, offset + end)
                elif held:
                    held.append(piece[start:end])
                    yield decode_line(b"".join(held), number)
                else:
                    yield decode_line(piece[start:end], number)
                held, held_size, long = [], 0, False
                start = end + 1
                line_start = offset + start
            if start < len(piece) and not long:
                held_size += len(piece) - start
                if held_size > limit:
                    held, long = [], True
                else:
                    held.append(piece[start:])
            offset += len(piece)
        if long:  # no final newline: the parser asks ends_with_newline() first
            yield (line_start, offset)
        elif held:
            yield decode_line(b"".join(held), number + 1)

    def lines(self) -> Iterator[str]:
        """Each line, decoded, without its newline (a line may span pieces)."""
        number = 0
        held: list[bytes] = []  # the start of a line that began in an earlier piece
        for piece in self.pieces(_PIECE):
            start = 0
            find = piece.find
            end = find(b"\n")
            if end < 0:
                held.append(piece)
                continue
            if held:
                held.append(piece[:end])
                number += 1
                yield decode_line(b"".join(held), number)
                held = []
                start = end + 1
                end = find(b"\n", start)
            while end >= 0:
                number += 1
                yield decode_line(piece[start:end], number)
                start = end + 1
                end = find(b"\n", start)
            if start < len(piece):
                held.append(piece[start:])
        if held:  # no final newline: the parser asks ends_with_newline() first
            number += 1
            yield decode_line(b"".join(held), number)

    def decoded_pieces(self, size: int = _PIECE) -> Iterator[str]:
        """The text (UTF-8) as strings of at most ``size`` characters, cut
        between characters, never inside one."""
        decode = codecs.getincrementaldecoder("utf-8")().decode
        for piece in self.pieces(size):
            if decoded := decode(piece):
                yield decoded
        if rest := decode(b"", final=True):
            yield rest

    def read(self) -> bytes:
        """The whole text (a caller that needs all of it)."""
        return b"".join(self.pieces(_PIECE))

    def __enter__(self) -> StoredText:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def stored_text_damage(collection: str) -> Iterator[None]:
    """A stored manifest (or the one a controller sent) that does not parse
    is damage, exit 5 as a bad block is, not the caller's bad input (2): the
    text was checked against its PDH, or the controller stands for it."""
    try:
        yield
    except ManifestError as e:
        raise CorruptDataError(f"the stored manifest of {collection} does not parse: {e}") from None
