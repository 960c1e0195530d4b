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
rather than in a ``/tmp`` that may be a small RAM file system. A put's
other scratch files are in ``collection.scratch``; a manifest's text read
back is a ``collection.storedtext.StoredText``.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO

from warehouse.blocks.locator import EMPTY_LOCATOR, Locator
from warehouse.collection.scratch import SpilledDigests, hex_digests
from warehouse.manifest.entries import Stream, format_stream
from warehouse.manifest.escape import escape_name

__all__ = ["Spool"]

# JSON's own string encoder (C), as a listing writes each path.
_quote: Callable[[str], str] = json.encoder.encode_basestring
# What the spool's files buffer before writing (they are written in order).
_BUFFER = 1 << 20


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
        self.directory = directory
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

    def add_parts(
        self,
        name: str,
        locators: Sequence[Locator],
        segments: Iterable[bytes],
        rel: str,
        names: Iterable[str],
        md5s: bytes | bytearray | SpilledDigests | Iterable[str],
        files: int,
        size: int,
    ) -> None:
        """One directory's stream as ``add`` writes it, given in parts: its
        locators, its segments' text (" position:length:name" each, as
        pieces of bytes) and its files' names as they are read back, with
        their MD5s (a table or a scratch file of them, or hex in order), so that neither the
        line nor the digests are held whole; the same bytes, the same PDH."""
        head = escape_name(name)
        portable = " ".join([head, *(loc.key for loc in locators)]).encode()
        hinted = portable
        if any(loc.hints for loc in locators):
            hinted = " ".join([head, *(str(loc) for loc in locators)]).encode()
            self.portable = False
        self._text.write(hinted)
        self._md5.update(portable)
        self.text_size += len(portable)
        for piece in segments:
            self._text.write(piece)
            self._md5.update(piece)
            self.text_size += len(piece)
        self._text.write(b"\n")
        self._md5.update(b"\n")
        self.text_size += 1
        self.streams += 1
        self.size += size
        prefix = rel + "/" if rel else ""
        quote = _quote
        batch: list[str] = []
        # zip(strict): a name without its digest, or one more digest, is an error.
        for file, md5 in zip(names, hex_digests(md5s), strict=True):
            batch.append(f'{quote(prefix + file)}:"{md5}"')
            if len(batch) >= 4096:
                self.add_entries(",".join(batch))
                batch = []
        self.add_entries(",".join(batch))
        self.file_count += files

    def add_line(self, portable: bytes, files: int, size: int, hinted: bytes | None = None) -> None:
        """One stream as a line of portable text already written (a
        controller recording a client's put), holding ``files`` files and
        ``size`` bytes; ``hinted``: the line as written, with its locators'
        hints, kept in the text (the PDH is still the portable text's)."""
        if hinted is not None and hinted != portable:
            self.portable = False
        self._text.write(portable if hinted is None else hinted)
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

    def text_ranges(self, size: int) -> tuple[int, list[tuple[int, int]]]:
        """The manifest text's scratch file (a descriptor, good until
        ``close``) and where its blocks of at most ``size`` bytes lie in it
        (offset, length): a store can take them from there a piece at a
        time (``LocalBlockStore.put_range``) rather than each held whole."""
        self._text.flush()
        fd = self._text.fileno()
        total = os.fstat(fd).st_size
        return fd, [(pos, min(size, total - pos)) for pos in range(0, total, size)]

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
