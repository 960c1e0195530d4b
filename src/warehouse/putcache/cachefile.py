"""One store's resume cache file: SQLite, private to the user, bounded
(see ``warehouse.putcache``). A row per file; what one put learns is saved
in one transaction; a file found damaged is started again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path

from warehouse.blocks.locator import Locator
from warehouse.manifest.entries import FileEntry, FilePiece

__all__ = ["LOOKUP_BATCH", "PutCache", "Row", "default_directory", "parse_pieces", "pieces_text"]

log = logging.getLogger("warehouse.putcache")

MAX_ENTRIES = 4_000_000  # files remembered per store (~1 GiB of cache at most)
MAX_CACHE_FILES = 32  # stores remembered per user
LOOKUP_BATCH = 500  # names in one query (SQLite allows 999 variables at least)
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


def default_directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "warehouse"


# A cached row: size, mtime_ns, ctime_ns, inode, md5, pieces, used.
Row = tuple[int, int, int, int, str, str, int]


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

    def lookup(self, directory: str, names: list[str]) -> dict[str, Row]:
        """The rows of the files ``names`` of ``directory`` (an absolute path) it holds."""
        found: dict[str, Row] = {}
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


def pieces_text(entry: FileEntry) -> str:
    """``locator offset length`` for each piece, space-separated (no JSON: one
    str.join per file)."""
    return " ".join(f"{p.locator} {p.offset} {p.length}" for p in entry.pieces)


def parse_pieces(text: str) -> tuple[FilePiece, ...] | None:
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
