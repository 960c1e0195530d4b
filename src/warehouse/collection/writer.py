"""Pack a tree of files into blocks and a normalized manifest.

One stream per directory; files are concatenated into 64 MiB blocks, which
are hashed and stored on a thread pool (hashlib and file writes release the
GIL, so this uses every core). Memory stays bounded: a fixed number of block
buffers circulate between the reading thread and the workers, whatever the
size of the tree.
"""

from __future__ import annotations

import hashlib
import os
import queue
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from warehouse.blocks import EMPTY_LOCATOR, MAX_BLOCK_SIZE
from warehouse.blocks.store import BlockStore, StoredBlock
from warehouse.collection.scan import DirNode, scan_paths
from warehouse.errors import UsageError
from warehouse.manifest import Manifest, Segment, Stream

__all__ = ["WriteResult", "default_workers", "write_tree"]

Progress = Callable[[int], None]


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)))


@dataclass(frozen=True)
class WriteResult:
    manifest: Manifest
    blocks: tuple[StoredBlock, ...]  # every block the data needed, in order
    file_count: int
    bytes_read: int
    file_md5s: dict[str, str]  # path -> MD5 of the bytes read, for the md5sum listing

    @property
    def pdh(self) -> str:
        return self.manifest.pdh

    @property
    def blocks_new(self) -> int:
        return sum(b.new for b in self.blocks)

    @property
    def bytes_new(self) -> int:
        return sum(b.locator.size for b in self.blocks if b.new)


class _Packer:
    """Fills block buffers from files and hands full ones to the pool."""

    def __init__(self, store: BlockStore, workers: int, block_size: int) -> None:
        self.store = store
        self.block_size = block_size
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="wh-put")
        # workers + 1 buffers: every worker busy while the reader fills one more.
        self.free: queue.SimpleQueue[bytearray] = queue.SimpleQueue()
        self.unallocated = workers + 1
        self.error: BaseException | None = None
        self.digests: dict[str, str] = {}  # path -> MD5 of the file's bytes

    def buffer(self) -> bytearray:
        if self.unallocated and self.free.empty():
            self.unallocated -= 1
            return bytearray(self.block_size)
        return self.free.get()

    def submit(
        self, buf: bytearray, length: int, whole_files: list[tuple[str, int, int]]
    ) -> Future[StoredBlock]:
        # A failed store (disk full, server down) stops the reading now, not
        # after the whole tree was read.
        if self.error is not None:
            raise self.error
        fut = self.pool.submit(self._store, buf, length, whole_files)
        fut.add_done_callback(self._note_error)
        return fut

    def _note_error(self, fut: Future[StoredBlock]) -> None:
        if self.error is None and not fut.cancelled():
            self.error = fut.exception()

    def _store(
        self, buf: bytearray, length: int, whole_files: list[tuple[str, int, int]]
    ) -> StoredBlock:
        try:
            view = memoryview(buf)
            for path, lo, hi in whole_files:
                self.digests[path] = hashlib.md5(view[lo:hi]).hexdigest()
            return self.store.put(view[:length])
        finally:
            self.free.put(buf)

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def _pack_dir(
    node: DirNode, packer: _Packer, progress: Progress | None
) -> tuple[list[Future[StoredBlock]], list[Segment], int]:
    """Pack one directory's files into blocks; also take every file's MD5.

    The MD5s are recorded for the md5sum listing of `wh get`. A file inside one
    block is hashed by the worker that stores the block (in parallel); a file
    spanning blocks is hashed here, in order.
    """
    blocks: list[Future[StoredBlock]] = []
    segments: list[Segment] = []
    buf = packer.buffer()
    fill = 0
    whole: list[tuple[str, int, int]] = []  # files wholly inside the current buffer
    stream_pos = 0
    for name, path, _ in node.files:
        key = f"{node.rel}/{name}" if node.rel else name
        start = stream_pos
        file_start = fill
        md5 = None
        try:
            f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed below
        except OSError as e:
            raise UsageError(f"cannot read {path}: {e.strerror}") from None
        with f:
            while True:
                if fill == len(buf):
                    md5 = md5 or hashlib.md5()
                    md5.update(memoryview(buf)[file_start:fill])
                    blocks.append(packer.submit(buf, fill, whole))
                    buf, fill, file_start, whole = packer.buffer(), 0, 0, []
                n = f.readinto(memoryview(buf)[fill:])
                if not n:
                    break
                fill += n
                stream_pos += n
                if progress is not None:
                    progress(n)
        if md5 is None:
            whole.append((key, file_start, fill))
        else:
            md5.update(memoryview(buf)[file_start:fill])
            packer.digests[key] = md5.hexdigest()
        segments.append(Segment(start, stream_pos - start, name))
    if fill or whole:
        blocks.append(packer.submit(buf, fill, whole))
    else:
        packer.free.put(buf)
    return blocks, segments, stream_pos


def write_tree(
    store: BlockStore,
    paths: Sequence[Path] | DirNode,
    *,
    workers: int | None = None,
    progress: Progress | None = None,
    block_size: int = MAX_BLOCK_SIZE,
) -> WriteResult:
    """Store the files under ``paths`` and return the normalized manifest."""
    root = paths if isinstance(paths, DirNode) else scan_paths(paths)
    packer = _Packer(store, workers or default_workers(), block_size)
    planned: list[tuple[str, list[Future[StoredBlock]], list[Segment]]] = []
    total = 0
    try:
        for node in root.walk():
            name = f"./{node.rel}" if node.rel else "."
            if node.files:
                blocks, segments, size = _pack_dir(node, packer, progress)
                planned.append((name, blocks, segments))
                total += size
            elif node.is_empty and node.rel:
                planned.append((name, [], [Segment(0, 0, ".")]))
        stored = [[f.result() for f in blocks] for _, blocks, _ in planned]
    finally:
        packer.close()
    store.flush()
    if packer.error is not None:
        raise packer.error
    streams = [
        Stream(name, tuple(b.locator for b in sb) or (EMPTY_LOCATOR,), tuple(segments))
        for (name, _, segments), sb in zip(planned, stored, strict=True)
    ]
    manifest = Manifest(tuple(streams)).normalized()
    return WriteResult(
        manifest=manifest,
        blocks=tuple(b for sb in stored for b in sb if not b.locator.is_empty),
        file_count=root.file_count,
        file_md5s=packer.digests,
        bytes_read=total,
    )
