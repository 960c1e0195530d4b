"""Where a put writes its manifest text and md5sum listing as it goes.

The writer hands over each directory's stream once the blocks holding it
are stored, and its files' MD5s with it; both go to scratch files at once,
so nothing of a file is held to the end of the put, and the PDH is the MD5
of the text as it is written. Recording the collection reads them back a
piece at a time.

The files are unnamed (``O_TMPFILE``, or created and unlinked at once):
closed, or when the process dies however it dies, they are gone, and a
put killed halfway leaves no spool behind. They are made in the
warehouse's own scratch directory (its ``tmp``), next to the blocks,
rather than in a ``/tmp`` that may be a small RAM file system.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

from warehouse.blocks.locator import EMPTY_LOCATOR
from warehouse.manifest.entries import Stream, format_stream

__all__ = ["Spool", "scratch_dir"]

# JSON's own string encoder (C), as a listing writes each path.
_quote: Callable[[str], str] = json.encoder.encode_basestring
# What the spool's files buffer before writing (they are written in order).
_BUFFER = 1 << 20


def scratch_dir(home: Path) -> Path:
    """A warehouse home's scratch directory, made private if it is new."""
    path = home / "tmp"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


class Spool:
    """The manifest text and listing of one put, in two unnamed scratch files.

    ``text`` holds the streams as the manifest has them with their
    locators' hints (what a controller wants); the PDH is taken over the
    portable text (no hints), and ``portable`` says whether the two are
    the same (a local store gives no hints).
    """

    def __init__(self, directory: Path | None = None) -> None:
        # Held open for the put's life and closed by close(): no `with`.
        self._text: IO[bytes] = tempfile.TemporaryFile(  # noqa: SIM115
            dir=directory, prefix="put-", buffering=_BUFFER
        )
        try:
            self._listing: IO[bytes] = tempfile.TemporaryFile(  # noqa: SIM115
                dir=directory, prefix="put-", buffering=_BUFFER
            )
        except BaseException:
            self._text.close()
            raise
        self._md5 = hashlib.md5()
        self.text_size = 0  # bytes of the portable text
        self.portable = True
        self.file_count = 0
        self.size = 0  # bytes of the files
        self.streams = 0
        self._listed = False  # an entry is in the listing file

    def add(self, stream: Stream, rel: str, names: Sequence[str], md5s: bytes | bytearray) -> None:
        """One directory's stream and its files' MD5s (16 bytes each, in the order of ``names``)."""
        portable = format_stream(stream, hints=False).encode()
        hinted = portable
        if any(loc.hints for loc in stream.locators):
            hinted = format_stream(stream, hints=True).encode()
            self.portable = False
        self._text.write(hinted)
        self._md5.update(portable)
        self.text_size += len(portable)
        self.streams += 1
        self.size += sum(seg.length for seg in stream.segments)
        if not names:
            return
        prefix = rel + "/" if rel else ""
        quote = _quote
        entries = ",".join(
            f'{quote(prefix + name)}:"{md5s[16 * i : 16 * i + 16].hex()}"'
            for i, name in enumerate(names)
        )
        self._listing.write((("," if self._listed else "") + entries).encode())
        self._listed = True
        self.file_count += len(names)

    def add_line(self, portable: bytes, files: int, size: int) -> None:
        """One stream as a line of portable text already written (a
        controller recording a client's put), holding ``files`` files and
        ``size`` bytes."""
        self._text.write(portable)
        self._md5.update(portable)
        self.text_size += len(portable)
        self.streams += 1
        self.file_count += files
        self.size += size

    def add_entries(self, entries: str) -> None:
        """Listing entries as ``add`` writes them, commas between, in manifest
        order (the files ``add_line`` counted)."""
        if entries:
            self._listing.write((("," if self._listed else "") + entries).encode())
            self._listed = True

    def written(self) -> tuple[int, int]:
        """Bytes of what ``text_pieces`` and ``listing_pieces`` give (UTF-8)."""
        self._text.flush()
        self._listing.flush()
        listing = os.fstat(self._listing.fileno()).st_size + 2  # and its braces
        return os.fstat(self._text.fileno()).st_size, listing

    @property
    def pdh(self) -> str:
        """The portable data hash of the text written so far."""
        if not self.text_size:
            return str(EMPTY_LOCATOR)
        return f"{self._md5.hexdigest()}+{self.text_size}"

    def text_pieces(self, size: int) -> Iterator[bytes]:
        """The manifest text (with hints, if any) in pieces of at most ``size`` bytes."""
        self._text.flush()
        self._text.seek(0)
        while piece := self._text.read(size):
            yield piece

    def text(self) -> bytes:
        """The manifest text whole (a caller that needs all of it)."""
        return b"".join(self.text_pieces(1 << 24))

    def listing(self) -> str:
        """The listing as the catalog keeps it: one JSON object, files in manifest order."""
        return "".join(self.listing_pieces(1 << 24))

    def listing_pieces(self, size: int) -> Iterator[str]:
        """The listing's JSON text in pieces of at most ``size`` bytes (split
        between characters, never inside one)."""
        self._listing.flush()
        self._listing.seek(0)
        decode = codecs.getincrementaldecoder("utf-8")().decode
        piece = "{"
        while data := self._listing.read(size - len(piece)):
            piece += decode(data)
            if len(piece) >= size // 2:
                yield piece
                piece = ""
        yield piece + decode(b"", final=True) + "}"

    def close(self) -> None:
        self._text.close()
        self._listing.close()

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
