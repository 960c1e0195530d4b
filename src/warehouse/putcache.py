"""The resume cache of ``wh put``: files already stored are not read again.

A file is taken as unchanged when its path, size, modification time (ns),
status change time (ns) and inode are what they were when it was last stored
(as restic decides); its pieces (block, offset, length) and MD5 are then
taken from the cache instead of from reading it. A changed file, or one that
is not in the cache, is read and stored as usual. A file whose times are
less than ``RACY_NS`` older than the put is read and not remembered: times
are kept to a clock tick, so it could still change without them changing
(git's "racily clean" files).

Only the files of a directory whose files average ``MIN_CACHED`` bytes or
more are cached: for a small file, the stat and the lookup that would spare
its read cost about what reading and hashing it costs, and remembering
every one would make a first put of many small files slower, not a later
one faster (docs/benchmarks.md). The choice is made for a directory's files
together, so an unchanged directory is either all taken from the cache or
all read and packed as before: its stream, and so the collection's PDH,
stay the same.

The cache is only trusted as far as the store agrees: before a put uses an
entry, every block it names is checked to exist (one local stat or one HEAD
per distinct block, on a few threads), and a signed locator near its expiry
is not used. An entry naming a missing block is read again.

One SQLite file per store (a local home, or a controller URL and token) under
``$XDG_CACHE_HOME/warehouse``, private to the user (0600 in a 0700 folder).
Its entries are looked up a directory at a time (one query per up to
``LOOKUP_BATCH`` files), a directory of more files than a put holds
``_CHUNK`` files at a time. What one put learns is written in one
transaction at its end, so a crash leaves the cache as it was (and its
rerun reads every file again); one found damaged is started again. It is bounded: at most
``max_entries`` files per store (the least recently used go first; an
entry's time of use is rewritten at most once a day) and ``MAX_CACHE_FILES``
stores.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import sqlite3
import tempfile
import time
from array import array
from collections.abc import Collection, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import IO

from warehouse.blocks.locator import Locator
from warehouse.blocks.store import BlockStore
from warehouse.collection.scan import DirNode
from warehouse.collection.scratch import SpilledHits
from warehouse.manifest.entries import FileEntry, FilePiece

__all__ = ["MIN_CACHED", "CacheSession", "CacheStats", "PutCache"]

log = logging.getLogger("warehouse.putcache")

MIN_CACHED = 32 << 10  # the mean file size of a directory whose files are cached
MAX_ENTRIES = 4_000_000  # files remembered per store (~1 GiB of cache at most)
MAX_CACHE_FILES = 32  # stores remembered per user
MARGIN = 24 * 3600  # a signature expiring sooner than this is not reused
CHECKERS = 16  # blocks checked at once (HEAD requests to keep servers)
LOOKUP_BATCH = 500  # names in one query (SQLite allows 999 variables at least)
TOUCH_AFTER = 24 * 3600 * 10**9  # ns: an entry's time of use is kept to a day
# ns: a file changed this recently before a put is not remembered by it. File
# times are kept to a clock tick (a few ms; 2 s on FAT): a file rewritten in
# the same tick as it was read keeps its times, and only a read would see it.
RACY_NS = 2 * 10**9
_VERSION = 2  # PRAGMA user_version of the layout below

# One row per file; a directory's rows sit together (looked up together).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    dir TEXT NOT NULL,
    name TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    md5 TEXT NOT NULL,
    pieces TEXT NOT NULL,
    used INTEGER NOT NULL,
    PRIMARY KEY (dir, name)
) WITHOUT ROWID
"""

_UNSAVED = -1  # the size noted for a file that is not to be saved


def default_directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "warehouse"


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


# A cached row: size, mtime_ns, ctime_ns, inode, md5, pieces, used.
_Row = tuple[int, int, int, int, str, str, int]


class PutCache:
    """The cache of one store; ``identity`` says which (a home, a URL and token)."""

    def __init__(
        self, identity: str, directory: Path | None = None, *, max_entries: int = MAX_ENTRIES
    ) -> None:
        self.directory = directory or default_directory()
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        name = hashlib.sha256(identity.encode()).hexdigest()[:20]
        self.path = self.directory / f"put-{name}.sqlite"
        self.max_entries = max_entries
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as e:
            if not _corrupt(e):
                raise
            self._db = self._replace()
        _bound_files(self.directory, keep=self.path)

    def _open(self) -> sqlite3.Connection:
        # Created 0600 before SQLite opens it; its journal takes the same mode.
        os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            self._layout()
        except BaseException:
            self._db.close()
            raise
        return self._db

    def _replace(self) -> sqlite3.Connection:
        """A new empty cache for one found corrupt (it is only a cache): kept,
        it would fail every later put."""
        log.warning("the put cache %s is corrupt: it is started again", self.path)
        for p in (self.path, self.path.with_name(self.path.name + "-journal")):
            p.unlink(missing_ok=True)
        return self._open()

    def _layout(self) -> None:
        """Make the table, dropping a cache of an older layout (it is only a cache)."""
        (version,) = self._db.execute("PRAGMA user_version").fetchone()
        if version == _VERSION:
            return
        self._db.execute("BEGIN IMMEDIATE")  # one process upgrades, the others wait
        try:
            (version,) = self._db.execute("PRAGMA user_version").fetchone()
            if version != _VERSION:
                self._db.execute("DROP TABLE IF EXISTS files")  # the first layout
                self._db.execute("DROP TABLE IF EXISTS entries")
                self._db.execute(_SCHEMA)
                self._db.execute(f"PRAGMA user_version = {_VERSION}")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> PutCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def lookup(self, directory: str, names: list[str]) -> dict[str, _Row]:
        """The rows of the files ``names`` of ``directory`` (an absolute path) it holds."""
        found: dict[str, _Row] = {}
        for i in range(0, len(names), LOOKUP_BATCH):
            chunk = names[i : i + LOOKUP_BATCH]
            marks = ",".join("?" * len(chunk))
            try:
                rows = self._db.execute(
                    "SELECT name, size, mtime_ns, ctime_ns, inode, md5, pieces, used FROM "
                    f"entries WHERE dir = ? AND name IN ({marks})",
                    (directory, *chunk),
                ).fetchall()
            except sqlite3.DatabaseError as e:
                if not _corrupt(e):
                    raise
                self._db.close()
                self._db = self._replace()
                return {}  # nothing it held is trusted
            for row in rows:
                found[row[0]] = row[1:]
        return found

    def save(
        self,
        rows: Iterable[tuple[str, str, int, int, int, int, str, str]],
        used: Iterable[tuple[str, str]],
    ) -> None:
        """Remember the files just stored (directory, name, size, mtime_ns,
        ctime_ns, inode, MD5, pieces as text) and note the use of ``used``
        (directory, name), in one transaction."""
        now = time.time_ns()
        self._db.execute("BEGIN IMMEDIATE")
        try:
            before = self._db.total_changes
            self._db.executemany(
                "INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                ((*row, now) for row in rows),
            )
            added = self._db.total_changes != before
            self._db.executemany(
                "UPDATE entries SET used = ? WHERE dir = ? AND name = ?",
                ((now, d, n) for d, n in used),
            )
            if added:
                (count,) = self._db.execute("SELECT count(*) FROM entries").fetchone()
                if count > self.max_entries:
                    self._db.execute(
                        "DELETE FROM entries WHERE (dir, name) IN "
                        "(SELECT dir, name FROM entries ORDER BY used LIMIT ?)",
                        (count - self.max_entries,),
                    )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise


def _corrupt(e: sqlite3.DatabaseError) -> bool:
    """Whether SQLite found the file damaged or not a database (not busy, not unreadable)."""
    code = getattr(e, "sqlite_errorcode", 0) & 0xFF
    return code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def _pieces_text(entry: FileEntry) -> str:
    """``locator offset length`` for each piece, space-separated (no JSON: one
    str.join per file)."""
    return " ".join(f"{p.locator} {p.offset} {p.length}" for p in entry.pieces)


def _pieces(text: str) -> tuple[FilePiece, ...] | None:
    words = text.split()
    if len(words) % 3:
        return None
    try:
        pieces = tuple(
            FilePiece(Locator.parse(words[i]), int(words[i + 1]), int(words[i + 2]))
            for i in range(0, len(words), 3)
        )
    except ValueError:
        return None  # an entry this version cannot read is only a miss
    # A piece outside its block (a damaged row) is a miss too: a directory
    # written in parts would lay it out without the check normalizing makes.
    if any(p.offset < 0 or p.length < 0 or p.offset + p.length > p.locator.size for p in pieces):
        return None
    return pieces


def _bound_files(directory: Path, keep: Path) -> None:
    """At most MAX_CACHE_FILES stores: the least recently written go."""
    try:
        found = sorted(directory.glob("put-*.sqlite"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return
    for old in found[: max(0, len(found) - MAX_CACHE_FILES)]:
        if old != keep:
            for p in (old, old.with_name(old.name + "-journal")):
                p.unlink(missing_ok=True)


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
            pieces = _pieces(row[5])
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
                self._learn((d, n, size, mtime_ns, ctime_ns, inode, md5, _pieces_text(entry)))
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
                self._learn((d, n, size, mtime_ns, ctime_ns, inode, md5, _pieces_text(entry)))
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
