"""An open file of the mount: its reads, served from its blocks, and the
blocks fetched ahead of them (docs/mount.md, "Reading").

A read inside one block (nearly every read of a large file: the kernel asks
128 KiB at a time) is a view of the block, never a copy. A file read from
the start of one block to the next goes on as a one-pass read of the rest
of the file (``CollectionReader.iter_chunks``, as ``wh get`` reads): its big
blocks past the RAM cache and, where the store checks several at once (a
local volume, the node's disk cache), hashed side by side in one native
call and mapped when used. Any other read fetches the blocks it needs and
the next ``READAHEAD``; a seek elsewhere ends the one-pass read.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Generator
from concurrent.futures import Future, ThreadPoolExecutor

from warehouse.blocks import Locator
from warehouse.blocks.store import MAPPED_MIN, BlockStore
from warehouse.collection.reader import CollectionReader
from warehouse.manifest import FileEntry, Manifest

__all__ = ["READAHEAD", "Handle", "NotHeld", "Recent"]

# Blocks fetched ahead of the one a file handle reads, outside a one-pass read.
READAHEAD = 2
# Big blocks read whole still to come from which a sequential read goes one-pass.
_ONE_PASS_BLOCKS = 2

_Item = tuple[FileEntry, memoryview]
_Stream = Generator[_Item, None, None]


def _one_pass(reader: CollectionReader, entry: FileEntry) -> _Stream:
    yield from reader.iter_chunks([entry])  # a generator: closed, it closes the reader's


def _next(stream: _Stream) -> _Item | None:
    return next(stream, None)


class Recent:
    """The blocks read last by any open file (a few): the small files of
    one block, opened one after another, each find it here."""

    def __init__(self, count: int = 2) -> None:
        self.count = count
        self.lock = threading.Lock()
        self.blocks: OrderedDict[str, bytes | memoryview] = OrderedDict()

    def get(self, key: str) -> bytes | memoryview | None:
        with self.lock:
            return self.blocks.get(key)

    def put(self, key: str, data: bytes | memoryview) -> None:
        with self.lock:
            self.blocks[key] = data
            self.blocks.move_to_end(key)
            while len(self.blocks) > self.count:
                self.blocks.popitem(last=False)


class NotHeld(Exception):
    """A read would have to wait for a block (``Handle.read(held_only=True)``)."""


def _whole_big(entry: FileEntry, i: int) -> bool:
    p = entry.pieces[i]
    return p.offset == 0 and p.length == p.locator.size and p.locator.size >= MAPPED_MIN


class Handle:
    """An open file: its pieces by file offset, the piece last used, and
    the blocks fetched ahead on the shared pool (or its one-pass read)."""

    def __init__(
        self, entry: FileEntry, store: BlockStore, pool: ThreadPoolExecutor, recent: Recent
    ) -> None:
        self.entry = entry
        self.store = store
        self.pool = pool
        self.recent = recent
        self.starts: list[int] = []
        self.whole: set[str] = set()  # blocks some piece of this file covers whole
        pos = 0
        for piece in entry.pieces:
            self.starts.append(pos)
            pos += piece.length
            if piece.offset == 0 and piece.length == piece.locator.size:
                self.whole.add(piece.locator.key)
        # Big blocks read whole in the pieces after each one.
        n = len(entry.pieces)
        self.big_after = [0] * n
        for i in range(n - 2, -1, -1):
            self.big_after[i] = self.big_after[i + 1] + _whole_big(entry, i + 1)
        self.lock = threading.Lock()
        self.block: tuple[str, bytes | memoryview] | None = None  # the block last used
        # The last two pieces used, by index: the kernel's reads of one
        # file may come a little out of order at a piece's edge.
        self.pieces: dict[int, memoryview] = {}
        self.last = -1  # the piece used last
        self.ahead: dict[str, Future[bytes | memoryview]] = {}
        # The one-pass read: the generator, the piece it gives next, and
        # that piece asked for on the pool (the generator runs there).
        self.stream: _Stream | None = None
        self.stream_at = 0
        self.pending: Future[tuple[FileEntry, memoryview] | None] | None = None

    def _fetch(self, locator: Locator) -> Future[bytes | memoryview]:
        # A big block this file reads whole is its own, read once: past the
        # RAM cache (which would copy it and push out the blocks small files
        # share), mapped rather than copied from a local volume. Verified alike.
        whole = locator.size >= MAPPED_MIN and locator.key in self.whole
        return self.pool.submit(self.store.get, locator, cache=not whole)

    def _block(self, index: int, held_only: bool, ahead: bool) -> bytes | memoryview:
        locator = self.entry.pieces[index].locator
        if self.block is not None and self.block[0] == locator.key:
            return self.block[1]
        data = self.recent.get(locator.key)
        if data is None:
            if held_only:
                raise NotHeld
            fut = self.ahead.pop(locator.key, None) or self._fetch(locator)
            data = fut.result()
            self.recent.put(locator.key, data)
        self.block = (locator.key, data)
        if not ahead:  # a one-pass read fetches what lies ahead
            return data
        # Fetch the next blocks of the file; a seek elsewhere drops them.
        wanted: list[Locator] = []
        for piece in self.entry.pieces[index + 1 :]:
            key = piece.locator.key
            if key != locator.key and all(w.key != key for w in wanted):
                wanted.append(piece.locator)
            if len(wanted) == READAHEAD:
                break
        keys = {w.key for w in wanted}
        for key in [k for k in self.ahead if k not in keys]:
            self.ahead.pop(key).cancel()
        for w in wanted:
            if w.key not in self.ahead:
                self.ahead[w.key] = self._fetch(w)
        return data

    def _start_stream(self, start: int) -> None:
        """Read pieces ``start`` on as one pass (its fetches start now)."""
        rest = self.entry.pieces[start:]
        reader = CollectionReader(self.store, Manifest.from_files([self.entry]), one_pass=True)
        rest_entry = FileEntry(self.entry.path, sum(p.length for p in rest), rest)
        self.stream = _one_pass(reader, rest_entry)
        self.stream_at = start
        self.pending = self.pool.submit(_next, self.stream)

    def _end_stream(self) -> None:
        """Drop the one-pass read; closing it waits for its fetches, on the pool."""
        stream, pending = self.stream, self.pending
        self.stream = self.pending = None
        if stream is None:
            return
        if pending is not None:
            pending.cancel()

        def close() -> None:
            if pending is not None and not pending.cancelled():
                pending.exception()  # the generator must not be running when closed
            stream.close()

        self.pool.submit(close)

    def _piece(self, i: int, held_only: bool) -> memoryview:
        """Piece ``i``'s bytes."""
        held = self.pieces.get(i)
        if held is not None:
            return held
        if self.stream is not None:
            if i == self.stream_at and self.pending is not None:
                # An error is raised on a worker, which makes it an errno.
                if held_only and (not self.pending.done() or self.pending.exception()):
                    raise NotHeld
                got = self.pending.result()
                if got is not None:
                    self.stream_at += 1
                    more = self.stream_at < len(self.entry.pieces)
                    self.pending = self.pool.submit(_next, self.stream) if more else None
                    return self._used(i, got[1])
            # The pieces already fetched ahead when it began are read as fetched.
            if not self.last < i < self.stream_at:
                self._end_stream()
        # From one piece to the next with big blocks still to come: the rest
        # of the file is read as one pass, not block by block.
        one_pass = (
            self.stream is None and self.last == i - 1 and self.big_after[i] >= _ONE_PASS_BLOCKS
        )
        block = self._block(i, held_only, ahead=self.stream is None and not one_pass)
        if one_pass:
            # It begins after the blocks fetched ahead already (not fetched twice).
            start = i + 1
            n = len(self.entry.pieces)
            while start < n and self.entry.pieces[start].locator.key in self.ahead:
                start += 1
            if start < n:
                self._start_stream(start)
        piece = self.entry.pieces[i]
        return self._used(i, memoryview(block)[piece.offset : piece.offset + piece.length])

    def _used(self, i: int, view: memoryview) -> memoryview:
        self.pieces = (
            {self.last: self.pieces[self.last], i: view} if self.last in self.pieces else {i: view}
        )
        self.last = i
        return view

    def read(self, offset: int, size: int, held_only: bool = False) -> bytes | memoryview:
        """``size`` bytes from ``offset``; ``held_only``: NotHeld rather
        than wait for a block not at hand. A read inside one piece is a
        view of it, not a copy: pyfuse3 sends any buffer."""
        end = min(offset + size, self.entry.size)
        parts: list[memoryview] = []
        # Never wait for the lock held_only: a worker may hold it while it fetches.
        if not self.lock.acquire(blocking=not held_only):
            raise NotHeld
        try:
            i = bisect.bisect_right(self.starts, offset) - 1
            while offset < end and 0 <= i < len(self.starts):
                lo = offset - self.starts[i]
                hi = min(self.entry.pieces[i].length, end - self.starts[i])
                parts.append(self._piece(i, held_only)[lo:hi])
                offset = self.starts[i] + hi
                i += 1
        finally:
            self.lock.release()
        if len(parts) == 1:
            return parts[0]
        return b"".join(parts)

    def close(self) -> None:
        # The FUSE loop that calls this never waits for the lock: a worker
        # may hold it, waiting for a block; then a worker closes after it.
        if self.lock.acquire(blocking=False):
            try:
                self._drop()
            finally:
                self.lock.release()
        else:
            self.pool.submit(self._drop_locked)

    def _drop_locked(self) -> None:
        with self.lock:
            self._drop()

    def _drop(self) -> None:
        for fut in self.ahead.values():
            fut.cancel()
        self.ahead.clear()
        self._end_stream()
