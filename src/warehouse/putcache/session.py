"""One put's use of the resume cache (see ``warehouse.putcache``): which
directories it answers for, the hits whose blocks are still stored, and
what the put learns, saved at its end.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import time
from array import array
from collections.abc import Collection, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import IO

from warehouse.blocks.locator import Locator
from warehouse.blocks.store import BlockStore
from warehouse.collection.scan import DirNode
from warehouse.collection.scratch import SpilledHits
from warehouse.manifest.entries import FileEntry
from warehouse.putcache.cachefile import PutCache, parse_pieces, pieces_text

__all__ = ["MIN_CACHED", "RACY_NS", "CacheSession", "CacheStats"]

MIN_CACHED = 32 << 10  # the mean file size of a directory whose files are cached
MARGIN = 24 * 3600  # a signature expiring sooner than this is not reused
CHECKERS = 16  # blocks checked at once (HEAD requests to keep servers)
TOUCH_AFTER = 24 * 3600 * 10**9  # ns: an entry's time of use is kept to a day
# ns: a file changed this recently before a put is not remembered by it. File
# times are kept to a clock tick (a few ms; 2 s on FAT): a file rewritten in
# the same tick as it was read keeps its times, and only a read would see it.
RACY_NS = 2 * 10**9

_UNSAVED = -1  # the size noted for a file that is not to be saved


@dataclass
class CacheStats:
    """What one put took from the cache."""

    files: int = 0
    bytes: int = 0
    dropped: int = 0  # entries not used because a block they name is gone


@dataclass
class _Hit:
    entry: FileEntry
    md5: str


def _signed(inode: int) -> int:
    """An inode number as SQLite's signed 64-bit integer (some file systems use all 64 bits)."""
    return inode - (1 << 64) if inode >= 1 << 63 else inode


def _usable(locator: Locator, now: float) -> bool:
    hint = locator.hint("A")
    if hint is None:
        return True
    try:
        return int(hint.rpartition("@")[2], 16) > now + MARGIN
    except ValueError:
        return False


def _present(store: BlockStore, locators: dict[str, Locator]) -> set[str]:
    """The keys of the blocks the store still holds (checked a few at a time)."""
    now = time.time()
    todo = [loc for loc in locators.values() if _usable(loc, now)]
    with ThreadPoolExecutor(CHECKERS, thread_name_prefix="wh-cache-check") as pool:
        found = pool.map(lambda loc: loc.key if store.exists(loc) else None, todo)
        return {key for key in found if key is not None}


def _rel(node: DirNode, name: str) -> str:
    return f"{node.rel}/{name}" if node.rel else name


def _cached(node: DirNode) -> bool:
    """Whether the cache answers for this directory's files."""
    files = node.files
    return bool(files) and files.total_size >= MIN_CACHED * len(files)


# What a put learns is saved at its end in one transaction; the rows of a
# cached directory's files (32 KiB and more on average) are held up to
# _ROWS_HELD, then go to an unnamed scratch file, _ROWS_HELD at a time.
_Learned = tuple[str, str, int, int, int, int, str, str]
_ROWS_HELD = 10_000
# Files of a directory stat'ed and looked up at once.
_CHUNK = 10_000


class _Marks:
    """Each file's size, mtime_ns, ctime_ns and inode before it was read, in
    the order of its directory's files: held (32 bytes a file), or for a
    directory of more files than a put holds (spilled), in an unnamed
    scratch file, read back in order when the directory is learned."""

    def __init__(self, spilled: bool) -> None:
        self._held = array("q")
        # Closed by close() (or with the object): no `with`.
        self._file: IO[bytes] | None = (
            tempfile.TemporaryFile(prefix="put-marks-") if spilled else None  # noqa: SIM115
        )

    def extend(self, mark: Iterable[int]) -> None:
        self._held.extend(mark)
        if self._file is not None and len(self._held) >= 4 * _CHUNK:
            self._held.tofile(self._file)
            self._held = array("q")

    def __iter__(self) -> Iterator[tuple[int, int, int, int]]:
        held = self._held
        if self._file is not None:
            # All of them from the file, the last ones written to it first.
            held.tofile(self._file)
            held = self._held = array("q")
            self._file.seek(0)
        while True:
            for i in range(0, len(held), 4):
                yield held[i], held[i + 1], held[i + 2], held[i + 3]
            if self._file is None or not (data := self._file.read(4 * _CHUNK * held.itemsize)):
                return
            held = array("q")
            held.frombytes(data)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

    def __del__(self) -> None:
        # Left unlearned (the put stopped): its scratch file goes with it.
        self.close()


class CacheSession:
    """One put's use of the cache, a directory at a time as the writer
    walks the tree (``warehouse.collection.writer.FileCache``).

    For each directory worth caching it stats the files, looks them up at
    once and keeps the hits whose blocks are all still stored; what the
    put then reads of that directory is learned, and saved by ``finish``.
    """

    def __init__(self, cache: PutCache, store: BlockStore) -> None:
        self.cache = cache
        self.store = store
        # Taken before any stat: a file whose times are not older than this less
        # a clock tick could change again, after its read, without its times
        # changing (they are kept to a tick); it is read but not remembered.
        self.settled = time.time_ns() - RACY_NS
        self.stats = CacheStats()
        # Size, mtime_ns, ctime_ns and inode of each file of the directory
        # asked about, as they were before it was read (size _UNSAVED: not to
        # be saved), by its rel; dropped once learned.
        self._marks: dict[str, _Marks] = {}
        self._present: set[str] = set()  # blocks found stored (per block)
        self._learned: list[_Learned] = []
        self._spilled_rows: IO[bytes] | None = None  # learned rows past _ROWS_HELD
        self._touch: list[tuple[str, str]] = []

    def hits(self, node: DirNode) -> dict[str, _Hit] | SpilledHits | None:
        """The files of ``node`` the cache answers for (by name). Its files
        are stat'ed and looked up _CHUNK at a time: a directory of more
        files than a put holds is not held whole here, nor are its hits
        (in a scratch file in name order, unless there are none)."""
        if not _cached(node):
            return None
        marks = self._marks[node.rel] = _Marks(node.files.spilled)
        hits: dict[str, _Hit] = {}
        where: dict[str, tuple[str, str, int]] = {}
        if not node.files.spilled:
            chunk: list[tuple[str, str, int]] = []
            for file in node.files:
                chunk.append(file)
                if len(chunk) >= _CHUNK:
                    self._look_up(node, chunk, marks, hits, where)
                    chunk = []
            self._look_up(node, chunk, marks, hits, where)
            return self._checked(hits, where)
        spilled = SpilledHits()
        try:
            files = iter(node.files)
            while chunk := list(islice(files, _CHUNK)):
                self._look_up(node, chunk, marks, hits, where)
                # In the order looked up: the files' (name order).
                for name, hit in self._checked(hits, where).items():
                    spilled.append(name, hit.entry, hit.md5)
                hits, where = {}, {}
        except BaseException:
            spilled.close()
            raise
        if not spilled:
            spilled.close()
            return {}
        return spilled

    def _look_up(
        self,
        node: DirNode,
        chunk: list[tuple[str, str, int]],
        marks: _Marks,
        hits: dict[str, _Hit],
        where: dict[str, tuple[str, str, int]],
    ) -> None:
        """Stat ``chunk`` (files of ``node`` in order), note their marks and
        add those the cache holds unchanged to ``hits``."""
        cache = self.cache
        files = [
            (name, size, os.path.split(os.path.abspath(source))) for name, source, size in chunk
        ]
        names: dict[str, list[str]] = {}
        for _, _, (d, n) in files:
            names.setdefault(d, []).append(n)
        rows = {d: cache.lookup(d, ns) for d, ns in names.items()}
        for name, size, (d, n) in files:
            try:
                st = os.stat(os.path.join(d, n))
            except OSError:
                marks.extend((_UNSAVED, 0, 0, 0))  # the writer says why it cannot read it
                continue
            mark = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, _signed(st.st_ino))
            # Changed since the scan: the writer reads it and decides.
            saved = st.st_size == size and max(st.st_mtime_ns, st.st_ctime_ns) < self.settled
            marks.extend(mark if saved else (_UNSAVED, 0, 0, 0))
            row = rows[d].get(n)
            if row is None or row[:4] != mark:
                continue
            pieces = parse_pieces(row[5])
            if pieces is None or sum(p.length for p in pieces) != size:
                continue
            hits[name] = _Hit(FileEntry(_rel(node, name), size, pieces), row[4])
            where[name] = (d, n, row[6])

    def _checked(
        self, hits: dict[str, _Hit], where: dict[str, tuple[str, str, int]]
    ) -> dict[str, _Hit]:
        """``hits`` less those naming a block the store no longer holds."""
        named = {
            p.locator.key: p.locator
            for h in hits.values()
            for p in h.entry.pieces
            if p.locator.key not in self._present
        }
        if named:
            self._present |= _present(self.store, named)
        gone = [
            name
            for name, h in hits.items()
            if any(p.locator.key not in self._present for p in h.entry.pieces)
        ]
        for name in gone:  # read again (and saved again: its stat is noted)
            del hits[name]
            del where[name]
        self.stats.dropped += len(gone)
        self.stats.files += len(hits)
        self.stats.bytes += sum(h.entry.size for h in hits.values())
        # An entry's time of use only orders eviction: rewritten once a day at most.
        stale = time.time_ns() - TOUCH_AFTER
        self._touch += [(d, n) for d, n, used in where.values() if used < stale]
        return hits

    def learn(
        self,
        node: DirNode,
        written: Mapping[str, FileEntry],
        md5s: Mapping[str, str],
        changed: Collection[str],
    ) -> None:
        """Every file of a cached directory the put read whole and unchanged,
        with its stat from before the read."""
        marks = self._marks.pop(node.rel, None)
        if marks is None:
            return
        try:
            for (name, source, _), (size, mtime_ns, ctime_ns, inode) in zip(
                node.files, marks, strict=True
            ):
                if size == _UNSAVED:
                    continue
                rel = _rel(node, name)
                entry = written.get(rel)
                md5 = md5s.get(rel)
                if entry is None or md5 is None or rel in changed or entry.size != size:
                    continue  # a hit (not read), or not stored as it was
                d, n = os.path.split(os.path.abspath(source))
                self._learn((d, n, size, mtime_ns, ctime_ns, inode, md5, pieces_text(entry)))
        finally:
            marks.close()

    def learn_read(
        self,
        node: DirNode,
        entries: Iterable[FileEntry | None],
        md5s: Iterable[str | None],
        changed: Collection[str],
    ) -> None:
        """``learn`` of a directory given a file at a time (one of more files
        than a put holds): every file's entry and MD5 in the order of its
        files, None for one ``hits`` answered for (not read)."""
        marks = self._marks.pop(node.rel, None)
        if marks is None:
            return
        try:
            for (name, source, _), (size, mtime_ns, ctime_ns, inode), entry, md5 in zip(
                node.files, marks, entries, md5s, strict=True
            ):
                if size == _UNSAVED or entry is None or md5 is None:
                    continue
                if entry.size != size or (changed and _rel(node, name) in changed):
                    continue  # not stored as it was
                d, n = os.path.split(os.path.abspath(source))
                self._learn((d, n, size, mtime_ns, ctime_ns, inode, md5, pieces_text(entry)))
        finally:
            marks.close()

    def _learn(self, row: _Learned) -> None:
        learned = self._learned
        learned.append(row)
        if len(learned) >= _ROWS_HELD:
            if self._spilled_rows is None:
                # Closed by finish() (or with the session): no `with`.
                self._spilled_rows = tempfile.TemporaryFile(prefix="put-learned-")  # noqa: SIM115
            pickle.dump(learned, self._spilled_rows, pickle.HIGHEST_PROTOCOL)
            learned.clear()

    def _rows(self) -> Iterator[_Learned]:
        """Every row learned, in the order learned."""
        spilled = self._spilled_rows
        if spilled is not None:
            spilled.seek(0)
            while True:
                try:
                    # Written by this process a moment ago to a file no one
                    # else can reach.
                    batch: list[_Learned] = pickle.load(spilled)
                except EOFError:
                    break
                yield from batch
        yield from self._learned

    def __del__(self) -> None:
        # A put stopped before finish(): the rows it learned go unsaved.
        rows = getattr(self, "_spilled_rows", None)
        if rows is not None:
            rows.close()

    def close(self) -> None:
        """The put failed: close the scratch files now (its error's traceback
        may hold the session long after); what it learned is not saved."""
        for marks in self._marks.values():
            marks.close()
        self._marks.clear()
        if self._spilled_rows is not None:
            self._spilled_rows.close()
            self._spilled_rows = None
        self._learned, self._touch = [], []

    def finish(self) -> CacheStats:
        """Save what the put learned (one transaction); what it took from the cache."""
        try:
            self.cache.save(self._rows(), self._touch)
        finally:
            if self._spilled_rows is not None:
                self._spilled_rows.close()
                self._spilled_rows = None
        self._learned, self._touch = [], []
        return self.stats
