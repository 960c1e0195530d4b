"""A put's scratch files: unnamed files holding what would otherwise grow
with the tree in memory.

``Records`` holds a huge directory's names and numbers, ``BlockLog`` the
blocks a put stored, ``SpilledDigests`` a directory's files' MD5s and
``SpilledHits`` the files the resume cache answered for. Each is an unnamed
file (``O_TMPFILE``, or created and unlinked at once): closed, or when the
process dies however it dies, it is gone. ``scratch_dir`` is the
warehouse's own scratch directory, next to its blocks, rather than a
``/tmp`` that may be a small RAM file system.
"""

from __future__ import annotations

import os
import pickle
import struct
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, NamedTuple

from warehouse.blocks.locator import Locator
from warehouse.blocks.store import StoredBlock
from warehouse.collection.scratchfile import ScratchFile
from warehouse.errors import UsageError
from warehouse.manifest.entries import FileEntry, FilePiece

__all__ = [
    "HELD_ENTRIES_VAR",
    "BlockLog",
    "BlockRows",
    "CachedEntry",
    "Records",
    "ScratchFile",
    "SpilledDigests",
    "SpilledHits",
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


# What a scratch file is read back by at once.
_PIECE = 1 << 18


def scratch_dir(home: Path) -> Path:
    """A warehouse home's scratch directory, made private if it is new."""
    path = home / "tmp"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


_RECORD = struct.Struct("<qI")  # a record's number and the length of its name
_RECORDS_AT_ONCE = 8192  # parts of records joined into one write


class Records(ScratchFile):
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


class BlockLog(ScratchFile):
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


class SpilledDigests(ScratchFile):
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


class SpilledHits(ScratchFile):
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
