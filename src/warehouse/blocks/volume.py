"""A local-directory volume: blocks stored under their MD5 (DESIGN §4.1).

Layout: ``<root>/<md5[0:3]>/<md5>``. Writes are atomic (temporary file in the
same directory, fsync, rename, directory fsync: ``warehouse.blocks.blockfile``),
so a crash never leaves a partial block under a block's name. Deleting is
two-phase: trash renames the block to ``<md5>.trash.<deadline>``; emptying
the trash removes what is past its deadline.

A copy found corrupt by any read is moved aside at once
(``<md5>.corrupt.<deadline>``, removed with the trash): from then on it is
missing, so the next write of the block stores it anew and balance pulls a
good copy. A writer asks ``check`` whether a good copy is stored: a copy
carries a *verified mark* (extended attribute ``user.wh.verified`` holding
the mtime it had when its bytes were last known good); a copy whose mtime
differs from its mark was changed by someone else and is read and verified
before it counts (see docs/storage.md).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import mmap
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from warehouse.blocks.blockfile import (
    BlockWriter,
    PendingWrite,
    fsync_dir,
    get_mark,
    set_mark,
    touch_verified,
    write_block,
)
from warehouse.blocks.locator import MAX_BLOCK_SIZE
from warehouse.blocks.volumecounts import DELETE, GET, LIST, PUT, VolumeCounts
from warehouse.errors import CorruptDataError, NotFoundError, UsageError
from warehouse.private import private_dir

__all__ = [
    "DEFAULT_TRASH_LIFETIME",
    "BlockStat",
    "LocalVolume",
    "OpenBlock",
    "VolumeSpace",
    "move_aside",
    "open_checked",
]

DEFAULT_TRASH_LIFETIME = 14 * 24 * 3600.0
_MD5 = re.compile(r"[0-9a-f]{32}")
_TRASH = re.compile(r"([0-9a-f]{32})\.(?:trash|corrupt)\.(\d+)")
# Fault a whole mapping in at once (Linux 5.14+); a read error then comes
# back as an error of that call instead of a SIGBUS when a page is touched.
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
_TEMP = re.compile(r"\.[0-9a-f]{32}\..*\.tmp")


@dataclass(frozen=True, slots=True)
class BlockStat:
    md5: str
    size: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class VolumeSpace:
    free_bytes: int  # available to an unprivileged writer
    total_bytes: int


def _check_md5(md5: str) -> None:
    if not _MD5.fullmatch(md5):
        raise UsageError(f"not a block hash: {md5!r}")


class OpenBlock:
    """A block file open and checked by ``LocalVolume.open_checked``, not
    yet mapped; ``take`` maps it (once) and lets the descriptor go."""

    __slots__ = ("fd", "size")

    def __init__(self, fd: int, size: int) -> None:
        self.fd = fd
        self.size = size

    def take(self) -> memoryview:
        """The block's pages, mapped and faulted in (a read error is an
        OSError here, not a SIGBUS later); on a kernel that cannot fault a
        mapping in ahead, the block read from the same descriptor."""
        fd, self.fd = self.fd, -1
        if fd < 0:
            raise ValueError("an open block is taken once")
        try:
            if LocalVolume.can_map:
                pages = mmap.mmap(fd, self.size, prot=mmap.PROT_READ)
                try:
                    pages.madvise(_MADV_POPULATE_READ)
                    return memoryview(pages)
                except OSError as e:
                    pages.close()
                    if e.errno != errno.EINVAL:
                        raise
                    LocalVolume.can_map = False  # an older kernel (as get_mapped finds)
            data = bytearray(self.size)
            view = memoryview(data)
            done = 0
            while done < self.size:
                got = os.preadv(fd, [view[done:]], done)
                if not got:
                    raise OSError(errno.EIO, "a block file ended before its size")
                done += got
            return view.toreadonly()
        finally:
            os.close(fd)

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __del__(self) -> None:
        self.close()


class LocalVolume:
    """One directory of blocks. Thread-safe: every operation is a file system call."""

    def __init__(self, root: Path, *, trash_lifetime: float = DEFAULT_TRASH_LIFETIME) -> None:
        self.root = Path(root)
        self.trash_lifetime = trash_lifetime
        # Requests served and bytes gained, for the catalog's volume_usage
        # (a check or a stat is no request: it costs a directory lookup).
        self.counts = VolumeCounts()
        private_dir(self.root)

    def __repr__(self) -> str:
        return f"LocalVolume({str(self.root)!r})"

    @property
    def name(self) -> str:
        return str(self.root)

    def device(self) -> str:
        """The file system as ``major:minor``: volumes on one disk share it."""
        dev = os.stat(self.root).st_dev
        return f"{os.major(dev)}:{os.minor(dev)}"

    def path_for(self, md5: str) -> Path:
        _check_md5(md5)
        return self.root / md5[:3] / md5

    def stat(self, md5: str) -> BlockStat | None:
        try:
            st = self.path_for(md5).stat()
        except FileNotFoundError:
            return None
        return BlockStat(md5, st.st_size, st.st_mtime_ns)

    def check(self, md5: str, size: int) -> bool:
        """Whether a good copy of ``size`` bytes is stored: what a writer may skip.

        A copy whose verified mark matches its mtime is trusted without a
        read; any other copy is read and verified first (and moved aside if
        corrupt), so a copy changed behind the volume's back never counts.
        """
        path = self.path_for(md5)
        try:
            st = path.stat()
        except FileNotFoundError:
            return False
        if st.st_size != size:
            return False
        if get_mark(path) == st.st_mtime_ns:
            return True
        try:
            self.get(md5)  # moves a corrupt copy aside
        except (CorruptDataError, NotFoundError):
            return False
        set_mark(path, st.st_mtime_ns)
        return True

    def quarantine(self, md5: str, *, ino: int | None = None, now: float | None = None) -> bool:
        """Move a corrupt copy aside so it counts as missing; kept for the
        trash lifetime for inspection. ``ino``: only if the copy is still that
        file (a good copy may have been written over it meanwhile)."""
        path = self.path_for(md5)
        try:
            st = path.stat()
        except FileNotFoundError:
            return False
        if ino is not None and st.st_ino != ino:
            return False
        deadline = int((time.time() if now is None else now) + self.trash_lifetime)
        try:
            os.replace(path, path.with_name(f"{md5}.corrupt.{deadline}"))
        except FileNotFoundError:
            return False
        fsync_dir(path.parent)
        return True

    def put(self, md5: str, data: bytes | bytearray | memoryview) -> bool:
        """Store ``data`` under ``md5``, durably; return True if the block was new.

        The caller has hashed ``data``; a block already present with the same
        size only gets its mtime refreshed (GC reads the mtime as "last wanted").
        """
        pending = self.put_pending(md5, data)
        if pending is None:
            return False
        pending.finish()
        return True

    def put_pending(self, md5: str, data: bytes | bytearray | memoryview) -> PendingWrite | None:
        """Write ``data`` to a temporary file; the block appears on ``finish()``.

        None when the block is already stored (its mtime is refreshed). Lets a
        caller overlap the fsync of one block with the hashing of the next.
        """
        path = self.path_for(md5)
        self.counts.count(PUT)
        if self.check(md5, len(data)):
            with contextlib.suppress(FileNotFoundError):  # trashed meanwhile: write it
                touch_verified(path)
                return None
        shard = path.parent
        shard.mkdir(mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{md5}.", suffix=".tmp", dir=shard)
        try:
            write_block(fd, data)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
        size = len(data)
        return PendingWrite(fd, Path(tmp), path, lambda: self.counts.add_bytes(size))

    def open_write(self, md5: str, size: int) -> BlockWriter:
        """Start writing a block of ``size`` bytes that arrives in pieces."""
        path = self.path_for(md5)
        self.counts.count(PUT)
        if self.check(md5, size):
            return BlockWriter(md5, path, None, None)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{md5}.", suffix=".tmp", dir=path.parent)
        return BlockWriter(md5, path, fd, Path(tmp), self.counts.add_bytes)

    def space(self) -> VolumeSpace:
        st = os.statvfs(self.root)
        return VolumeSpace(st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize)

    def remove_stale_temporaries(self, max_age: float, now: float | None = None) -> int:
        """Remove temporary files older than ``max_age`` seconds (left by a crash)."""
        limit = (time.time() if now is None else now) - max_age
        removed = 0
        for shard in _listdir(self.root):
            if len(shard) != 3:
                continue
            for name in _listdir(self.root / shard):
                if not _TEMP.fullmatch(name):
                    continue
                path = self.root / shard / name
                with contextlib.suppress(FileNotFoundError):
                    if path.stat().st_mtime < limit:
                        path.unlink()
                        removed += 1
        return removed

    def get(self, md5: str) -> bytes:
        """Read a block and verify it against its name (a corrupt copy is moved aside)."""
        self.counts.count(GET)
        try:
            f = open(self.path_for(md5), "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            raise NotFoundError(f"block {md5} is not on {self.root}") from None
        with f:
            data = f.read()
            self._verify(md5, data, os.fstat(f.fileno()).st_ino)
        return data

    # Whether this system can fault a mapping in ahead (see get_mapped).
    can_map: bool = os.name == "posix"

    def get_mapped(self, md5: str) -> memoryview | None:
        """Like ``get``, but the bytes are the file's pages mapped, not copied;
        None if this system cannot fault the mapping in ahead.

        For a server that hashes a block and sends it on. The whole mapping
        is faulted in before any byte is touched, so a read error is an
        OSError here rather than a SIGBUS later. Blocks are never changed in
        place (a write renames a new file in, trash renames it away), so the
        view stays valid while held.
        """
        if not LocalVolume.can_map:
            return None
        self.counts.count(GET)
        try:
            fd = os.open(self.path_for(md5), os.O_RDONLY)
        except FileNotFoundError:
            raise NotFoundError(f"block {md5} is not on {self.root}") from None
        try:
            size = os.fstat(fd).st_size
            if not size:
                data = memoryview(b"")
            else:
                pages = mmap.mmap(fd, size, prot=mmap.PROT_READ)
                try:
                    pages.madvise(_MADV_POPULATE_READ)
                except OSError as e:
                    pages.close()
                    if e.errno != errno.EINVAL:
                        raise
                    LocalVolume.can_map = False  # an older kernel
                    return None
                data = memoryview(pages)
            ino = os.fstat(fd).st_ino
        finally:
            os.close(fd)
        self._verify(md5, data, ino)
        return data

    def open_checked(self, blocks: Sequence[tuple[str, int]]) -> list[OpenBlock | None]:
        """Each block's file open and checked, not yet mapped; None for one
        that is not here with that size, cannot be read or fails its check
        (the caller reads it again through ``get`` or ``get_mapped``, whose
        error names it and moves a bad copy aside). Only where
        ``can_check_open()``.

        For a one-pass reader of big blocks: the files are read a piece at a
        time and hashed side by side in one native call (a block's MD5 is
        one chain, so one block hashes at a fraction of a core's width, and
        eight or sixteen at once cost little more), and a block is mapped
        only when it is used: what is held is the one being used, not those
        checked ahead. Block files are never changed in place, and the open
        descriptor is what is mapped, so the pages used are those hashed.
        """
        opened = open_checked(
            [(self.path_for(md5) if _MD5.fullmatch(md5) else None, size) for md5, size in blocks]
        )
        # One read each (one that failed its check is read again, and counted, by get).
        self.counts.count(GET, sum(b is not None for b in opened))
        return opened

    @staticmethod
    def can_check_open() -> bool:
        """Whether ``open_checked`` can be used here."""
        from warehouse.native.md5 import can_read_fds

        return LocalVolume.can_map and can_read_fds()

    def _open_raw(self, md5: str) -> tuple[io.FileIO, int]:
        """The block's file, unbuffered, and its inode (to move it aside by)."""
        try:
            f = open(self.path_for(md5), "rb", buffering=0)  # noqa: SIM115 - the caller closes it
        except FileNotFoundError:
            raise NotFoundError(f"block {md5} is not on {self.root}") from None
        try:
            return f, os.fstat(f.fileno()).st_ino
        except BaseException:
            f.close()
            raise

    def get_into(self, md5: str, buf: bytearray) -> memoryview:
        """Like ``get``, but into the caller's buffer (which must hold any block).

        For a server that reads many large blocks and sends them on: a fresh
        64 MiB allocation per read costs more CPU in page faults than the read.
        """
        view = memoryview(buf)
        self.counts.count(GET)
        f, ino = self._open_raw(md5)
        with f:
            n = 0
            while n < len(view) and (got := f.readinto(view[n:])):
                n += got
            if n == len(view) and f.read(1):
                self._move_aside(md5, ino)
                raise CorruptDataError(f"block {md5} on {self.root} is longer than any block")
        data = view[:n]
        self._verify(md5, data, ino)
        return data

    def copy_to(self, md5: str, write: Callable[[bytes], object], *, piece: int = 1 << 20) -> int:
        """Copy a block a ``piece`` at a time to ``write``, hashing it on the
        way; return its length. Verified as ``get`` verifies, but only once
        all of it is copied: the caller uses none of it before this returns."""
        self.counts.count(GET)
        f, ino = self._open_raw(md5)
        with f:
            digest = hashlib.md5()
            n = 0
            while data := f.read(piece):
                n += len(data)
                if n > MAX_BLOCK_SIZE:
                    self._move_aside(md5, ino)
                    raise CorruptDataError(f"block {md5} on {self.root} is longer than any block")
                digest.update(data)
                write(data)
        self._check_digest(md5, digest.hexdigest(), ino)
        return n

    def _move_aside(self, md5: str, ino: int) -> str:
        return move_aside(lambda: self.quarantine(md5, ino=ino))

    def _verify(self, md5: str, data: bytes | memoryview, ino: int) -> None:
        self._check_digest(md5, hashlib.md5(data).hexdigest(), ino)

    def _check_digest(self, md5: str, digest: str, ino: int) -> None:
        if digest != md5:
            aside = self._move_aside(md5, ino)
            raise CorruptDataError(
                f"block {md5} on {self.root} is corrupt (its MD5 differs){aside}"
            )

    def touch(self, md5: str) -> bool:
        """Refresh a copy's mtime; a valid verified mark stays valid."""
        path = self.path_for(md5)
        try:
            marked = get_mark(path) == path.stat().st_mtime_ns
            os.utime(path)
        except FileNotFoundError:
            return False
        if marked:
            set_mark(path)
        return True

    def index(self, prefix: str = "") -> Iterator[BlockStat]:
        """Every block whose hash starts with ``prefix``, in hash order."""
        if not re.fullmatch(r"[0-9a-f]{0,32}", prefix):
            raise UsageError(f"not a hash prefix: {prefix!r}")
        self.counts.count(LIST)
        shards = sorted(p for p in _listdir(self.root) if len(p) == 3)
        for shard in shards:
            if not (shard.startswith(prefix[:3]) or prefix.startswith(shard)):
                continue
            with os.scandir(self.root / shard) as it:
                entries = sorted((e.name, e) for e in it if _MD5.fullmatch(e.name))
            for name, entry in entries:
                if not name.startswith(prefix):
                    continue
                try:
                    st = entry.stat()
                except FileNotFoundError:
                    continue  # trashed while we listed
                yield BlockStat(name, st.st_size, st.st_mtime_ns)

    def trash(self, md5: str, *, if_mtime_ns: int | None = None, now: float | None = None) -> bool:
        """Move a block to the trash; refuse if it was written since ``if_mtime_ns``."""
        path = self.path_for(md5)
        try:
            st = path.stat()
        except FileNotFoundError:
            return False
        if if_mtime_ns is not None and st.st_mtime_ns != if_mtime_ns:
            return False
        deadline = int((time.time() if now is None else now) + self.trash_lifetime)
        self.counts.count(DELETE)
        try:
            os.replace(path, path.with_name(f"{md5}.trash.{deadline}"))
        except FileNotFoundError:  # trashed meanwhile by another run
            return False
        fsync_dir(path.parent)
        self.counts.add_bytes(-st.st_size)
        return True

    def untrash(self, md5: str) -> bool:
        """Bring back the most recently trashed copy of a block."""
        path = self.path_for(md5)
        trashed = sorted(self._trashed(md5), key=lambda p: int(p.name.rsplit(".", 1)[1]))
        if not trashed:
            return False
        try:
            os.replace(trashed[-1], path)
        except FileNotFoundError:  # removed meanwhile (its lifetime was over)
            return False
        fsync_dir(path.parent)
        with contextlib.suppress(FileNotFoundError):
            self.counts.add_bytes(path.stat().st_size)
        return True

    def empty_trash(self, now: float | None = None) -> int:
        """Remove trashed blocks past their deadline; return how many."""
        now = time.time() if now is None else now
        removed = 0
        for shard in _listdir(self.root):
            if len(shard) != 3:
                continue
            for name in _listdir(self.root / shard):
                m = _TRASH.fullmatch(name)
                if m and int(m.group(2)) <= now:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.root / shard / name)
                        removed += 1
        return removed

    def _trashed(self, md5: str) -> list[Path]:
        shard = self.root / md5[:3]
        return [shard / n for n in _listdir(shard) if n.startswith(f"{md5}.trash.")]


def move_aside(quarantine: Callable[[], bool]) -> str:
    """Quarantine a copy found corrupt (any volume's ``quarantine``); say
    how that went, for the error."""
    try:
        moved = quarantine()
    except OSError as e:
        # A read-only or full volume, a store refusing: the copy is still
        # corrupt, and that is what the reader must hear, not the failed move.
        return f" and could not be moved aside: {e.strerror or e}"
    return " and was moved aside" if moved else ""


def open_checked(files: Sequence[tuple[Path | None, int]]) -> list[OpenBlock | None]:
    """Each ``(path, size)`` open and checked against the MD5 that is its
    file name, hashed side by side in one native call (see
    ``LocalVolume.open_checked``); None for a path that is None, missing,
    of another size, unreadable or not its MD5."""
    from warehouse.native.md5 import md5_fds

    opened: list[OpenBlock | None] = []
    try:
        for path, size in files:
            try:
                if path is None:
                    raise FileNotFoundError
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                opened.append(None)
                continue
            block = OpenBlock(fd, size)
            opened.append(block if size and os.fstat(fd).st_size == size else None)
        here = [(i, b) for i, b in enumerate(opened) if b is not None]
        sums = md5_fds([b.fd for _, b in here], [b.size for _, b in here])
        for (i, b), digest in zip(here, sums, strict=True):
            path = files[i][0]
            if digest is None or path is None or digest.hex() != path.name:
                b.close()
                opened[i] = None
    except BaseException:
        for left in opened:
            if left is not None:
                left.close()
        raise
    return opened


def _listdir(path: Path) -> list[str]:
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []
