"""A node-local disk cache of whole verified blocks (DESIGN §4.3, docs/s3.md).

Shared by every process of one user on a node (gets, steps, a mount), so
every step is safe against the others:

- an entry appears only by ``rename`` of a complete temporary file, and is
  never replaced in place: a reader sees a whole block or none;
- every hit is read whole and checked against its MD5 and size; a bad
  entry (a crash before the kernel wrote it, a stray write) is dropped
  and counts as a miss, so the caller fetches it again;
- the bytes held, the entry count, hits and misses live in a small state
  file, changed only under ``flock`` on it; eviction runs under the same
  lock, so two evictors never count one file twice. A reader holding an
  evicted entry open still reads it whole (the inode lives until closed);
- a hit takes no lock: it reads, checks and touches an entry that is never
  changed in place, and its count is added to the state file with the
  next change under the lock, at most a second later (``_FOLD_EVERY``), or
  when the cache is closed;
- least recently used goes first: a hit sets the entry's mtime to now
  (atime is not kept on most mounts).

Layout: ``<root>/<md5[0:2]>/<md5>`` and ``<root>/state``. Nothing here may
fail a read: a cache that cannot be written is a cache that misses.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import logging
import os
import re
import struct
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from warehouse.blocks.volume import OpenBlock, open_checked
from warehouse.errors import UsageError

__all__ = [
    "DEFAULT_DISK_CACHE",
    "CacheStats",
    "DiskCache",
    "configured",
    "configured_dir",
    "default_cache_dir",
    "format_size",
    "parse_size",
    "read_stats",
]

log = logging.getLogger("warehouse.cache")

DEFAULT_DISK_CACHE = 4 << 30  # bytes, when the setting cache_size is unset
# Eviction frees down to this share of the budget, so that a full cache
# scans its directory once per several blocks written, not once per block.
_LOW_WATER = 0.9
# A temporary file older than this is a writer's that died.
_STALE_TMP = 3600.0
_STATE = "state"
# Seconds a process keeps its hits and misses before adding them to the
# state file (under the lock): a hit costs no lock, and `wh cache stats`
# is at most this late.
_FOLD_EVERY = 1.0
_FIELDS = struct.Struct("<4q")  # bytes, entries, hits, misses
_MD5 = re.compile(r"[0-9a-f]{32}")
_SIZE = re.compile(r"([0-9]+)([KMGT]?)(?:i?B)?", re.IGNORECASE)
_UNITS = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}


def parse_size(text: str) -> int:
    """Bytes from ``4G``, ``512M``, ``100000`` (binary units); raises ValueError."""
    found = _SIZE.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"{text!r} is not a size (a whole number of bytes, or with K, M, G or T)")
    return int(found.group(1)) << _UNITS[found.group(2).upper()]


def format_size(n: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if n and n % (1 << _UNITS[unit]) == 0:
            return f"{n >> _UNITS[unit]}{unit}"
    return str(n)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "warehouse" / "blocks"


@dataclass(frozen=True)
class CacheStats:
    dir: str
    budget: int
    entries: int
    bytes: int
    hits: int
    misses: int

    def as_json(self) -> dict[str, object]:
        return asdict(self)


class DiskCache:
    """Whole blocks under ``root``, at most ``budget`` bytes (LRU)."""

    def __init__(self, root: Path, budget: int) -> None:
        self.root = Path(root)
        self.budget = budget
        self._thread_lock = threading.Lock()  # flock is per open file, not per thread
        self._fd: int | None = None
        # Hits and misses counted here, not yet in the state file.
        self._count_lock = threading.Lock()
        self._pending = [0, 0]
        self._folded_at = time.monotonic()
        _open.add(self)

    # -- the shared state ------------------------------------------------------

    def _state_fd(self) -> int:
        if self._fd is None:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._fd = os.open(self.root / _STATE, os.O_RDWR | os.O_CREAT, 0o600)
        return self._fd

    @contextlib.contextmanager
    def _locked(self, *, wait: bool = True) -> Iterator[list[int]]:
        """The state (bytes, entries, hits, misses), written back on leaving,
        with this process's hits and misses counted since the last time.
        ``wait=False``: BlockingIOError if another holds the lock."""
        with self._thread_lock:
            fd = self._state_fd()
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            try:
                raw = os.pread(fd, _FIELDS.size, 0)
                state = list(_FIELDS.unpack(raw)) if len(raw) == _FIELDS.size else [0, 0, 0, 0]
                before = list(state)
                with self._count_lock:
                    (hits, misses), self._pending = self._pending, [0, 0]
                    self._folded_at = time.monotonic()
                state[2] += hits
                state[3] += misses
                yield state
                if state != before:
                    os.pwrite(fd, _FIELDS.pack(*(max(0, v) for v in state)), 0)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _count(self, hits: int = 0, misses: int = 0) -> None:
        """Count reads; add them to the state file once a second at most."""
        with self._count_lock:
            self._pending[0] += hits
            self._pending[1] += misses
            due = time.monotonic() - self._folded_at >= _FOLD_EVERY
        if due:
            self._fold()

    def _fold(self, *, wait: bool = False) -> None:
        """Add the counts kept here to the state file; if another process
        holds its lock (and not ``wait``), at a later read."""
        if self._pending == [0, 0]:
            return
        try:
            with self._locked(wait=wait):
                pass
        except BlockingIOError:
            with self._count_lock:
                self._folded_at = time.monotonic()
        except OSError as e:
            log.debug("disk cache %s: %s", self.root, e)

    def close(self) -> None:
        self._fold(wait=True)
        with self._thread_lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _path(self, md5: str) -> Path:
        return self.root / md5[:2] / md5

    # -- reading ----------------------------------------------------------------

    def get(self, md5: str, size: int) -> bytes | None:
        """The block, verified, or None (a miss; a bad entry is dropped)."""
        path = self._path(md5)
        data: bytes | None = None
        ino = None
        try:
            with open(path, "rb") as f:
                ino = os.fstat(f.fileno()).st_ino
                data = f.read(size + 1)
        except OSError:
            pass
        if data is not None and len(data) == size and hashlib.md5(data).hexdigest() == md5:
            self._hit(path)
            return data
        self._count(misses=1)
        if data is not None:
            log.warning("disk cache: dropping a bad copy of block %s", md5)
            try:
                with self._locked() as state:
                    self._drop(path, ino, state)
            except OSError as e:
                log.debug("disk cache %s: %s", self.root, e)
        return None

    def _hit(self, path: Path) -> None:
        # No lock: an evictor that unlinks it meanwhile only makes the touch
        # fail, and a reader holding it open still reads it whole.
        _touch(path)  # most recently used
        self._count(hits=1)

    def open_checked(self, blocks: Sequence[tuple[str, int]]) -> list[OpenBlock | None]:
        """Each block's entry open and checked, hashed side by side in one
        native call (``LocalVolume.open_checked``), not yet mapped; None for
        one not held (or held bad: the caller's ``get`` then drops and counts
        it). Only where ``can_check_open()``."""
        opened = open_checked(
            [(self._path(md5) if _MD5.fullmatch(md5) else None, size) for md5, size in blocks]
        )
        for (md5, _), block in zip(blocks, opened, strict=True):
            if block is not None:
                self._hit(self._path(md5))
        return opened

    def _drop(self, path: Path, ino: int | None, state: list[int]) -> None:
        """Remove the entry at ``path`` if it is still the file ``ino`` (under the lock)."""
        try:
            st = os.stat(path)
            if ino is not None and st.st_ino != ino:
                return  # already dropped and fetched again by another process
            os.unlink(path)
        except OSError:
            return
        state[0] -= st.st_size
        state[1] -= 1

    # -- writing ----------------------------------------------------------------

    def put(self, md5: str, data: bytes | bytearray | memoryview) -> None:
        """Keep a block the caller verified; a failure only logs."""
        size = len(data)
        if size == 0 or size > self.budget or _MD5.fullmatch(md5) is None:
            return
        path = self._path(md5)
        if path.exists():
            return
        tmp = path.parent / f".{md5}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
            # No fsync: an entry torn by a crash fails its check and is dropped.
            with self._locked() as state:
                if os.path.exists(path):
                    os.unlink(tmp)
                    return
                os.rename(tmp, path)
                _touch(path)
                state[0] += size
                state[1] += 1
                if state[0] > self.budget:
                    self._evict(state)
        except OSError as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            log.debug("disk cache %s: cannot keep block %s: %s", self.root, md5, e)

    def _entries(self) -> Iterator[tuple[float, int, Path]]:
        """(mtime, size, path) of every entry; stale temporary files are removed."""
        now = time.time()
        try:
            shards = [e for e in os.scandir(self.root) if e.is_dir(follow_symlinks=False)]
        except OSError:
            return
        for shard in shards:
            try:
                files = list(os.scandir(shard.path))
            except OSError:
                continue
            for e in files:
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if e.name.endswith(".tmp"):
                    if now - st.st_mtime > _STALE_TMP:
                        with contextlib.suppress(OSError):
                            os.unlink(e.path)
                    continue
                if _MD5.fullmatch(e.name):
                    yield st.st_mtime, st.st_size, Path(e.path)

    def _evict(self, state: list[int]) -> None:
        """Least recently used entries out until under the low-water mark (under
        the lock); the counts are set from what is found, so they heal."""
        entries = sorted(self._entries(), key=lambda t: t[0])
        used = sum(size for _, size, _ in entries)
        count = len(entries)
        target = int(self.budget * _LOW_WATER)
        for _, size, path in entries:
            if used <= target:
                break
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError:
                continue
            used -= size
            count -= 1
        state[0], state[1] = used, count

    # -- for `wh cache` ---------------------------------------------------------

    def stats(self) -> CacheStats:
        """What the cache holds, counted from its files, and its hits and misses."""
        self._fold(wait=True)
        entries = list(self._entries())
        state = read_stats(self.root)
        return CacheStats(
            str(self.root),
            self.budget,
            len(entries),
            sum(size for _, size, _ in entries),
            state[2],
            state[3],
        )

    def clear(self) -> tuple[int, int]:
        """Remove every entry (readers holding one open still read it): (entries, bytes)."""
        if not self.root.is_dir():
            return 0, 0
        with self._locked() as state:
            removed = 0
            freed = 0
            for _, size, path in list(self._entries()):
                try:
                    os.unlink(path)
                except OSError:
                    continue
                removed += 1
                freed += size
            state[0], state[1] = 0, 0
            return removed, freed


# Caches of this process: their last counts are written at its exit, closed or not.
_open: weakref.WeakSet[DiskCache] = weakref.WeakSet()


@atexit.register
def _fold_all() -> None:
    for cache in list(_open):
        cache._fold(wait=True)


def _touch(path: Path) -> None:
    # The clock's nanoseconds, not the file system's coarser "now": blocks
    # used one after the other keep their order.
    now = time.time_ns()
    with contextlib.suppress(OSError):
        os.utime(path, ns=(now, now))


def read_stats(root: Path) -> list[int]:
    """(bytes, entries, hits, misses) as last written, without the lock (a
    reader of four counters written by one ``pwrite``); zeros if none."""
    try:
        with open(Path(root) / _STATE, "rb") as f:
            raw = f.read(_FIELDS.size)
    except OSError:
        return [0, 0, 0, 0]
    return list(_FIELDS.unpack(raw)) if len(raw) == _FIELDS.size else [0, 0, 0, 0]


def configured() -> DiskCache | None:
    """The disk cache the settings ask for (``cache_dir``, ``cache_size``;
    ``cache_size`` 0 turns it off), or None."""
    raw = os.environ.get("WH_CACHE_SIZE", "").strip()
    if raw:
        try:
            budget = parse_size(raw)
        except ValueError as e:
            raise UsageError(f"WH_CACHE_SIZE: {e}") from None
    else:
        budget = DEFAULT_DISK_CACHE
    if budget <= 0:
        return None
    return DiskCache(configured_dir(), budget)


def configured_dir() -> Path:
    """The directory the setting ``cache_dir`` names, else the default."""
    where = os.environ.get("WH_CACHE_DIR", "").strip()
    return Path(where).expanduser() if where else default_cache_dir()
