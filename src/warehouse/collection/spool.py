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
import pickle
import struct
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, NamedTuple

from warehouse.blocks.locator import EMPTY_LOCATOR, Locator
from warehouse.blocks.store import StoredBlock
from warehouse.errors import UsageError
from warehouse.manifest.entries import FileEntry, FilePiece, Stream, format_stream
from warehouse.manifest.escape import escape_name
from warehouse.manifest.parse import decode_line

__all__ = [
    "BlockLog",
    "BlockRows",
    "CachedEntry",
    "Records",
    "SpilledDigests",
    "SpilledHits",
    "Spool",
    "StoredText",
    "held_entries",
    "hex_digests",
    "scratch_dir",
]

# A directory's entries held in memory at most while a put scans and packs
# it; beyond, they go to an unnamed scratch file (``Records``). A setting of
# the environment so tests reach it with a few thousand files.
HELD_ENTRIES = 100_000
HELD_ENTRIES_VAR = "WH_PUT_HELD_ENTRIES"


def held_entries() -> int:
    """How many of one directory's entries a put holds in memory at most."""
    value = os.environ.get(HELD_ENTRIES_VAR, "").strip()
    if not value:
        return HELD_ENTRIES
    if not value.isdigit() or not 1 <= int(value) <= 1 << 40:
        raise UsageError(f"{HELD_ENTRIES_VAR}: {value[:40]!r} is not a whole number from 1")
    return int(value)


# JSON's own string encoder (C), as a listing writes each path.
_quote: Callable[[str], str] = json.encoder.encode_basestring
# What the spool's files buffer before writing (they are written in order).
_BUFFER = 1 << 20
# What a stored text is read and written by at once: little beside a 100,000
# files' text (1.4 MB), which is what it replaces.
_PIECE = 1 << 18
_TEXT_BUFFER = 1 << 18


def scratch_dir(home: Path) -> Path:
    """A warehouse home's scratch directory, made private if it is new."""
    path = home / "tmp"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


_RECORD = struct.Struct("<qI")  # a record's number and the length of its name
_RECORDS_AT_ONCE = 8192  # parts of records joined into one write


class _ScratchFile:
    """Holds one unnamed scratch file (``_file``, opened by the subclass),
    closed by close() or with the object."""

    _file: IO[bytes]

    def close(self) -> None:
        self._file.close()

    def __del__(self) -> None:
        # Dropped unclosed (by a library caller): its scratch file goes with
        # it, as an unnamed file would at exit anyway.
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()


class Records(_ScratchFile):
    """(name, number) pairs in an unnamed scratch file, written in order and
    read back as often as wanted, each reading from its own position.

    What a put would otherwise hold of one directory of millions of files:
    its names in sorted runs, then its files (name and size) in name order.
    """

    def __init__(self) -> None:
        # The system's temporary directory: the scan does not know the
        # warehouse's. Closed by close() (or with the object): no `with`.
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="put-dir-", buffering=0)  # noqa: SIM115
        self._end = 0
        self._pending: list[bytes] = []  # records not written yet, written together

    def append(self, name: str, number: int) -> None:
        data = name.encode()
        pending = self._pending
        pending.append(_RECORD.pack(number, len(data)))
        pending.append(data)
        self._end += _RECORD.size + len(data)
        if len(pending) >= _RECORDS_AT_ONCE:
            self._write()

    def _write(self) -> None:
        data = b"".join(self._pending)
        self._pending.clear()
        view = memoryview(data)
        while view:
            view = view[self._file.write(view) or 0 :]

    @property
    def end(self) -> int:
        """Where the next record is written (a run's start or end)."""
        return self._end

    def read(self, start: int = 0, end: int | None = None) -> Iterator[tuple[str, int]]:
        """The records from offset ``start`` to ``end`` (the end of those written)."""
        if self._pending:
            self._write()
        return self._read(self._file.fileno(), start, self._end if end is None else end)

    @staticmethod
    def _read(fd: int, pos: int, end: int) -> Iterator[tuple[str, int]]:
        unpack = _RECORD.unpack_from
        head = _RECORD.size
        data = b""
        at = 0  # where the next record starts in data
        while True:
            if at + head <= len(data):
                number, length = unpack(data, at)
                stop = at + head + length
                if stop <= len(data):
                    yield data[at + head : stop].decode(), number
                    at = stop
                    continue
            if pos >= end:
                if at < len(data):
                    raise OSError(f"a scratch file of a put ends inside a record at {end}")
                return
            more = os.pread(fd, min(_PIECE, end - pos), pos)
            if not more:  # an unnamed file nobody else can reach: cut short means gone
                raise OSError(f"a scratch file of a put ends at {pos} of {end} bytes")
            pos += len(more)
            data = data[at:] + more
            at = 0


# The blocks a put holds in memory at most (about 200 bytes each) before the
# rest go to a scratch file at 25 bytes each; lower with WH_PUT_HELD_ENTRIES.
HELD_BLOCKS = 10_000
_WRITE = struct.Struct("<16sQ?")  # a block's MD5, size and whether it was new


class BlockLog(_ScratchFile):
    """Every block a put stored or found stored, in order: one accounting
    row each. A tree of many small directories has a block per directory;
    past ``held`` of them, the rest go to an unnamed scratch file, so what
    the put holds does not grow with the directories. Counts and sums are
    kept as the blocks come."""

    def __init__(self, directory: Path | None = None, held: int | None = None) -> None:
        self._directory = directory
        self._held = min(held_entries(), HELD_BLOCKS) if held is None else held
        self._blocks: list[StoredBlock] = []
        self._spilled: IO[bytes] | None = None
        self._pending: list[bytes] = []
        self._end = 0
        self.count = 0
        self.blocks_new = 0
        self.bytes_new = 0

    def append(self, block: StoredBlock) -> None:
        loc = block.locator
        self.count += 1
        if block.new:
            self.blocks_new += 1
            self.bytes_new += loc.size
        if self._spilled is None:
            if len(self._blocks) < self._held:
                self._blocks.append(block)
                return
            # Closed by close() (or with the object): no `with`.
            self._spilled = self._file = tempfile.TemporaryFile(  # noqa: SIM115
                dir=self._directory, prefix="put-blocks-", buffering=0
            )
        self._pending.append(_WRITE.pack(bytes.fromhex(loc.md5), loc.size, block.new))
        if len(self._pending) >= _RECORDS_AT_ONCE:
            self._write()

    def _write(self) -> None:
        assert self._spilled is not None
        data = b"".join(self._pending)
        self._pending.clear()
        view = memoryview(data)
        while view:
            view = view[self._spilled.write(view) or 0 :]
        self._end += len(data)

    def __len__(self) -> int:
        return self.count

    def rows(self) -> BlockRows:
        """The (md5, size, new) rows, to be read as often as wanted."""
        return BlockRows(self)

    def writes(self) -> Iterator[tuple[str, int, bool]]:
        """(md5, size, new) of each block, in order."""
        for b in self._blocks:
            yield b.locator.md5, b.locator.size, b.new
        if self._spilled is None:
            return
        if self._pending:
            self._write()
        fd, pos, end = self._spilled.fileno(), 0, self._end
        whole = _PIECE - _PIECE % _WRITE.size
        while pos < end:
            data = os.pread(fd, min(whole, end - pos), pos)
            if not data or len(data) % _WRITE.size:
                raise OSError(f"a scratch file of a put ends at {pos} of {end} bytes")
            pos += len(data)
            for md5, size, new in _WRITE.iter_unpack(data):
                yield md5.hex(), size, new

    def __iter__(self) -> Iterator[StoredBlock]:
        held = len(self._blocks)
        for i, (md5, size, new) in enumerate(self.writes()):
            # Those held keep their locators' hints; the rest are rebuilt.
            yield self._blocks[i] if i < held else StoredBlock(Locator(md5, size), new)

    def close(self) -> None:
        if self._spilled is not None:
            self._spilled.close()


class BlockRows:
    """A ``BlockLog``'s (md5, size, new) rows, read again at each iteration."""

    def __init__(self, log: BlockLog) -> None:
        self._log = log

    def __len__(self) -> int:
        return len(self._log)

    def __iter__(self) -> Iterator[tuple[str, int, bool]]:
        return self._log.writes()


class SpilledDigests(_ScratchFile):
    """The MD5s of a directory's files (16 bytes each, by the file's number
    in name order) in an unnamed scratch file, where a directory of more
    files than are held keeps them instead of a table of 16 bytes a file.

    Set as ``md5s[16 * i : 16 * j] = digests`` (one write; threads may set
    different files at once), every file exactly once; read back in order
    once all are set.
    """

    def __init__(self, count: int) -> None:
        # The system's temporary directory, as the directory's other scratch
        # files (the writer does not know the warehouse's). Closed by close()
        # (or with the object): no `with`.
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="put-md5-", buffering=0)  # noqa: SIM115
        self._count = count

    def __setitem__(self, key: slice, value: bytes | bytearray) -> None:
        start = key.start
        if start is None or key.stop - start != len(value) or start % 16 or len(value) % 16:
            raise ValueError("digests are set whole, 16 bytes each, at their place")
        if key.stop > 16 * self._count:
            raise IndexError("more digests than files")
        view = memoryview(value)
        while view:  # a write to a regular file is whole but for a full disk
            n = os.pwrite(self._file.fileno(), view, start)
            view, start = view[n:], start + n

    def __len__(self) -> int:
        return 16 * self._count

    def pieces(self, size: int = _PIECE) -> Iterator[bytes]:
        """The digests in order, a whole number of them at a time (about ``size`` bytes)."""
        size = max(16, size - size % 16)
        fd = self._file.fileno()
        end = 16 * self._count
        pos = 0
        while pos < end:
            piece = os.pread(fd, min(size, end - pos), pos)
            if len(piece) % 16 or not piece:
                # A file's digest never set, or the scratch file cut short.
                raise OSError(f"a scratch file of a put ends at {pos} of {end} bytes")
            pos += len(piece)
            yield piece

    def hex(self) -> Iterator[str]:
        """Each file's MD5 as hex, in order."""
        for piece in self.pieces():
            text = piece.hex()
            for i in range(0, len(text), 32):
                yield text[i : i + 32]

    def read(self) -> bytes:
        """Every digest at once (where the directory is held whole anyway)."""
        return b"".join(self.pieces())


def hex_digests(md5s: bytes | bytearray | SpilledDigests | Iterable[str]) -> Iterator[str]:
    """Each MD5 of a table (16 bytes each) or a scratch file of them, as hex,
    in order (given as hex already: as they are)."""
    if isinstance(md5s, SpilledDigests):
        return md5s.hex()
    if isinstance(md5s, bytes | bytearray):
        return (md5s[i : i + 16].hex() for i in range(0, len(md5s), 16))
    return iter(md5s)


_BATCH = struct.Struct("<Q")  # the length of a batch of pickled records
_HITS_AT_ONCE = 1024  # hits written, and read back, together


class CachedEntry(NamedTuple):
    """A file the resume cache answers for: where its bytes are, its MD5."""

    entry: FileEntry
    md5: str


class SpilledHits(_ScratchFile):
    """What the resume cache answers for in a directory of more files than a
    put holds: each file's name, entry and MD5 in name order in an unnamed
    scratch file, a batch at a time, instead of a table of every hit; read
    back in order as often as wanted, each reading from its own position."""

    def __init__(self) -> None:
        # Closed by close() (or with the object): no `with`.
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="put-hits-", buffering=0)  # noqa: SIM115
        self._pending: list[tuple[str, FileEntry, str]] = []
        self._end = 0
        self._count = 0

    def append(self, name: str, entry: FileEntry, md5: str) -> None:
        self._pending.append((name, entry, md5))
        self._count += 1
        if len(self._pending) >= _HITS_AT_ONCE:
            self._write()

    def _write(self) -> None:
        # Plain values (a batch's blocks once each), not the dataclasses,
        # whose unpickling is several times slower.
        blocks: dict[Locator, int] = {}
        rows = [
            (
                name,
                md5,
                entry.path,
                entry.size,
                [
                    (blocks.setdefault(p.locator, len(blocks)), p.offset, p.length)
                    for p in entry.pieces
                ],
            )
            for name, entry, md5 in self._pending
        ]
        locators = [(loc.md5, loc.size, loc.hints) for loc in blocks]
        data = pickle.dumps((locators, rows), pickle.HIGHEST_PROTOCOL)
        self._pending = []
        view = memoryview(_BATCH.pack(len(data)) + data)
        while view:
            n = os.pwrite(self._file.fileno(), view, self._end)
            view, self._end = view[n:], self._end + n

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[tuple[str, CachedEntry]]:
        if self._pending:
            self._write()
        return self._read(self._file.fileno(), self._end)

    @staticmethod
    def _read(fd: int, end: int) -> Iterator[tuple[str, CachedEntry]]:
        pos = 0
        while pos < end:
            head = os.pread(fd, _BATCH.size, pos)
            size = _BATCH.unpack(head)[0] if len(head) == _BATCH.size else -1
            data = os.pread(fd, size, pos + _BATCH.size) if size >= 0 else b""
            if size < 0 or len(data) != size:  # an unnamed file nobody else can reach
                raise OSError(f"a scratch file of a put ends at {pos} of {end} bytes")
            pos += _BATCH.size + size
            # Written by this process to a file no one else can reach.
            locators, rows = pickle.loads(data)
            blocks = [Locator(key, n, hints) for key, n, hints in locators]
            for name, md5, path, length, pieces in rows:
                entry = FileEntry(
                    path, length, tuple(FilePiece(blocks[i], o, n) for i, o, n in pieces)
                )
                yield name, CachedEntry(entry, md5)


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


class StoredText(_ScratchFile):
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
