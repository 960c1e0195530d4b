"""The resume cache of ``wh put``: files already stored are not read again.

A file is taken as unchanged when its path, size, modification time (ns) and
inode are what they were when it was last stored (as restic and arv-put
decide); its pieces (block, offset, length) and MD5 are then taken from the
cache instead of from reading it. A changed file, or one that is not in the
cache, is read and stored as usual.

The cache is only trusted as far as the store agrees: before a put uses an
entry, every block it names is checked to exist (one local stat or one HEAD
per distinct block, on a few threads), and a signed locator near its expiry
is not used. An entry naming a missing block is read again.

One SQLite file per store (a local home, or a controller URL and token) under
``$XDG_CACHE_HOME/warehouse``, private to the user (0600 in a 0700 folder).
What one put learns is written in one transaction at its end, so a crash
leaves the cache as it was. It is bounded: at most ``max_entries`` files per
store (the least recently used go first) and ``MAX_CACHE_FILES`` stores.

Like restic's, the decision is a trade: a file rewritten with the same size
and its modification time set back is not seen as changed (``--no-cache``).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from warehouse.blocks.locator import Locator
from warehouse.blocks.store import BlockStore, StoredBlock
from warehouse.collection.scan import DirNode
from warehouse.collection.writer import WriteResult
from warehouse.manifest import Manifest
from warehouse.manifest.entries import FileEntry, FilePiece

__all__ = ["CacheStats", "PutCache", "write_with_cache"]

MAX_ENTRIES = 4_000_000  # files remembered per store (~1 GiB of cache at most)
MAX_CACHE_FILES = 32  # stores remembered per user
MARGIN = 24 * 3600  # a signature expiring sooner than this is not reused
CHECKERS = 16  # blocks checked at once (HEAD requests to keep servers)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    md5 TEXT NOT NULL,
    pieces TEXT NOT NULL,
    used INTEGER NOT NULL
)
"""


def default_directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "warehouse"


@dataclass(frozen=True)
class _Stat:
    size: int
    mtime_ns: int
    inode: int


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
        # Created 0600 before SQLite opens it; its journal takes the same mode.
        os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
        self._db = sqlite3.connect(self.path, timeout=30)
        self._db.execute(_SCHEMA)
        self._db.commit()
        _bound_files(self.directory, keep=self.path)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> PutCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def lookup(self, source: str, st: _Stat) -> _Hit | None:
        row = self._db.execute(
            "SELECT size, mtime_ns, inode, md5, pieces FROM files WHERE path = ?", (source,)
        ).fetchone()
        if row is None or tuple(row[:3]) != (st.size, st.mtime_ns, st.inode):
            return None
        try:
            pieces = tuple(
                FilePiece(Locator.parse(loc), off, n) for loc, off, n in json.loads(row[4])
            )
        except (ValueError, TypeError):
            return None  # an entry this version cannot read is only a miss
        if sum(p.length for p in pieces) != st.size:
            return None
        return _Hit(FileEntry("", st.size, pieces), row[3])

    def stage(self, rows: Iterable[tuple[str, _Stat]]) -> None:
        """Note the stat of files about to be read, taken before the read.

        They wait in the cache file as unusable rows (no digest, so a lookup
        misses them) until ``save`` completes them: a put of millions of files
        holds none of them in memory. Committed at once, so no transaction
        stays open while the put reads (another put of the same user can
        use the cache meanwhile); rows a failed put left are evicted first."""
        with self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, '', '', 0)",
                ((source, st.size, st.mtime_ns, st.inode) for source, st in rows),
            )

    def save(self, rows: Iterable[tuple[str, int, str, FileEntry]], used: Iterable[str]) -> None:
        """Complete the staged rows of the files just stored (source, size as
        stored, MD5, entry) and mark those used, in one transaction."""
        now = time.time_ns()
        with self._db:
            self._db.executemany(
                "UPDATE files SET md5 = ?, pieces = ?, used = ? WHERE path = ? AND size = ?",
                (
                    (
                        md5,
                        json.dumps([[str(p.locator), p.offset, p.length] for p in e.pieces]),
                        now,
                        source,
                        size,
                    )
                    for source, size, md5, e in rows
                ),
            )
            self._db.executemany(
                "UPDATE files SET used = ? WHERE path = ?", ((now, s) for s in used)
            )
            (count,) = self._db.execute("SELECT count(*) FROM files").fetchone()
            if count > self.max_entries:
                self._db.execute(
                    "DELETE FROM files WHERE path IN "
                    "(SELECT path FROM files ORDER BY used LIMIT ?)",
                    (count - self.max_entries,),
                )


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


def _stat(path: Path) -> _Stat | None:
    try:
        st = os.stat(path)
    except OSError:
        return None  # the writer says why it cannot read it
    return _Stat(st.st_size, st.st_mtime_ns, st.st_ino)


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


@dataclass
class _Plan:
    hits: dict[str, _Hit] = field(default_factory=dict)  # collection path -> hit
    # Collection path of a hit -> its file and stat (staged again if its blocks are gone).
    sources: dict[str, tuple[str, _Stat]] = field(default_factory=dict)


STAGE_BATCH = 10_000


def _plan(cache: PutCache, store: BlockStore, tree: DirNode) -> tuple[_Plan, int]:
    plan = _Plan()
    staged: list[tuple[str, _Stat]] = []
    for node in tree.walk():
        for name, source, size in node.files:
            st = _stat(source)
            if st is None or st.size != size:
                continue
            rel = f"{node.rel}/{name}" if node.rel else name
            key = os.path.abspath(source)
            hit = cache.lookup(key, st)
            if hit is None:
                staged.append((key, st))
                if len(staged) >= STAGE_BATCH:
                    cache.stage(staged)
                    staged.clear()
                continue
            plan.hits[rel] = _Hit(FileEntry(rel, hit.entry.size, hit.entry.pieces), hit.md5)
            plan.sources[rel] = (key, st)
    cache.stage(staged)
    named = {p.locator.key: p.locator for h in plan.hits.values() for p in h.entry.pieces}
    there = _present(store, named) if named else set()
    gone = [
        rel
        for rel, h in plan.hits.items()
        if any(p.locator.key not in there for p in h.entry.pieces)
    ]
    for rel in gone:
        del plan.hits[rel]
        cache.stage([plan.sources.pop(rel)])
    return plan, len(gone)


def _without(node: DirNode, hits: dict[str, _Hit]) -> DirNode:
    """The tree less the files the cache answers for."""
    return DirNode(
        node.rel,
        [f for f in node.files if (f"{node.rel}/{f[0]}" if node.rel else f[0]) not in hits],
        [_without(d, hits) for d in node.dirs],
    )


def _learned(
    tree: DirNode, hits: dict[str, _Hit], result: WriteResult
) -> Iterator[tuple[str, int, str, FileEntry]]:
    """What a put teaches the cache: every file it read whole and unchanged
    (``save`` keeps it only if its staged stat has the size stored)."""
    written = result.manifest.files_view()
    changed = set(result.changed)
    for node in tree.walk():
        for name, source, _size in node.files:
            rel = f"{node.rel}/{name}" if node.rel else name
            if rel in hits or rel in changed:
                continue
            entry = written.get(rel)
            md5 = result.file_md5s.get(rel)
            if entry is not None and md5 is not None:
                yield os.path.abspath(source), entry.size, md5, entry


def write_with_cache(
    cache: PutCache,
    store: BlockStore,
    tree: DirNode,
    write: Callable[[DirNode], WriteResult],
) -> tuple[WriteResult, CacheStats]:
    """Store ``tree`` with ``write``, reading only the files the cache cannot vouch for."""
    plan, dropped = _plan(cache, store, tree)
    if not plan.hits:
        # Nothing to merge (a first put): the writer's result as it is, and
        # no second manifest or digest table held beside it.
        result = write(tree)
        cache.save(_learned(tree, plan.hits, result), ())
        return result, CacheStats(files=0, bytes=0, dropped=dropped)
    result = write(_without(tree, plan.hits))
    written = result.manifest.files_view()
    entries: list[FileEntry] = []
    md5s = dict(result.file_md5s)
    empty: list[str] = []
    for node in tree.walk():
        if node.rel and node.is_empty:
            empty.append(node.rel)
        for name, _source, _size in node.files:
            rel = f"{node.rel}/{name}" if node.rel else name
            hit = plan.hits.get(rel)
            if hit is not None:
                entries.append(hit.entry)
                md5s[rel] = hit.md5
            else:
                entries.append(written[rel])
    manifest = Manifest.from_files(entries, empty)
    new_keys = {b.locator.key for b in result.blocks}
    reused: dict[str, Locator] = {}
    for hit in plan.hits.values():
        for p in hit.entry.pieces:
            if p.locator.key not in new_keys and not p.locator.is_empty:
                reused.setdefault(p.locator.key, p.locator)
    merged = WriteResult(
        manifest=manifest,
        blocks=result.blocks + tuple(StoredBlock(loc, False) for loc in reused.values()),
        file_count=tree.file_count,
        bytes_read=result.bytes_read,
        file_md5s=md5s,
        changed=result.changed,
    )
    cache.save(_learned(tree, plan.hits, result), (plan.sources[rel][0] for rel in plan.hits))
    stats = CacheStats(
        files=len(plan.hits), bytes=sum(h.entry.size for h in plan.hits.values()), dropped=dropped
    )
    return merged, stats
