"""One block's file on a local volume: written atomically, whole or in
pieces, and the verified mark it carries (see ``warehouse.blocks.volume``).

A write goes to a temporary file in the block's directory, is fsynced,
renamed into place and its directory fsynced, so a crash never leaves a
partial block under a block's name. The mark (extended attribute
``user.wh.verified``) holds the mtime a copy had when its bytes were last
known good.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from warehouse.errors import UsageError

__all__ = [
    "VERIFIED_ATTR",
    "BlockWriter",
    "PendingWrite",
    "fsync_dir",
    "get_mark",
    "set_mark",
    "touch_verified",
    "write_block",
]

VERIFIED_ATTR = "user.wh.verified"
_IOV_MAX = 1024  # pieces one writev may take (POSIX guarantees at least 16; Linux 1024)
# O_DIRECT wants buffer addresses, offsets and lengths in multiples of the
# disk's logical block size (512 or 4096).
_ALIGN = 4096
_DIRECT_MIN = 1 << 20  # smaller blocks go through the page cache as usual


class PendingWrite:
    """A block written to a temporary file, not yet durable nor visible."""

    def __init__(
        self, fd: int, tmp: Path, path: Path, stored: Callable[[], None] | None = None
    ) -> None:
        self.fd = fd
        self.tmp = tmp
        self.path = path
        # Told once the block is stored (the volume's count of bytes held).
        self.stored = stored

    def finish(self, *, uncache: bool = False) -> None:
        """fsync, rename into place, fsync the directory: now it is stored.

        ``uncache``: drop the block's pages from the page cache once durable.
        """
        try:
            os.fsync(self.fd)
            if uncache:
                _drop_cached(self.fd)
            set_mark(self.fd)  # written and hashed by us: known good
            # Two writers of one block may both get here: one adds its bytes.
            new = self.stored is not None and not os.path.lexists(self.path)
            os.replace(self.tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)
            raise
        finally:
            os.close(self.fd)
        fsync_dir(self.path.parent)
        if new and self.stored is not None:
            self.stored()


class BlockWriter:
    """A block arriving in pieces: hashed while written to a temporary file.

    Nothing is visible under the block's name until ``commit()`` has checked
    the MD5. When the block is already stored the bytes are only hashed, and
    ``commit()`` refreshes its mtime instead of writing it again.
    """

    def __init__(
        self,
        md5: str,
        path: Path,
        fd: int | None,
        tmp: Path | None,
        stored: Callable[[int], None] | None = None,
    ) -> None:
        self.md5 = md5
        self._stored = stored
        self.path = path
        self.size = 0
        self._fd = fd
        self._tmp = tmp
        self._hash = hashlib.md5()
        self._done = False

    @property
    def exists(self) -> bool:
        """True when the block was already stored, so nothing is being written."""
        return self._fd is None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.write_pieces([data])

    def write_pieces(self, pieces: Sequence[bytes | bytearray | memoryview]) -> None:
        """Write several pieces in one system call, without joining them first."""
        if self._done:
            raise UsageError(f"write of block {self.md5} is already finished")
        views = [memoryview(p).cast("B") for p in pieces if len(p)]
        for view in views:
            self._hash.update(view)
            self.size += len(view)
        while self._fd is not None and views:
            written = os.writev(self._fd, views[:_IOV_MAX])
            while written and written >= len(views[0]):
                written -= len(views.pop(0))
            if written:
                views[0] = views[0][written:]

    def commit(self) -> bool:
        """Check the MD5, then make the block durable and visible; True if it is new.

        On a mismatch nothing is stored and UsageError names both hashes.
        """
        if self._done:
            raise UsageError(f"write of block {self.md5} is already finished")
        got = self._hash.hexdigest()
        if got != self.md5:
            self.abort()
            raise UsageError(f"the data's MD5 is {got}, not {self.md5}")
        self._done = True
        if self._fd is None or self._tmp is None:
            # Raises FileNotFoundError if the block was trashed meanwhile: the
            # caller must not be told it is stored.
            touch_verified(self.path)
            return False
        stored, size = self._stored, self.size
        PendingWrite(
            self._fd, self._tmp, self.path, None if stored is None else lambda: stored(size)
        ).finish()
        self._fd = None
        return True

    def abort(self) -> None:
        """Forget the bytes written so far (idempotent)."""
        self._done = True
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
            if self._tmp is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._tmp)


def _drop_cached(fd: int) -> None:
    # Only advice: where the call is missing or refused the pages just stay.
    if hasattr(os, "posix_fadvise"):
        with contextlib.suppress(OSError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def get_mark(target: int | Path) -> int | None:
    try:
        return int(os.getxattr(target, VERIFIED_ATTR))
    except (OSError, ValueError):
        return None  # no mark, or a file system without user attributes


def set_mark(target: int | Path, mtime_ns: int | None = None) -> None:
    """Record that the copy's bytes are good as of its current mtime."""
    if mtime_ns is None:
        mtime_ns = os.stat(target).st_mtime_ns
    # Without user attributes every copy is simply verified when asked.
    with contextlib.suppress(OSError):
        os.setxattr(target, VERIFIED_ATTR, str(mtime_ns).encode())


def touch_verified(path: Path) -> None:
    """Refresh a known-good copy's mtime ("wanted now") and keep its mark valid."""
    os.utime(path)
    set_mark(path)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _page_aligned(data: bytes | bytearray | memoryview) -> bool:
    """Whether ``data`` starts on a page (only a writable buffer can tell)."""
    try:
        start = ctypes.c_char.from_buffer(data)
    except (TypeError, ValueError):  # bytes, or an empty buffer
        return False
    aligned = ctypes.addressof(start) % _ALIGN == 0
    del start  # releases the buffer
    return aligned


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]


def write_block(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write a new block's bytes to ``fd``; its page-aligned part with O_DIRECT.

    A block buffer that starts on a page (a put's big blocks) goes to the
    disk straight from it: no copy into the page cache, which cost a put of
    a 2 GB file more CPU time than reading it, and no pages to drop after
    the fsync. The tail past the last whole 4 KiB, and any other buffer, is
    written as usual.
    """
    view = memoryview(data).cast("B")
    direct = len(view) // _ALIGN * _ALIGN
    if direct >= _DIRECT_MIN and _page_aligned(view):
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        try:
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
        except OSError:
            direct = 0  # a file system without O_DIRECT (tmpfs)
        if direct:
            try:
                _write_all(fd, view[:direct])
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
                # An alignment this disk refuses: start again the usual way.
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
                direct = 0
            finally:
                fcntl.fcntl(fd, fcntl.F_SETFL, flags)
            view = view[direct:]
    _write_all(fd, view)
