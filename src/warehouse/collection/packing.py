"""Pack a directory's files into block buffers, hashed and stored on a thread pool.

The packer circulates a fixed number of block buffers between the reading
thread and the workers; ``pack_dir`` reads one directory's files into them
(large files with O_DIRECT where not cached) and takes every file's MD5.
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import queue
import threading
from collections.abc import (
    Callable,
)
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from typing import Any

from warehouse.blocks.store import BlockStore, StoredBlock
from warehouse.collection.digests import Digests, directory_digests
from warehouse.collection.readahead import SMALL_FILE, ReadAhead
from warehouse.collection.scan import Files
from warehouse.collection.scratch import ScratchFile
from warehouse.collection.segmenttext import SegmentText
from warehouse.errors import WarehouseError, os_error
from warehouse.manifest import Segment


class FileChangedError(WarehouseError):
    """A file's size or mtime changed while a put read it: what was read is torn."""


Progress = Callable[[int], None]

# The smallest buffer made: below this, allocation costs nothing worth saving.
_MIN_BUFFER = 1 << 16
# What O_DIRECT asks to be aligned: buffer addresses, file offsets, lengths
# (the logical block size of the disk: 512 or 4096 bytes).
_ALIGN = 4096
# Buffers of this size and more are page-aligned, and files of this size and
# more are read with O_DIRECT where they are not in the page cache.
_DIRECT_MIN = 1 << 20

Buffer = bytearray | mmap.mmap


def _buffer(size: int) -> Buffer:
    """A block buffer; from ``_DIRECT_MIN`` bytes on an anonymous mapping, so
    it starts on a page and O_DIRECT reads can land in it."""
    return mmap.mmap(-1, size) if size >= _DIRECT_MIN else bytearray(size)


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)))


class Lease:
    """A block buffer and how many jobs still read it; free again at zero."""

    def __init__(self, buf: Buffer, free: queue.SimpleQueue[Buffer]) -> None:
        self.buf = buf
        self._free = free
        self._users = 1  # the reading thread, until it hands the buffer on
        self._lock = threading.Lock()

    def hold(self) -> None:
        with self._lock:
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            done = self._users == 0
        if done:
            self._free.put(self.buf)


class DirectReads:
    """O_DIRECT reads of one file, for the parts of it not in the page cache.

    With O_DIRECT the disk's bytes land in the block buffer itself. A
    buffered read copies them out of the page cache: 1.5 of the 7-9 CPU
    seconds of a put of a 2 GB file on two cores (copies ran at 1.9 GB/s on
    the machine measured), for pages nobody reads again. A part already in
    the page cache is read as usual, from memory rather than the disk.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        try:
            # Opened again through the descriptor: the very file being read,
            # even if its path was renamed or replaced meanwhile.
            self._direct = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECT)
        except OSError:
            self._direct = -1  # no O_DIRECT here (tmpfs) or no /proc: read as usual
        self._probe = bytearray(1)

    def read(self, buf: Buffer, at: int, want: int, pos: int) -> int | None:
        """Read up to ``want`` bytes of the file from ``pos`` into ``buf[at:]``
        directly; None if this part is to be read as usual."""
        span = -(-want // _ALIGN) * _ALIGN  # O_DIRECT reads whole aligned blocks
        if (
            self._direct < 0
            or not isinstance(buf, mmap.mmap)  # page-aligned, unlike a bytearray
            or at % _ALIGN
            or pos % _ALIGN
            or want < _ALIGN
            or at + span > len(buf)
        ):
            return None
        try:
            # RWF_NOWAIT reads only what the page cache holds: it answers
            # whether this part is there.
            os.preadv(self._fd, (self._probe,), pos, os.RWF_NOWAIT)
            return None
        except OSError:
            pass  # not cached (EAGAIN), or no answer: read it directly
        try:
            n = os.preadv(self._direct, (memoryview(buf)[at : at + span],), pos)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            self.close()  # an alignment this disk refuses: read as usual from now on
            return None
        return min(n, want)  # a file grown since: only the size it had

    def close(self) -> None:
        if self._direct >= 0:
            os.close(self._direct)
            self._direct = -1


class FileHash:
    """The MD5 of a file spanning blocks, fed its parts in order.

    When the file starts a block, the worker hashing that block hands over
    its state after the block (``seed``): the file's first part is the whole
    block, so those bytes are hashed once, not twice.
    """

    def __init__(self, seed: Future[Any] | None = None) -> None:
        self.seed = seed
        self._md5: Any = None if seed is not None else hashlib.md5()

    def state(self) -> Any:
        if self._md5 is None:
            assert self.seed is not None
            self._md5 = self.seed.result()
        return self._md5


class Packer:
    """Fills block buffers from files and hands full ones to the pool."""

    def __init__(
        self,
        store: BlockStore,
        workers: int,
        block_size: int,
        check: Callable[[], None],
    ) -> None:
        self.store = store
        self.check = check
        self.block_size = block_size
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="wh-put")
        # A file longer than what is left of a block is hashed here, in
        # order, so the reading thread does not stop to hash it.
        self.hasher = ThreadPoolExecutor(1, thread_name_prefix="wh-file-md5")
        # workers + 2 buffers: every worker busy while the reader fills one
        # more and the file hasher may still read another.
        self.free: queue.SimpleQueue[Buffer] = queue.SimpleQueue()
        self.unallocated = workers + 2
        self.error: BaseException | None = None
        self.seeds: list[Future[Any]] = []
        # Every task of the directory being packed: its blocks and file MD5s
        # are in once they are all done.
        self.tasks: list[Future[Any]] = []

    def lease(self, need: int) -> Lease:
        """A free buffer of at least ``min(need, block_size)`` bytes.

        Buffers are made when first wanted and only as large as the data
        known to go in (a small tree never pays for 64 MiB of zeroed pages);
        ``grow`` enlarges one when more comes.
        """
        want = min(max(need, _MIN_BUFFER), self.block_size)
        if self.unallocated and self.free.empty():
            self.unallocated -= 1
            return Lease(_buffer(want), self.free)
        buf = self.free.get()
        if len(buf) < want:
            buf = _buffer(want)  # the smaller one is dropped: the count stays
        return Lease(buf, self.free)

    def grow(self, lease: Lease, fill: int, need: int) -> Buffer:
        """Enlarge the reading thread's buffer (no other thread holds it yet)."""
        size = min(max(need, 2 * len(lease.buf)), self.block_size)
        buf = _buffer(size)
        buf[:fill] = memoryview(lease.buf)[:fill]
        lease.buf = buf
        return buf

    def submit(
        self,
        lease: Lease,
        length: int,
        whole_files: list[tuple[int, int, int]],
        md5s: Digests,
        seed: Future[Any] | None = None,
    ) -> Future[StoredBlock]:
        """Store the buffer's first ``length`` bytes; the reading thread's hold passes on.

        ``whole_files`` (index, start, end) lie inside the block, their MD5s go
        into ``md5s`` (16 bytes at 16 × index); ``seed`` receives the block's
        MD5 state for a file that fills it from its start and goes on.
        """
        try:
            # A failed store (disk full, server down) or a failed check stops
            # the reading now, not after the whole tree was read.
            self.check()
            if self.error is not None:
                raise self.error
        except BaseException:
            lease.release()
            raise
        # A file that starts the block is hashed along with it; the others in
        # a task of their own, so the block's MD5 and theirs run on two cores.
        first = whole_files[0] if whole_files and whole_files[0][1] == 0 else None
        others = whole_files[1:] if first is not None else whole_files
        if others:
            lease.hold()
            self._task(self.pool.submit(self._hash_files, lease, others, md5s))
        if seed is not None:
            # Kept until hashed, for close() to fail the waits of any dropped.
            self.seeds = [s for s in self.seeds if not s.done()]
            self.seeds.append(seed)
        fut = self.pool.submit(self._store, lease, length, first, seed, md5s)
        self._task(fut)
        return fut

    def _task(self, fut: Future[Any]) -> None:
        fut.add_done_callback(self._note_error)
        self.tasks.append(fut)

    def hash_files(
        self, lease: Lease, whole_files: list[tuple[int, int, int]], md5s: Digests
    ) -> None:
        """Hash files wholly inside the buffer being filled, before it is
        submitted: what it holds of them is read, and stays where it is (a
        grown buffer is a copy; the old one lives while this task holds it)."""
        lease.hold()
        self._task(self.pool.submit(self._hash_files, lease, whole_files, md5s))

    def hash_part(self, fh: FileHash, lease: Lease, lo: int, hi: int) -> None:
        """Add buf[lo:hi] to a file's MD5, after the parts submitted before."""
        lease.hold()

        def update() -> None:
            try:
                fh.state().update(memoryview(lease.buf)[lo:hi])
            finally:
                lease.release()

        self._task(self.hasher.submit(update))

    def file_done(self, md5s: Digests, index: int, fh: FileHash) -> None:
        def record() -> None:
            md5s[index * 16 : index * 16 + 16] = fh.state().digest()

        self._task(self.hasher.submit(record))

    def _note_error(self, fut: Future[Any]) -> None:
        if self.error is None and not fut.cancelled():
            self.error = fut.exception()

    def _hash_files(
        self, lease: Lease, whole_files: list[tuple[int, int, int]], md5s: Digests
    ) -> None:
        try:
            view = memoryview(lease.buf)
            # Set a run of consecutive files at once: one write to a scratch
            # file (a spilled directory's) per run, not one per file.
            run: list[bytes] = []
            first = 0
            for index, lo, hi in whole_files:
                if index != first + len(run):
                    if run:
                        md5s[16 * first : 16 * (first + len(run))] = b"".join(run)
                    first, run = index, []
                run.append(hashlib.md5(view[lo:hi]).digest())
            if run:
                md5s[16 * first : 16 * (first + len(run))] = b"".join(run)
        finally:
            lease.release()

    def _store(
        self,
        lease: Lease,
        length: int,
        first: tuple[int, int, int] | None,
        seed: Future[Any] | None,
        md5s: Digests,
    ) -> StoredBlock:
        try:
            view = memoryview(lease.buf)
            md5 = hashlib.md5()
            if first is not None:
                index, _, hi = first
                md5.update(view[:hi])
                md5s[index * 16 : index * 16 + 16] = md5.copy().digest()
                md5.update(view[hi:length])
            else:
                md5.update(view[:length])
            if seed is not None:
                seed.set_result(md5.copy())
            return self.store.put(view[:length], md5=md5.hexdigest())
        except BaseException as e:
            if seed is not None and not seed.done():
                seed.set_exception(e)
            raise
        finally:
            lease.release()

    def finish(self) -> None:
        """Wait for every file hash queued so far."""
        self.pool.shutdown(wait=True)
        self.hasher.shutdown(wait=True)

    def close(self) -> None:
        """Stop: what has not started is dropped (an error ended the put)."""
        self.pool.shutdown(wait=True, cancel_futures=True)
        for seed in self.seeds:  # of blocks dropped before they were hashed
            if not seed.done():
                seed.set_exception(CancelledError())
        self.hasher.shutdown(wait=True, cancel_futures=True)


def _changed(scanned: int, before: tuple[int, int], after: tuple[int, int], read: int) -> str:
    """Why a file read between two stats (size, mtime_ns) is not one version
    of it ("" if it is)."""
    if before[0] != scanned:
        return f"its size went from {scanned} to {before[0]} bytes before it was read"
    if after[0] != before[0] or read != before[0]:
        return f"its size went from {before[0]} to {after[0]} bytes while it was read"
    if after[1] != before[1]:
        return "it was modified while it was read"
    return ""


# Files wholly inside a block held at most before they are hashed.
_WHOLE_BATCH = 8192


def pack_dir(
    rel: str,
    files: Files,
    packer: Packer,
    reads: ReadAhead,
    progress: Progress | None,
    allow_changing: bool = False,
    changed: list[str] | None = None,
    made: list[ScratchFile] | None = None,
) -> tuple[list[Future[StoredBlock]], list[Segment] | SegmentText, int, Digests]:
    """Pack one directory's files into blocks; also take every file's MD5.

    The MD5s are recorded for the md5sum listing of `wh get`. A file inside one
    block is hashed by a worker (in parallel); a file spanning blocks by the
    packer's file hasher, in order. A file at least one block long gets blocks
    of its own: it starts a block and the block holding its end is cut there,
    so the same file is stored as the same blocks in any collection.
    ``made``: given the scratch files it makes, for the caller to close
    should it fail (the workers may still write to them then).
    """
    blocks: list[Future[StoredBlock]] = []
    # A directory of more files than are held writes its segments out.
    segments: list[Segment] | SegmentText = SegmentText() if files.spilled else []
    block_size = packer.block_size
    rest = files.total_size  # bytes of the files not read yet
    lease = packer.lease(rest)
    buf = lease.buf
    fill = 0
    whole: list[tuple[int, int, int]] = []  # files wholly inside the current buffer
    # Each file's MD5, in the order of the names; a directory of more files
    # than are held keeps them in a scratch file.
    md5s = directory_digests(len(files), files.spilled)
    if made is not None:
        made.extend(x for x in (segments, md5s) if isinstance(x, ScratchFile))
    stream_pos = 0

    file_start = 0  # where the file being read starts in the buffer

    def cut() -> None:
        nonlocal lease, buf, fill, whole
        blocks.append(packer.submit(lease, fill, whole, md5s))
        lease = packer.lease(rest)
        buf, fill, whole = lease.buf, 0, []

    def fill_from(fd: int, left: int, direct: DirectReads | None) -> FileHash | None:
        """Read a file of ``left`` bytes into the buffers, cutting blocks as
        they fill; its hash if it spans blocks (None: it lies in one)."""
        nonlocal lease, buf, fill, whole, stream_pos, file_start
        fh: FileHash | None = None
        pos = 0  # read by offset: a direct read does not move the descriptor
        while True:
            if fill == block_size:
                if fh is None and file_start == 0:
                    seed: Future[Any] = Future()
                    fh = FileHash(seed)
                    blocks.append(packer.submit(lease, fill, whole, md5s, seed))
                else:
                    fh = fh or FileHash()
                    packer.hash_part(fh, lease, file_start, fill)
                    blocks.append(packer.submit(lease, fill, whole, md5s))
                lease = packer.lease(left + rest)
                buf, fill, file_start, whole = lease.buf, 0, 0, []
            want = min(block_size - fill, left)
            if fill + want > len(buf):
                buf = packer.grow(lease, fill, fill + want + rest)
            n = None if direct is None or not want else direct.read(buf, fill, want, pos)
            if n is None:
                n = os.preadv(fd, (memoryview(buf)[fill : fill + want],), pos) if want else 0
            if not n:
                return fh
            left -= n
            fill += n
            pos += n
            stream_pos += n
            if progress is not None:
                progress(n)

    for index, (name, path, size) in enumerate(files):
        rest -= size
        big = size >= block_size
        if big and fill:
            cut()
        start = stream_pos
        file_start = fill
        fh: FileHash | None = None
        try:
            opened = (
                reads.next() if size <= SMALL_FILE else os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            )
        except OSError as e:
            raise os_error(e, f"cannot read {path}") from None
        if isinstance(opened, OSError):
            # Not raised itself: this frame, in its traceback, would hold it.
            raise os_error(opened, f"cannot read {path}")
        fd = opened
        try:
            # Stat before and after: a file written meanwhile would be stored
            # torn. Reading stops at the size it had when opened, so a file
            # that keeps growing does not keep the put going.
            before = os.fstat(fd)
            left = before.st_size
            if 0 < left <= block_size - fill and left <= SMALL_FILE:
                # Nearly every small file: it fits the block, one read.
                if fill + left > len(buf):
                    buf = packer.grow(lease, fill, fill + left + rest)
                view = memoryview(buf)[fill : fill + left]
                n = os.readv(fd, (view,))
                while 0 < n < left:  # a short read: on to the size it had
                    more = os.readv(fd, (view[n:],))
                    if not more:
                        break
                    n += more
                fill += n
                stream_pos += n
                if progress is not None:
                    progress(n)
            else:
                direct = DirectReads(fd) if left >= _DIRECT_MIN else None
                try:
                    fh = fill_from(fd, left, direct)
                finally:
                    if direct is not None:
                        direct.close()
            after = os.fstat(fd)
        finally:
            os.close(fd)
        why = _changed(
            size,
            (before.st_size, before.st_mtime_ns),
            (after.st_size, after.st_mtime_ns),
            stream_pos - start,
        )
        if why and not allow_changing:
            raise FileChangedError(
                f"{path} changed while it was read ({why}): nothing was stored under a name; "
                "put it again once it is stable, or give --allow-changing to store what was read"
            )
        if why and changed is not None:
            changed.append(f"{rel}/{name}" if rel else name)
        if fh is None:
            whole.append((index, file_start, fill))
            if len(whole) >= _WHOLE_BATCH:
                # A block of many tiny files (a million fit in 64 MiB): its
                # files are hashed a batch at a time, not listed to its end.
                packer.hash_files(lease, whole, md5s)
                whole = []
        else:
            packer.hash_part(fh, lease, file_start, fill)
            packer.file_done(md5s, index, fh)
        # An empty file is written 0:0:name, as the normalized form has it.
        length = stream_pos - start
        segments.append(Segment(start if length else 0, length, name))
        if big and fill:
            cut()
    if fill or whole:
        blocks.append(packer.submit(lease, fill, whole, md5s))
    else:
        lease.release()
    return blocks, segments, stream_pos, md5s
