"""Pack a tree of files into blocks and a normalized manifest.

One stream per directory; files are concatenated into 64 MiB blocks, which
are hashed and stored on a thread pool (hashlib and file writes release the
GIL, so this uses every core). Memory stays bounded: a fixed number of block
buffers circulate between the reading thread and the workers, whatever the
size of the tree.
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import queue
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warehouse.blocks import EMPTY_LOCATOR, MAX_BLOCK_SIZE
from warehouse.blocks.store import BlockStore, StoredBlock
from warehouse.collection.digests import FileDigests
from warehouse.collection.scan import DirNode, scan_paths
from warehouse.errors import WarehouseError, os_error
from warehouse.manifest import Manifest, Segment, Stream

__all__ = ["FileChangedError", "WriteResult", "default_workers", "write_tree"]


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


@dataclass(frozen=True)
class WriteResult:
    manifest: Manifest
    blocks: tuple[StoredBlock, ...]  # every block the data needed, in order
    file_count: int
    bytes_read: int
    file_md5s: Mapping[str, str]  # path -> MD5 of the bytes read, for the md5sum listing
    # Files that changed while read, stored as read (only with allow_changing).
    changed: tuple[str, ...] = ()

    @property
    def pdh(self) -> str:
        return self.manifest.pdh

    @property
    def blocks_new(self) -> int:
        return sum(b.new for b in self.blocks)

    @property
    def bytes_new(self) -> int:
        return sum(b.locator.size for b in self.blocks if b.new)


class _Lease:
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


class _DirectReads:
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


class _FileHash:
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


class _Packer:
    """Fills block buffers from files and hands full ones to the pool."""

    def __init__(
        self,
        store: BlockStore,
        workers: int,
        block_size: int,
        check: Callable[[], None],
        files: int,
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
        self.digests = FileDigests(files)  # path -> MD5 of the file's bytes
        self.seeds: list[Future[Any]] = []

    def lease(self, need: int) -> _Lease:
        """A free buffer of at least ``min(need, block_size)`` bytes.

        Buffers are made when first wanted and only as large as the data
        known to go in (a small tree never pays for 64 MiB of zeroed pages);
        ``grow`` enlarges one when more comes.
        """
        want = min(max(need, _MIN_BUFFER), self.block_size)
        if self.unallocated and self.free.empty():
            self.unallocated -= 1
            return _Lease(_buffer(want), self.free)
        buf = self.free.get()
        if len(buf) < want:
            buf = _buffer(want)  # the smaller one is dropped: the count stays
        return _Lease(buf, self.free)

    def grow(self, lease: _Lease, fill: int, need: int) -> Buffer:
        """Enlarge the reading thread's buffer (no other thread holds it yet)."""
        size = min(max(need, 2 * len(lease.buf)), self.block_size)
        buf = _buffer(size)
        buf[:fill] = memoryview(lease.buf)[:fill]
        lease.buf = buf
        return buf

    def submit(
        self,
        lease: _Lease,
        length: int,
        whole_files: list[tuple[int, int, int]],
        seed: Future[Any] | None = None,
    ) -> Future[StoredBlock]:
        """Store the buffer's first ``length`` bytes; the reading thread's hold passes on.

        ``whole_files`` lie inside the block; ``seed`` receives the block's MD5
        state for a file that fills it from its start and goes on.
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
            self.pool.submit(self._hash_files, lease, others).add_done_callback(self._note_error)
        if seed is not None:
            # Kept until hashed, for close() to fail the waits of any dropped.
            self.seeds = [s for s in self.seeds if not s.done()]
            self.seeds.append(seed)
        fut = self.pool.submit(self._store, lease, length, first, seed)
        fut.add_done_callback(self._note_error)
        return fut

    def hash_part(self, fh: _FileHash, lease: _Lease, lo: int, hi: int) -> None:
        """Add buf[lo:hi] to a file's MD5, after the parts submitted before."""
        lease.hold()

        def update() -> None:
            try:
                fh.state().update(memoryview(lease.buf)[lo:hi])
            finally:
                lease.release()

        self.hasher.submit(update).add_done_callback(self._note_error)

    def file_done(self, index: int, fh: _FileHash) -> None:
        def record() -> None:
            self.digests.set(index, fh.state().digest())

        self.hasher.submit(record).add_done_callback(self._note_error)

    def _note_error(self, fut: Future[Any]) -> None:
        if self.error is None and not fut.cancelled():
            self.error = fut.exception()

    def _hash_files(self, lease: _Lease, whole_files: list[tuple[int, int, int]]) -> None:
        try:
            view = memoryview(lease.buf)
            digests = self.digests
            for index, lo, hi in whole_files:
                digests.set(index, hashlib.md5(view[lo:hi]).digest())
        finally:
            lease.release()

    def _store(
        self,
        lease: _Lease,
        length: int,
        first: tuple[int, int, int] | None,
        seed: Future[Any] | None,
    ) -> StoredBlock:
        try:
            view = memoryview(lease.buf)
            md5 = hashlib.md5()
            if first is not None:
                index, _, hi = first
                md5.update(view[:hi])
                self.digests.set(index, md5.copy().digest())
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


# Files of at most SMALL_FILE bytes are opened AHEAD files before they are
# read, each with posix_fadvise(WILLNEED): the kernel starts reading them at
# once, so the reads of a tree of small files not in memory wait on the disk
# together instead of one after the other (6.5-9.6 s -> 2.1 s for 100,000
# files of 1-8 KB here). Threads reading them did worse: each holds the GIL
# between its system calls.
SMALL_FILE = 1 << 20
AHEAD = 64


class _ReadAhead:
    """The small files of a tree, opened ahead in the order of the tree's
    walk (the order the packer takes them in)."""

    def __init__(self, root: DirNode) -> None:
        self._paths = (
            path for node in root.walk() for _, path, size in node.files if size <= SMALL_FILE
        )
        self._open: deque[int | OSError] = deque()
        for _ in range(AHEAD):
            self._ahead()

    def _ahead(self) -> None:
        path = next(self._paths, None)
        if path is None:
            return
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            self._open.append(e)  # raised when its turn comes
            return
        try:  # noqa: SIM105 - once a file: cheaper than contextlib.suppress
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass  # only a hint
        self._open.append(fd)

    def next(self) -> int | OSError:
        """The open descriptor of the next small file of the walk (the caller closes it)."""
        fd = self._open.popleft()
        self._ahead()
        return fd

    def close(self) -> None:
        while self._open:
            fd = self._open.popleft()
            if isinstance(fd, int):
                os.close(fd)


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


def _pack_dir(
    node: DirNode,
    packer: _Packer,
    reads: _ReadAhead,
    progress: Progress | None,
    allow_changing: bool = False,
    changed: list[str] | None = None,
) -> tuple[list[Future[StoredBlock]], list[Segment], int]:
    """Pack one directory's files into blocks; also take every file's MD5.

    The MD5s are recorded for the md5sum listing of `wh get`. A file inside one
    block is hashed by a worker (in parallel); a file spanning blocks by the
    packer's file hasher, in order. A file at least one block long gets blocks
    of its own: it starts a block and the block holding its end is cut there,
    so the same file is stored as the same blocks in any collection.
    """
    blocks: list[Future[StoredBlock]] = []
    segments: list[Segment] = []
    block_size = packer.block_size
    rest = node.files.total_size  # bytes of the files not read yet
    lease = packer.lease(rest)
    buf = lease.buf
    fill = 0
    whole: list[tuple[int, int, int]] = []  # files wholly inside the current buffer
    first = packer.digests.add_directory(node.rel, node.files.names)
    stream_pos = 0

    file_start = 0  # where the file being read starts in the buffer

    def cut() -> None:
        nonlocal lease, buf, fill, whole
        blocks.append(packer.submit(lease, fill, whole))
        lease = packer.lease(rest)
        buf, fill, whole = lease.buf, 0, []

    def fill_from(fd: int, left: int, direct: _DirectReads | None) -> _FileHash | None:
        """Read a file of ``left`` bytes into the buffers, cutting blocks as
        they fill; its hash if it spans blocks (None: it lies in one)."""
        nonlocal lease, buf, fill, whole, stream_pos, file_start
        fh: _FileHash | None = None
        pos = 0  # read by offset: a direct read does not move the descriptor
        while True:
            if fill == block_size:
                if fh is None and file_start == 0:
                    seed: Future[Any] = Future()
                    fh = _FileHash(seed)
                    blocks.append(packer.submit(lease, fill, whole, seed))
                else:
                    fh = fh or _FileHash()
                    packer.hash_part(fh, lease, file_start, fill)
                    blocks.append(packer.submit(lease, fill, whole))
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

    for index, (name, path, size) in enumerate(node.files, first):
        rest -= size
        big = size >= block_size
        if big and fill:
            cut()
        start = stream_pos
        file_start = fill
        fh: _FileHash | None = None
        try:
            fd = reads.next() if size <= SMALL_FILE else os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            if isinstance(fd, OSError):
                raise fd
        except OSError as e:
            raise os_error(e, f"cannot read {path}") from None
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
                direct = _DirectReads(fd) if left >= _DIRECT_MIN else None
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
            changed.append(f"{node.rel}/{name}" if node.rel else name)
        if fh is None:
            whole.append((index, file_start, fill))
        else:
            packer.hash_part(fh, lease, file_start, fill)
            packer.file_done(index, fh)
        # An empty file is written 0:0:name, as the normalized form has it.
        length = stream_pos - start
        segments.append(Segment(start if length else 0, length, name))
        if big and fill:
            cut()
    if fill or whole:
        blocks.append(packer.submit(lease, fill, whole))
    else:
        lease.release()
    return blocks, segments, stream_pos


def _laid_out_normalized(stream: Stream) -> bool:
    """Whether a stream of ``write_tree`` is in the normalized form already.

    The writer lays a tree out as that form does: directories depth first in
    name order (the scan's), one stream each, its files in name order, each
    in one segment at its place in the stream, an empty one 0:0, an empty
    directory a marker stream. What it can do otherwise: name a block twice
    (two stretches of the same bytes), or end a stream with an empty block
    (empty files after a file of a block or more); normalizing then lists a
    block once and drops the empty one.
    """
    locators = stream.locators
    if len(locators) == 1:
        return True
    return len({loc.key for loc in locators}) == len(locators) and not any(
        loc.is_empty for loc in locators
    )


def write_tree(
    store: BlockStore,
    paths: Sequence[Path] | DirNode,
    *,
    workers: int | None = None,
    progress: Progress | None = None,
    block_size: int = MAX_BLOCK_SIZE,
    check: Callable[[], None] = lambda: None,
    allow_changing: bool = False,
) -> WriteResult:
    """Store the files under ``paths`` and return the normalized manifest.

    ``check`` is called before each block is stored; what it raises stops the put.
    A file whose size or mtime changes while it is read raises
    ``FileChangedError``, unless ``allow_changing``: then what was read is
    stored and the file is listed in ``changed``.
    """
    root = paths if isinstance(paths, DirNode) else scan_paths(paths)
    packer = _Packer(store, workers or default_workers(), block_size, check, root.file_count)
    reads = _ReadAhead(root)
    planned: list[tuple[str, list[Future[StoredBlock]], list[Segment]]] = []
    changed: list[str] = []
    total = 0
    try:
        for node in root.walk():
            name = f"./{node.rel}" if node.rel else "."
            if node.files:
                blocks, segments, size = _pack_dir(
                    node, packer, reads, progress, allow_changing, changed
                )
                planned.append((name, blocks, segments))
                total += size
            elif node.is_empty and node.rel:
                planned.append((name, [], [Segment(0, 0, ".")]))
        stored = [[f.result() for f in blocks] for _, blocks, _ in planned]
        packer.finish()
    finally:
        reads.close()
        packer.close()
    store.flush()
    if packer.error is not None:
        raise packer.error
    streams = [
        Stream(name, tuple(b.locator for b in sb) or (EMPTY_LOCATOR,), tuple(segments))
        for (name, _, segments), sb in zip(planned, stored, strict=True)
    ]
    manifest = Manifest(tuple(streams))
    if all(_laid_out_normalized(stream) for stream in streams):
        # Normalizing it would build every file's entry to find it unchanged.
        manifest.__dict__["_normalized"] = manifest
    else:
        manifest = manifest.normalized()
    return WriteResult(
        manifest=manifest,
        blocks=tuple(b for sb in stored for b in sb if not b.locator.is_empty),
        file_count=root.file_count,
        file_md5s=packer.digests,
        bytes_read=total,
        changed=tuple(changed),
    )
