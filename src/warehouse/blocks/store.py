"""The block store interface the collection reader and writer talk to.

A store turns bytes into a locator and a locator back into verified bytes.
``LocalBlockStore`` is the embedded one: one local volume with a RAM cache in
front. The remote store (keep servers) implements the same protocol.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

from warehouse.blocks.cache import BlockCache
from warehouse.blocks.locator import EMPTY_MD5, MAX_BLOCK_SIZE, Locator
from warehouse.blocks.sources import CACHE, LOCAL, count, counting
from warehouse.errors import CorruptDataError, UsageError, os_error

if TYPE_CHECKING:
    # Only the embedded store holds a volume: a client of keep servers, or a
    # keep server's own reads, need not load it (docs/latency.md).
    from warehouse.blocks.volume import LocalVolume

__all__ = ["MAPPED_MIN", "BatchReads", "BlockStore", "LocalBlockStore", "StoredBlock"]

Buffer = bytes | bytearray | memoryview


@dataclass(frozen=True, slots=True)
class StoredBlock:
    locator: Locator
    new: bool  # False when the block was already stored (nothing was written)


class BlockStore(Protocol):
    def put(self, data: Buffer, *, md5: str | None = None) -> StoredBlock:
        """Store a block. ``md5``: the caller's MD5 of ``data``, taken just
        before, so it is not hashed again (trusted, not checked)."""

    def flush(self) -> None:
        """Return once every block put so far is durable (raise if one failed)."""

    def get(self, locator: Locator, *, cache: bool = True) -> bytes | memoryview:
        """A verified block. ``cache=False``: a one-pass read, which would
        never reuse it, neither fills the RAM cache nor pushes others out
        (and may give the block's pages mapped rather than copied)."""

    def exists(self, locator: Locator) -> bool: ...

    def put_range(self, fd: int, offset: int, size: int) -> Locator:
        """Store ``size`` bytes of the open file ``fd`` from ``offset`` as one
        block, durable when this returns, never holding it whole (a put's
        manifest text, up to 64 MiB a block, is stored from its scratch
        file this way)."""


@runtime_checkable
class BatchReads(Protocol):
    """A store that may check big blocks of a one-pass read together."""

    def checks_ahead(self) -> bool:
        """Whether ``get_ahead`` checks big blocks together here."""

    def get_ahead(self, locators: Sequence[Locator]) -> list[Callable[[], bytes | memoryview]]:
        """Each block by a call made when it is used (see ``LocalBlockStore``)."""


MAPPED_MIN = 1 << 20  # below this, a read costs less than mapping the block
_PIECE = 1 << 20  # bytes read at a time by ``put_range``


def _pieces(fd: int, offset: int, size: int) -> Iterator[bytes]:
    """``size`` bytes of ``fd`` from ``offset``, a piece at a time."""
    end = offset + size
    while offset < end:
        piece = os.pread(fd, min(_PIECE, end - offset), offset)
        if not piece:
            raise OSError(errno.EIO, f"a file ends at {offset} bytes, before {end}")
        offset += len(piece)
        yield piece


class _BlockWriter(Protocol):
    def write(self, data: bytes) -> object: ...
    def commit(self) -> object: ...
    def abort(self) -> object: ...


class _Writable(Protocol):
    def open_write(self, md5: str, size: int) -> _BlockWriter: ...


def put_range(volume: _Writable, where: str, fd: int, offset: int, size: int) -> Locator:
    """Store ``size`` bytes of ``fd`` from ``offset`` as one block of
    ``volume`` (named ``where`` in errors), read a piece at a time twice:
    once for its MD5 (the block's name), once to write it."""
    if size > MAX_BLOCK_SIZE:
        raise UsageError(f"block of {size} bytes is over the {MAX_BLOCK_SIZE} limit")
    try:
        md5 = hashlib.md5()
        for piece in _pieces(fd, offset, size):
            md5.update(piece)
        locator = Locator(md5.hexdigest(), size)
        if locator.is_empty:
            return locator
        writer = volume.open_write(locator.md5, size)
        try:
            for piece in _pieces(fd, offset, size):
                writer.write(piece)
            writer.commit()  # checks the MD5 again: the file changed if not
        except BaseException:
            writer.abort()
            raise
    except OSError as e:
        raise os_error(e, f"cannot store a block in {where}") from None
    return locator


_Read = TypeVar("_Read", bytes, memoryview)


# Blocks written and waiting for their fsync at most (each an open file).
_MAX_PENDING = 256


class LocalBlockStore:
    """A block store on one local volume, verified on every read.

    A block written is dropped from the page cache once it is durable (as
    borg does): storing a terabyte then does not push out of memory what the
    machine was using, and the next writes reuse the same pages rather than
    take fresh ones, which cost a third of the system time of a large put.
    """

    def __init__(
        self, volume: LocalVolume, cache: BlockCache | None = None, *, syncers: int = 4
    ) -> None:
        self.volume = volume
        self.cache = cache
        # fsyncs run here, so hashing the next block overlaps the disk flush of
        # this one; flush() waits for them.
        self._syncer = ThreadPoolExecutor(syncers, thread_name_prefix="wh-fsync")
        # Blocks not yet durable: running, or failed (flush() raises those).
        self._pending: set[Future[None]] = set()
        self._lock = threading.Lock()
        # Each block waiting for its fsync holds its temporary file open: tiny
        # blocks (a tree of one-file directories) come faster than the disk
        # syncs them, and unbounded they ran out of open files.
        self._room = threading.BoundedSemaphore(_MAX_PENDING)

    def put(self, data: Buffer, *, md5: str | None = None) -> StoredBlock:
        """Store a block; it is durable and visible once ``flush()`` returns."""
        if len(data) > MAX_BLOCK_SIZE:
            raise UsageError(f"block of {len(data)} bytes is over the {MAX_BLOCK_SIZE} limit")
        locator = Locator(md5 or hashlib.md5(data).hexdigest(), len(data))
        if locator.is_empty:
            return StoredBlock(locator, False)
        self._room.acquire()
        try:
            pending = self.volume.put_pending(locator.md5, data)
        except OSError as e:
            self._room.release()
            raise os_error(e, f"cannot store block {locator.md5} in {self.volume.root}") from None
        except BaseException:
            self._room.release()
            raise
        if pending is None:
            self._room.release()
            return StoredBlock(locator, False)
        try:
            fut = self._syncer.submit(pending.finish, uncache=True)
        except BaseException:
            self._room.release()
            raise
        with self._lock:
            self._pending.add(fut)
        fut.add_done_callback(self._synced)
        return StoredBlock(locator, True)

    def _synced(self, fut: Future[None]) -> None:
        # A durable block is forgotten (the set does not grow with the
        # blocks of a put); a failed one stays for flush() to raise.
        if not fut.cancelled() and fut.exception() is None:
            with self._lock:
                self._pending.discard(fut)
        self._room.release()

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, set()
        wait(pending)
        for fut in pending:
            try:
                fut.result()  # the first failure is raised
            except OSError as e:
                raise os_error(e, f"cannot store a block in {self.volume.root}") from None

    def close(self) -> None:
        self.flush()
        self._syncer.shutdown()

    def get(self, locator: Locator, *, cache: bool = True) -> bytes | memoryview:
        if locator.md5 == EMPTY_MD5:
            return b""
        key = locator.key
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            count(CACHE, len(hit))
            return hit
        if not cache and locator.size >= MAPPED_MIN:
            # A one-pass read of a big block: its pages mapped, hashed and
            # handed on without a copy (copying cost a get of a 2 GB file
            # more CPU time than its MD5).
            mapped = self.volume.get_mapped(locator.md5)
            if mapped is not None:
                mapped = self._sized(locator, mapped)
                count(LOCAL, locator.size)
                return mapped
        data = self._sized(locator, self.volume.get(locator.md5))
        count(LOCAL, locator.size)
        if cache and self.cache is not None:
            self.cache.put(key, data)
        return data

    def put_range(self, fd: int, offset: int, size: int) -> Locator:
        """Store ``size`` bytes of the open file ``fd`` from ``offset`` as one
        block, durable when this returns, reading it a piece (1 MiB) at a
        time twice: once for its MD5 (the block's name), once to write it.
        For a put's manifest text, which may be hundreds of megabytes: what
        is held is a piece, not a 64 MiB block."""
        return put_range(self.volume, str(self.volume.root), fd, offset, size)

    def checks_ahead(self) -> bool:
        """Whether ``get_ahead`` checks big blocks together here."""
        return self.volume.can_check_open()

    def get_ahead(self, locators: Sequence[Locator]) -> list[Callable[[], bytes | memoryview]]:
        """Big blocks of a one-pass read, checked now, together (one native
        call hashes their files side by side, a piece at a time), each given
        by a call made when it is used, which maps it then: a reader checking
        blocks ahead holds their descriptors, not their bytes. A block that
        is not here whole or fails the check is read by that call through
        ``get``, whose error names it (and moves a bad copy aside). Only
        where ``checks_ahead()``."""
        opened = self.volume.open_checked([(loc.md5, loc.size) for loc in locators])
        return [
            functools.partial(self.get, loc, cache=False)
            if b is None
            else counting(b.take, LOCAL, loc.size)
            for loc, b in zip(locators, opened, strict=True)
        ]

    def copy_block(self, locator: Locator, write: Callable[[bytes | memoryview], object]) -> None:
        """Copy a block to ``write`` a piece at a time (a one-pass read: no
        RAM cache filled); verified, as ``get`` verifies, once it is all
        copied, so the caller must use none of it before this returns."""
        if locator.md5 == EMPTY_MD5:
            return
        if self.cache is not None and (hit := self.cache.get(locator.key)) is not None:
            write(hit)
            count(CACHE, len(hit))
            return
        size = self.volume.copy_to(locator.md5, write)
        if size != locator.size:
            raise CorruptDataError(
                f"block {locator.md5} on {self.volume.root} has {size} bytes, not {locator.size}"
            )
        count(LOCAL, size)

    def _sized(self, locator: Locator, data: _Read) -> _Read:
        if len(data) != locator.size:
            raise CorruptDataError(
                f"block {locator.md5} on {self.volume.root} has {len(data)} bytes, "
                f"not {locator.size}"
            )
        return data

    def exists(self, locator: Locator) -> bool:
        if locator.is_empty:
            return True
        return self.volume.check(locator.md5, locator.size)
