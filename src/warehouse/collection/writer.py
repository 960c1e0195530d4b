"""Pack a tree of files into blocks and a normalized manifest.

One stream per directory; files are concatenated into 64 MiB blocks, which
are hashed and stored on a thread pool (hashlib and file writes release the
GIL, so this uses every core). Memory stays bounded: a fixed number of block
buffers circulate between the reading thread and the workers, whatever the
size of the tree. The tree is walked a directory at a time; with a spool,
each directory's stream and its files' MD5s are written out once its blocks
are stored, so nothing of a file is held to the end of the put.
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import queue
import tempfile
import threading
from bisect import bisect_right
from collections import OrderedDict, deque
from collections.abc import (
    Callable,
    Collection,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import repeat, tee
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from warehouse.blocks import EMPTY_LOCATOR, MAX_BLOCK_SIZE, Locator
from warehouse.blocks.store import BlockStore, StoredBlock
from warehouse.collection.digests import Digests, FileDigests, digest_table, directory_digests
from warehouse.collection.scan import DirNode, Files, LazyTree
from warehouse.collection.spool import (
    BlockLog,
    SpilledDigests,
    SpilledHits,
    _ScratchFile,
    hex_digests,
)
from warehouse.errors import WarehouseError, os_error
from warehouse.manifest import Manifest, Segment, Stream
from warehouse.manifest.entries import FileEntry, FilePiece
from warehouse.manifest.escape import escape_name
from warehouse.manifest.layout import file_entries
from warehouse.manifest.normalize import StreamLayout, normalized_streams
from warehouse.manifest.parse import parse_streams

if TYPE_CHECKING:
    from warehouse.collection.spool import Spool

__all__ = [
    "CachedFile",
    "FileCache",
    "FileChangedError",
    "WriteResult",
    "default_workers",
    "write_tree",
]


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


class WriteResult:
    """What a put stored.

    The manifest and each file's MD5 are held where ``write_tree`` was
    asked for them (no spool); a put through a spool has them in the spool
    and then in the catalog, and ``loader`` reads them back when asked.
    """

    def __init__(
        self,
        manifest: Manifest | None = None,
        # Every block the data needed, in order.
        blocks: BlockLog | Sequence[StoredBlock] = (),
        file_count: int = 0,
        bytes_read: int = 0,
        file_md5s: Mapping[str, str] | None = None,  # path -> MD5 of the bytes read
        # Files that changed while read, stored as read (only with allow_changing).
        changed: tuple[str, ...] = (),
        *,
        pdh: str | None = None,
        size: int | None = None,
    ) -> None:
        self._manifest = manifest
        self._file_md5s = file_md5s
        self.blocks = blocks
        self.file_count = file_count
        self.bytes_read = bytes_read
        self.changed = changed
        self._pdh = pdh
        self._size = size
        self.loader: Callable[[], tuple[Manifest, Mapping[str, str] | None]] | None = None

    def _load(self) -> None:
        if self.loader is None:
            raise RuntimeError("the manifest of this put was not kept")
        self._manifest, self._file_md5s = self.loader()
        self.loader = None

    @property
    def manifest(self) -> Manifest:
        if self._manifest is None:
            self._load()
        assert self._manifest is not None
        return self._manifest

    @property
    def file_md5s(self) -> Mapping[str, str]:
        if self._manifest is None:
            self._load()
        return self._file_md5s or {}

    @property
    def pdh(self) -> str:
        return self._pdh if self._pdh is not None else self.manifest.pdh

    @property
    def size(self) -> int:
        """Bytes of the files."""
        return self._size if self._size is not None else self.manifest.size

    @property
    def blocks_new(self) -> int:
        if isinstance(self.blocks, BlockLog):
            return self.blocks.blocks_new
        return sum(b.new for b in self.blocks)

    @property
    def bytes_new(self) -> int:
        if isinstance(self.blocks, BlockLog):
            return self.blocks.bytes_new
        return sum(b.locator.size for b in self.blocks if b.new)

    def block_writes(self) -> Iterable[tuple[str, int, bool]]:
        """(md5, size, new) of every block, in order: one accounting row each."""
        if isinstance(self.blocks, BlockLog):
            return self.blocks.rows()
        return [(b.locator.md5, b.locator.size, b.new) for b in self.blocks]


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
        self, lease: _Lease, whole_files: list[tuple[int, int, int]], md5s: Digests
    ) -> None:
        """Hash files wholly inside the buffer being filled, before it is
        submitted: what it holds of them is read, and stays where it is (a
        grown buffer is a copy; the old one lives while this task holds it)."""
        lease.hold()
        self._task(self.pool.submit(self._hash_files, lease, whole_files, md5s))

    def hash_part(self, fh: _FileHash, lease: _Lease, lo: int, hi: int) -> None:
        """Add buf[lo:hi] to a file's MD5, after the parts submitted before."""
        lease.hold()

        def update() -> None:
            try:
                fh.state().update(memoryview(lease.buf)[lo:hi])
            finally:
                lease.release()

        self._task(self.hasher.submit(update))

    def file_done(self, md5s: Digests, index: int, fh: _FileHash) -> None:
        def record() -> None:
            md5s[index * 16 : index * 16 + 16] = fh.state().digest()

        self._task(self.hasher.submit(record))

    def _note_error(self, fut: Future[Any]) -> None:
        if self.error is None and not fut.cancelled():
            self.error = fut.exception()

    def _hash_files(
        self, lease: _Lease, whole_files: list[tuple[int, int, int]], md5s: Digests
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
        lease: _Lease,
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


# Files of at most SMALL_FILE bytes are opened AHEAD files before they are
# read, each with posix_fadvise(WILLNEED): the kernel starts reading them at
# once, so the reads of a tree of small files not in memory wait on the disk
# together instead of one after the other (6.5-9.6 s -> 2.1 s for 100,000
# files of 1-8 KB here). Threads reading them did worse: each holds the GIL
# between its system calls.
SMALL_FILE = 1 << 20
AHEAD = 64


# Directories a read-ahead holds at most beyond the one being packed (a run
# of directories without small files is not all read ahead).
NODES_AHEAD = 16


class _ReadAhead:
    """The directories of a walk, and their small files opened ahead in the
    order the packer takes them in."""

    def __init__(self, nodes: Iterator[_Todo]) -> None:
        self._nodes: deque[_Todo] = deque()  # found by the walk, not packed yet
        # The walk holds the deque, not the read-ahead: a walk referring to
        # its read-ahead would keep both, and the directories' scratch files,
        # until the cycle collector ran.
        self._walk = _small_paths(nodes, self._nodes)
        self._open: deque[int | OSError] = deque()
        self._done = False
        try:
            for _ in range(AHEAD):
                self._ahead()
        except BaseException:
            self.close()  # the walk failed (a special file, a link loop)
            raise

    def _step(self) -> bool:
        """One step of the walk; True if it opened a small file."""
        path = next(self._walk, None)
        if not path:
            self._done = self._done or path is None
            return False
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            # Its turn raises an error of its own. Without its traceback:
            # the frames of it would hold the packing of a directory.
            self._open.append(e.with_traceback(None))
            return True
        try:  # noqa: SIM105 - once a file: cheaper than contextlib.suppress
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass  # only a hint
        self._open.append(fd)
        return True

    def _ahead(self) -> None:
        """Open one more small file, unless enough directories are held ahead."""
        while not self._done and not self._step():
            if len(self._nodes) > NODES_AHEAD:
                return

    def node(self) -> _Todo | None:
        """The next directory of the walk (None: no more)."""
        while not self._nodes and not self._done:
            self._step()
        return self._nodes.popleft() if self._nodes else None

    def next(self) -> int | OSError:
        """The open descriptor of the next small file of the walk (the caller closes it)."""
        while not self._open:
            if self._done:
                raise RuntimeError("the walk ended before the files packed")
            self._step()
        fd = self._open.popleft()
        try:
            self._ahead()
        except BaseException:
            if isinstance(fd, int):
                os.close(fd)
            raise
        return fd

    def close(self) -> None:
        """Close the files opened ahead and end the walk; the directories
        found and not packed (an error ended the put) close their scratch
        files."""
        self._done = True
        self._walk.close()
        while self._open:
            fd = self._open.popleft()
            if isinstance(fd, int):
                os.close(fd)
        while self._nodes:
            self._nodes.popleft().close()


def _small_paths(nodes: Iterator[_Todo], found: deque[_Todo]) -> Generator[str, None, None]:
    """The small files of ``nodes`` in order, each directory put in ``found``
    as it starts (a "" then: reading ahead may stop there)."""
    try:
        for node in nodes:
            found.append(node)
            yield ""
            for _, path, size in node.files:
                if size <= SMALL_FILE:
                    yield path
    finally:
        if isinstance(nodes, Generator):
            nodes.close()  # ends the tree's walk too, now


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


class SegmentText(_ScratchFile):
    """The segments of a directory of spilled files (``SpilledFiles``), as
    the text of its manifest line has them (" position:length:name" each),
    in an unnamed scratch file: written as the files are read, copied after
    the stream's locators once its blocks are stored."""

    def __init__(self) -> None:
        # Closed by close() (or with the object): no `with`.
        self._file: IO[bytes] = tempfile.TemporaryFile(prefix="put-segments-", buffering=1 << 20)  # noqa: SIM115
        self.size = 0
        self.data_size = 0
        self._pending: list[str] = []  # segments not written yet, written together

    def append(self, segment: Segment) -> None:
        # As format_stream writes it. A file's name here has no "/" and is
        # no "." (which it would escape further): a directory's entry.
        text = f" {segment.position}:{segment.length}:{escape_name(segment.name)}"
        self._pending.append(text)
        self.data_size += segment.length  # as read (a changing file may differ from its scan)
        if len(self._pending) >= 8192:
            self._write()

    def _write(self) -> None:
        data = "".join(self._pending).encode()
        self._pending.clear()
        self._file.write(data)
        self.size += len(data)

    def pieces(self, size: int = 1 << 18) -> Iterator[bytes]:
        if self._pending:
            self._write()
        self._file.flush()
        fd = self._file.fileno()
        pos = 0
        while pos < self.size:
            piece = os.pread(fd, min(size, self.size - pos), pos)
            if not piece:
                raise OSError(f"a scratch file of a put ends at {pos} of {self.size} bytes")
            pos += len(piece)
            yield piece

    def positions(self) -> Iterator[tuple[int, int]]:
        """Each segment's position and length, in order, read back from scratch."""
        rest = b""
        for piece in self.pieces():
            words = (rest + piece).split(b" ")
            rest = words.pop()  # may go on in the next piece
            for word in words:
                if word:
                    position, length, _ = word.split(b":", 2)
                    yield int(position), int(length)
        if rest:
            position, length, _ = rest.split(b":", 2)
            yield int(position), int(length)

    def entries(
        self, rel: str, names: Iterable[str], locators: Sequence[Locator]
    ) -> Iterator[FileEntry]:
        """Each file's entry (its pieces block by block), as ``file_entries``
        makes them of a stream laid out normalized (one segment a file, no
        block named twice), a file at a time in the order of ``names``."""
        starts = [0]
        for loc in locators:
            starts.append(starts[-1] + loc.size)
        prefix = rel + "/" if rel else ""
        for name, (position, length) in zip(names, self.positions(), strict=True):
            pieces: list[FilePiece] = []
            if length and len(locators) == 1:
                pieces.append(FilePiece(locators[0], position, length))
            elif length:
                # bisect_right skips empty blocks that share a start.
                index = bisect_right(starts, position) - 1
                left = length
                while left:
                    loc = locators[index]
                    take = min(left, loc.size - (position - starts[index]))
                    if take > 0:
                        pieces.append(FilePiece(loc, position - starts[index], take))
                        position += take
                        left -= take
                    index += 1
            yield FileEntry(prefix + name, length, tuple(pieces))

    def stream(self, name: str, locators: Sequence[Any]) -> Stream:
        """The stream whole (where it must be normalized again, or is kept in memory)."""
        head = " ".join([escape_name(name), *(str(loc) for loc in locators)]).encode()
        (stream,) = parse_streams(b"".join([head, *self.pieces(), b"\n"]))
        return stream


# Files wholly inside a block held at most before they are hashed.
_WHOLE_BATCH = 8192


def _pack_dir(
    rel: str,
    files: Files,
    packer: _Packer,
    reads: _ReadAhead,
    progress: Progress | None,
    allow_changing: bool = False,
    changed: list[str] | None = None,
    made: list[_ScratchFile] | None = None,
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
        made.extend(x for x in (segments, md5s) if isinstance(x, _ScratchFile))
    stream_pos = 0

    file_start = 0  # where the file being read starts in the buffer

    def cut() -> None:
        nonlocal lease, buf, fill, whole
        blocks.append(packer.submit(lease, fill, whole, md5s))
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
                    blocks.append(packer.submit(lease, fill, whole, md5s, seed))
                else:
                    fh = fh or _FileHash()
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
        fh: _FileHash | None = None
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


def _normalized_text(
    first: Iterable[FileEntry], entries: Callable[[], Iterable[FileEntry]], cut: int
) -> tuple[tuple[Locator, ...], Iterator[bytes]]:
    """The normalized form of one stream too long to hold, from its files'
    entries in name order (``first``, then ``entries()`` gives them again;
    ``cut``: the length of their directory's prefix): its block list, read
    through once, and its segments' text (" position:length:name" each) in
    pieces, made as they are written, a file at a time."""
    layout = StreamLayout()
    for entry in first:
        layout.place(entry.path[cut:], entry)
    locators = layout.locators

    def pieces() -> Iterator[bytes]:
        layout = StreamLayout()
        batch: list[str] = []
        for entry in entries():
            name = entry.path[cut:]
            # A directory's entry: no "/" and never ".", escaped as format_stream does.
            escaped = escape_name(name)
            batch.extend(f" {s.position}:{s.length}:{escaped}" for s in layout.place(name, entry))
            if len(batch) >= _TEXT_BATCH:
                yield "".join(batch).encode()
                batch = []
        if batch:
            yield "".join(batch).encode()
        if layout.locators != locators:
            raise RuntimeError("a stream's files read back differently the second time")

    return locators, pieces()


# Segments formatted at most before they are written out together.
_TEXT_BATCH = 8192


class CachedFile(Protocol):
    """A file the resume cache answers for: where its bytes are, and its MD5."""

    @property
    def entry(self) -> FileEntry: ...

    @property
    def md5(self) -> str: ...


class FileCache(Protocol):
    """What the writer asks of the resume cache, a directory at a time."""

    def hits(self, node: DirNode) -> Mapping[str, CachedFile] | SpilledHits | None:
        """The files of ``node`` (by name) the cache answers for; None: it
        does not look at this directory (nothing to learn from it either).
        Of a directory of more files than are held, in a scratch file in
        name order (``SpilledHits``), unless there are none."""

    def learn(
        self,
        node: DirNode,
        written: Mapping[str, FileEntry],
        md5s: Mapping[str, str],
        changed: Collection[str],
    ) -> None:
        """What the put read of a directory ``hits`` looked at (by path)."""

    def learn_read(
        self,
        node: DirNode,
        entries: Iterable[FileEntry | None],
        md5s: Iterable[str | None],
        changed: Collection[str],
    ) -> None:
        """``learn`` of a directory given a file at a time: its entries and
        MD5s in the order of its files, None for a file ``hits`` answered
        for (not read)."""

    def close(self) -> None:
        """The put failed: close the scratch files; what it learned is not saved."""


class _Sink(Protocol):
    def add(
        self, stream: Stream, rel: str, names: Sequence[str], md5s: bytes | bytearray
    ) -> None: ...


def _parts_sink(sink: _Sink) -> Spool | None:
    """The sink as a spool (which takes a stream in parts), if it is one."""
    from warehouse.collection.spool import Spool

    return sink if isinstance(sink, Spool) else None


class _Kept:
    """The streams and digests of a put kept in memory (no spool)."""

    def __init__(self) -> None:
        self.streams: list[Stream] = []
        self.digests = FileDigests()
        self.file_count = 0

    def add(self, stream: Stream, rel: str, names: Sequence[str], md5s: bytes | bytearray) -> None:
        self.streams.append(stream)
        if names:
            self.digests.add_directory(rel, names, md5s)
            self.file_count += len(names)


@dataclass
class _Todo:
    """A directory of the walk, the files of it to read (the others the
    cache answers for: ``hits``, None where it was not asked)."""

    node: DirNode
    files: Files
    hits: Mapping[str, CachedFile] | SpilledHits | None = None
    marker: bool = False  # an empty directory, written as a marker stream
    walked: bool = False  # the node is the put's own walk's (a lazy tree's)

    def close(self) -> None:
        """Close its scratch files (an error ended the put): the node's own
        only if the put's walk made it, not a tree the caller scanned."""
        if self.walked or self.files is not self.node.files:
            self.files.close()
        if self.walked:
            self.node.files.close()
        if isinstance(self.hits, SpilledHits):
            self.hits.close()


@dataclass
class _Packed:
    """A directory read into blocks, waiting for them to be stored."""

    todo: _Todo
    blocks: list[Future[StoredBlock]]
    segments: list[Segment] | SegmentText
    md5s: Digests
    tasks: list[Future[Any]]
    changed: list[str]

    def done(self) -> bool:
        return all(t.done() for t in self.tasks)

    def close(self) -> None:
        """Close its scratch files (an error ended the put, its tasks are over)."""
        for made in (self.segments, self.md5s):
            if isinstance(made, _ScratchFile):
                made.close()
        self.todo.close()


class _SeenKeys:
    """The last ``limit`` keys added, oldest first out: what a put of many
    directories holds of their blocks' keys does not grow with them."""

    def __init__(self, limit: int) -> None:
        self._keys: OrderedDict[str, None] = OrderedDict()
        self._limit = limit

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def add(self, key: str) -> None:
        if key in self._keys:
            self._keys.move_to_end(key)  # seen again: the latest now
            return
        self._keys[key] = None
        if len(self._keys) > self._limit:
            self._keys.popitem(last=False)


# Block keys a put with a resume cache remembers at most (about 10 MB).
_SEEN_KEYS = 1 << 16


# Directories packed and not yet written out at most: their blocks are in
# flight (the buffers bound those), so this is rarely reached.
_PENDING = 64


class _Emitter:
    """Writes each packed directory's stream and digests to the sink, in
    walk order, once its blocks are stored."""

    def __init__(self, sink: _Sink, cache: FileCache | None, blocks: BlockLog) -> None:
        self.sink = sink
        self.cache = cache
        # Every block, in order (for accounting: one row each), and with a
        # cache the keys seen lately, so a block the cache names is counted
        # once (while among the last _SEEN_KEYS seen: one row more for a
        # block named again after that many others, never a row less).
        self.blocks = blocks
        self._keys = _SeenKeys(_SEEN_KEYS)
        self.pending: deque[_Packed] = deque()
        self._emitting: _Packed | None = None

    def add(self, packed: _Packed) -> None:
        self.pending.append(packed)
        while self.pending and (self.pending[0].done() or len(self.pending) > _PENDING):
            self._emit_next()

    def finish(self) -> None:
        while self.pending:
            self._emit_next()

    def _emit_next(self) -> None:
        self._emitting = self.pending.popleft()
        self._emit(self._emitting)
        self._emitting = None

    def close(self) -> None:
        """Close the scratch files of the directories not written out and
        the block log (an error ended the put; its tasks are over)."""
        if self._emitting is not None:
            self._emitting.close()
            self._emitting = None
        while self.pending:
            self.pending.popleft().close()
        self.blocks.close()

    def _emit(self, packed: _Packed) -> None:
        stored = [f.result() for f in packed.blocks]
        for task in packed.tasks:
            task.result()  # a file's hash failed: raised here
        # Every task is done: nothing writes to the digests' scratch file any
        # more (on an error the tasks still running hold it open).
        try:
            self._write(packed, stored)
        finally:
            if isinstance(packed.md5s, SpilledDigests):
                packed.md5s.close()

    def _write(self, packed: _Packed, stored: list[StoredBlock]) -> None:
        node, files, hits = packed.todo.node, packed.todo.files, packed.todo.hits
        rel = node.rel
        name = f"./{rel}" if rel else "."
        for b in stored:
            if not b.locator.is_empty:
                self.blocks.append(b)
                if self.cache is not None:
                    self._keys.add(b.locator.key)
        if not node.files:
            self.sink.add(Stream(name, (EMPTY_LOCATOR,), (_MARKER,)), rel, (), b"")
            return
        locators = tuple(b.locator for b in stored) or (EMPTY_LOCATOR,)
        if isinstance(hits, SpilledHits):
            spool = _parts_sink(self.sink)
            if spool is not None:
                self._write_merged(packed, locators, hits, spool)
                return
            # Kept in memory (no spool): held whole, as a smaller directory's.
            spilled_hits = hits
            try:
                hits = dict(spilled_hits)
            finally:
                spilled_hits.close()
        if isinstance(packed.segments, SegmentText):
            # A directory of more files than are held: into a spool in parts,
            # its locators, then its segments copied from scratch, then its
            # listing entries, as the files are read back.
            text = packed.segments
            try:
                spool = _parts_sink(self.sink)
                # An empty block (empty files after a file of a block or
                # more end a stream with one) holds no piece of any file and
                # shifts no position: normalizing drops it and changes no
                # segment, so the segments' text stands without it.
                if len(locators) > 1 and any(loc.is_empty for loc in locators):
                    locators = tuple(loc for loc in locators if not loc.is_empty) or locators
                if not hits and spool is not None:
                    head: Sequence[Locator] = locators
                    segments: Iterable[bytes]
                    if _laid_out_normalized(Stream(name, locators, ())):
                        segments = text.pieces()
                    else:
                        # A block named twice: the normalized form, its files'
                        # entries read back twice (block list, then segments).
                        def read_back() -> Iterator[FileEntry]:
                            return text.entries(rel, node.files.iter_names(), locators)

                        cut = len(rel) + 1 if rel else 0
                        head, segments = _normalized_text(read_back(), read_back, cut)
                    spool.add_parts(
                        name,
                        head,
                        segments,
                        rel,
                        node.files.iter_names(),
                        packed.md5s,
                        len(node.files),
                        text.data_size,
                    )
                    if hits is not None:
                        # The cache was asked and answered nothing: it learns
                        # every file, read back a file at a time.
                        assert self.cache is not None
                        self.cache.learn_read(
                            node,
                            text.entries(rel, node.files.iter_names(), locators),
                            hex_digests(packed.md5s),
                            set(packed.changed),
                        )
                    return
                # Files the resume cache answers for, or kept in memory:
                # held whole, as a directory of fewer files is.
                stream = text.stream(name, locators)
            finally:
                text.close()
            names: Sequence[str] = list(node.files.iter_names())
            md5s = packed.md5s.read() if isinstance(packed.md5s, SpilledDigests) else packed.md5s
        else:
            # (Spilled files all read through the resume cache are held here.)
            spilled = node.files.spilled
            names = list(node.files.iter_names()) if spilled else node.files.names
            stream = Stream(name, locators, tuple(packed.segments))
            assert not isinstance(packed.md5s, SpilledDigests)  # they go with SegmentText
            md5s = packed.md5s
        if hits is None:
            if not _laid_out_normalized(stream):
                (stream,) = normalized_streams(file_entries([stream]).values())
            self.sink.add(stream, rel, names, md5s)
            return
        written = file_entries([stream]) if files else {}
        entries: list[FileEntry] = []
        read_md5s, md5s = md5s, digest_table(0)
        read: dict[str, str] = {}
        prefix = rel + "/" if rel else ""
        j = 0
        for n in names:
            hit = hits.get(n)
            if hit is not None:
                entries.append(hit.entry)
                md5s += bytes.fromhex(hit.md5)
                for piece in hit.entry.pieces:
                    loc = piece.locator
                    if loc.key not in self._keys and not loc.is_empty:
                        self._keys.add(loc.key)
                        self.blocks.append(StoredBlock(loc, False))
                continue
            digest = read_md5s[16 * j : 16 * j + 16]
            j += 1
            entries.append(written[prefix + n])
            md5s += digest
            read[prefix + n] = digest.hex()
        (stream,) = normalized_streams(entries)
        self.sink.add(stream, rel, names, md5s)
        assert self.cache is not None
        self.cache.learn(node, written, read, set(packed.changed))

    def _write_merged(
        self,
        packed: _Packed,
        locators: tuple[Locator, ...],
        hits: SpilledHits,
        spool: Spool,
    ) -> None:
        """A directory of more files than are held, some of which the resume
        cache answers for, into the spool in parts: the files read and the
        hits (each in a scratch file, in name order) merged a file at a time,
        normalized as ``normalized_streams`` would the two held whole."""
        node = packed.todo.node
        rel = node.rel
        text = packed.segments if isinstance(packed.segments, SegmentText) else None
        assert self.cache is not None
        try:
            size = text.data_size if text is not None else 0

            def merged() -> Iterator[tuple[FileEntry, str, bool]]:
                """Each file's entry, MD5 and whether it was read, in name order."""
                reads: Iterator[FileEntry] = iter(())
                if text is not None:
                    reads = text.entries(rel, packed.todo.files.iter_names(), locators)
                digests = hex_digests(packed.md5s)
                cached = iter(hits)
                hit = next(cached, None)
                for file in node.files.iter_names():
                    if hit is not None and hit[0] == file:
                        yield hit[1].entry, hit[1].md5, False
                        hit = next(cached, None)
                    else:
                        yield next(reads), next(digests), True
                if hit is not None or next(reads, None) is not None:
                    raise RuntimeError("a directory's files and hits read back out of step")

            def first() -> Iterator[FileEntry]:
                """``merged`` the first time: the blocks the hits name are
                counted once each, in the order held whole counts them."""
                nonlocal size
                for entry, _, read in merged():
                    if not read:
                        size += entry.size
                        for piece in entry.pieces:
                            loc = piece.locator
                            if loc.key not in self._keys and not loc.is_empty:
                                self._keys.add(loc.key)
                                self.blocks.append(StoredBlock(loc, False))
                    yield entry

            head, segments = _normalized_text(
                first(), lambda: (entry for entry, _, _ in merged()), len(rel) + 1 if rel else 0
            )
            spool.add_parts(
                f"./{rel}" if rel else ".",
                head,
                segments,
                rel,
                node.files.iter_names(),
                (md5 for _, md5, _ in merged()),
                len(node.files),
                size,
            )
            # The files read, learned a file at a time (hits: None): one pass
            # of the merge, which learn_read takes in step (tee holds one).
            entries: Iterable[FileEntry | None] = repeat(None, len(node.files))
            md5s: Iterable[str | None] = repeat(None, len(node.files))
            if text is not None:
                learned = ((e, m) if read else (None, None) for e, m, read in merged())
                by_entry, by_md5 = tee(learned)
                entries = (entry for entry, _ in by_entry)
                md5s = (md5 for _, md5 in by_md5)
            self.cache.learn_read(node, entries, md5s, set(packed.changed))
        finally:
            if text is not None:
                text.close()
            hits.close()


_MARKER = Segment(0, 0, ".")


def write_tree(
    store: BlockStore,
    paths: Sequence[Path] | DirNode,
    *,
    workers: int | None = None,
    progress: Progress | None = None,
    block_size: int = MAX_BLOCK_SIZE,
    check: Callable[[], None] = lambda: None,
    allow_changing: bool = False,
    spool: Spool | None = None,
    cache: FileCache | None = None,
) -> WriteResult:
    """Store the files under ``paths`` and return the normalized manifest.

    ``check`` is called before each block is stored; what it raises stops the put.
    A file whose size or mtime changes while it is read raises
    ``FileChangedError``, unless ``allow_changing``: then what was read is
    stored and the file is listed in ``changed``.

    With a ``spool``, each directory's stream and digests are written to it
    as soon as its blocks are stored, and the result holds neither the
    manifest nor the digests (the caller records them from the spool):
    what the put holds does not grow with the file count. ``cache``: the
    files it answers for are not read; a put that fails closes it (what it
    learned is not saved). A put that fails closes its scratch files before
    it raises.
    """
    root = paths if isinstance(paths, DirNode) else LazyTree(paths)
    packer = _Packer(store, workers or default_workers(), block_size, check)
    kept: _Kept | None = None
    sink: _Sink
    if spool is None:
        sink = kept = _Kept()
    else:
        sink = spool
    emitter = _Emitter(sink, cache, BlockLog(None if spool is None else spool.directory))

    # A lazy tree's every walk reads the tree anew: its nodes are this put's.
    walked = isinstance(root, LazyTree)

    def todos() -> Iterator[_Todo]:
        for node in root.walk():
            hits = cache.hits(node) if cache is not None and node.files else None
            if not hits:
                files = node.files
            elif isinstance(hits, SpilledHits):
                files = node.files.without(name for name, _ in hits)
            else:
                files = node.files.only(hits.__contains__, keep=False)
            yield _Todo(node, files, hits, bool(node.rel) and node.is_empty, walked)

    changed: list[str] = []
    total = 0
    todo: _Todo | None = None
    made: list[_ScratchFile] = []  # by the directory being packed
    reads: _ReadAhead | None = None
    try:
        try:
            reads = _ReadAhead(todos())
            while (todo := reads.node()) is not None:
                packer.tasks = []
                before = len(changed)
                made = []
                if todo.files:
                    blocks, segments, size, md5s = _pack_dir(
                        todo.node.rel,
                        todo.files,
                        packer,
                        reads,
                        progress,
                        allow_changing,
                        changed,
                        made,
                    )
                    total += size
                elif todo.node.files or todo.marker:
                    blocks, segments, md5s = [], [], digest_table(0)
                else:
                    continue  # a directory of directories: no stream of its own
                emitter.add(_Packed(todo, blocks, segments, md5s, packer.tasks, changed[before:]))
            emitter.finish()
            packer.finish()
        finally:
            if reads is not None:
                reads.close()
            packer.close()
        store.flush()
        if packer.error is not None:
            raise packer.error
    except BaseException:
        # The error's traceback holds what is open: closed now, not when it
        # is collected; the workers, which write to them, are done.
        for scratch in made:
            scratch.close()
        if todo is not None:
            todo.close()
        emitter.close()
        if cache is not None:
            cache.close()
        raise
    if kept is None:
        assert spool is not None
        return WriteResult(
            None,
            emitter.blocks,
            spool.file_count,
            total,
            None,
            tuple(changed),
            pdh=spool.pdh,
            size=spool.size,
        )
    manifest = Manifest(tuple(kept.streams))
    # Normalized stream by stream as written: formatting it again would build
    # every file's entry to find it unchanged.
    manifest.__dict__["_normalized"] = manifest
    return WriteResult(
        manifest, emitter.blocks, kept.file_count, total, kept.digests, tuple(changed)
    )
