"""Read files out of a collection, verifying every block.

Blocks are fetched ahead of the reader on a thread pool (``readahead``
blocks in flight), so verification of the next block overlaps the use of
the current one. A block that fails its check raises ``CorruptDataError``
naming the block and the files that hold data in it.

A reader made from a stored manifest's normalized text parses it whole only
when asked for the whole table (``manifest``, ``files``); ``iter_streams``
and ``iter_chunks`` go stream by stream, so a pass over a million files
holds a few streams at a time; a stream of a million files (one long line)
is gone through in parts (``iter_raw_parts``).
"""

from __future__ import annotations

import functools
import io
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cached_property
from typing import Any

from warehouse.blocks import Locator
from warehouse.blocks.store import MAPPED_MIN, BatchReads, BlockStore
from warehouse.collection.listings import Digests, OrderedListing
from warehouse.collection.storedtext import StoredText, stored_text_damage
from warehouse.errors import CorruptDataError, NotFoundError, UsageError
from warehouse.manifest import FileEntry, FilePiece, Manifest, Segment, Stream
from warehouse.manifest.layout import file_entries, marked_directories
from warehouse.manifest.parse import iter_raw_parts

__all__ = ["CollectionReader", "file_bytes_read", "stored_text_damage"]

DEFAULT_READAHEAD = 3
# File pieces a reader reads ahead of the one it gives, at most, to find the
# blocks it fetches ahead (``iter_chunks``).
_AHEAD_PIECES = 1 << 14
# Big blocks a one-pass read of a local store checks in one call at most
# (as many as the SIMD lanes, up to this): a get of a 2 GB file took 1.0 s
# of user time, against 2.7 s one by one. Up to eleven such blocks (700 MiB
# of 64 MiB blocks) are then read ahead of the one used; sixteen at a time
# would hash faster still, but read twice as far ahead.
_TOGETHER = 8


# File bytes every reader of this process has given out: a step reports
# them as the bytes of warehouse files it read (docs/usage.md). One list
# cell, not a lock: readers give out data on the thread that reads it.
_GIVEN = [0]


def file_bytes_read() -> int:
    """File bytes the readers of this process have given out so far."""
    return _GIVEN[0]


class _Ahead:
    """Block ``index`` of a batch checked together (``get_ahead``): ``take``
    gives the call that maps it, and lets the batch forget it."""

    __slots__ = ("checked", "index")

    def __init__(self, checked: Future[list[Callable[[], bytes | memoryview]]], index: int) -> None:
        self.checked = checked
        self.index = index

    def take(self) -> Callable[[], bytes | memoryview]:
        calls = self.checked.result()
        call, calls[self.index] = calls[self.index], _taken
        return call

    def cancel(self) -> None:
        self.checked.cancel()


def _taken() -> bytes:
    raise AssertionError("a block checked ahead is used once")


class CollectionReader:
    def __init__(
        self,
        store: BlockStore,
        manifest: Manifest | None,
        *,
        readahead: int = DEFAULT_READAHEAD,
        file_md5s: Digests | None = None,
        one_pass: bool = False,
        normal_text: bytes | StoredText | None = None,
        pdh: str | None = None,
    ) -> None:
        """``normal_text``: the manifest's stored text (normalized; checked
        against its PDH where it was read from the catalog, taken as the
        controller sends it on a remote get, whose blocks are checked as
        read all the same), read stream by stream instead of ``manifest``;
        a scratch copy of it is the reader's, closed by ``close``;
        ``pdh``: the collection's, named in errors without parsing that text."""
        if manifest is None and normal_text is None:
            raise ValueError("a reader needs a manifest or its text")
        self.store = store
        if manifest is not None:
            self.__dict__["manifest"] = manifest
        self.normal_text = None if manifest is not None else normal_text
        self.readahead = max(1, readahead)
        # One pass over the collection (a get) reuses no block: the RAM
        # cache would only hold memory and push out what others reuse.
        self.one_pass = one_pass
        # Every file's MD5 as recorded when it was stored, or None if unknown.
        self.file_md5s = file_md5s
        self._pdh = pdh

    @property
    def pdh(self) -> str:
        return self._pdh if self._pdh is not None else self.manifest.pdh

    def close(self) -> None:
        """Let go of the scratch copies of the text and listing, if any."""
        if isinstance(self.normal_text, StoredText):
            self.normal_text.close()
        if isinstance(self.file_md5s, OrderedListing):
            self.file_md5s.close()

    def __enter__(self) -> CollectionReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @cached_property
    def manifest(self) -> Manifest:
        assert self.normal_text is not None
        return Manifest.parse(self.normal_text)

    @property
    def files(self) -> Mapping[str, FileEntry]:
        return self.manifest.files_view()

    def iter_streams(
        self, keep: Callable[[str], bool] | None = None
    ) -> Iterator[tuple[list[FileEntry], list[str]]]:
        """The files of each stream and the empty directories it marks, in
        manifest order; one group of them all when the manifest is parsed.

        ``keep``: read from the text, only the streams of the directories
        (paths, ``""`` for the root) it keeps; the others are not made into
        entries. Ignored for a parsed manifest.
        """
        if self.normal_text is None or "manifest" in self.__dict__:
            yield list(self.files.values()), self.manifest.empty_directories()
            return
        # Normalized text: each file lies in one stream (in one part of a
        # long one), each empty directory is a stream of its own marker.
        for name, locators, raw in iter_raw_parts(self.normal_text):
            if keep is not None and not keep("" if name == "." else name[2:]):
                continue
            stream = Stream(name, locators, tuple(itertools.starmap(Segment, raw)))
            yield list(file_entries((stream,)).values()), marked_directories((stream,))

    def entry(self, path: str) -> FileEntry:
        entry = self.files.get(path.strip("/"))
        if entry is None:
            raise NotFoundError(f"no file {path!r} in collection {self.pdh}")
        return entry

    def files_using(self, locator: Locator) -> list[str]:
        key = locator.key
        return [
            e.path
            for entries, _ in self.iter_streams()
            for e in entries
            if any(p.locator.key == key for p in e.pieces)
        ]

    def get_block(self, locator: Locator) -> bytes | memoryview:
        """One verified block; errors name the files it belongs to."""
        return self._named(
            locator, functools.partial(self.store.get, locator, cache=not self.one_pass)
        )

    def _named(
        self, locator: Locator, read: Callable[[], bytes | memoryview]
    ) -> bytes | memoryview:
        """``read()``: its errors name the files ``locator`` belongs to."""
        try:
            return read()
        except (CorruptDataError, NotFoundError) as e:
            files = self.files_using(locator)
            shown = ", ".join(files[:10]) + (
                f" and {len(files) - 10} more" if len(files) > 10 else ""
            )
            raise CorruptDataError(f"{e}; it holds data of: {shown or '(no file)'}") from e

    def iter_chunks(self, entries: Iterable[FileEntry]) -> Iterator[tuple[FileEntry, memoryview]]:
        """Every file's data as (entry, chunk) pairs, in order; an empty file yields nothing.

        ``entries`` is consumed as the blocks are fetched, ``readahead``
        blocks ahead of the one being read, but never more than
        ``_AHEAD_PIECES`` pieces ahead: a block of a million tiny files
        would otherwise hold the entries of all of them, and of the blocks
        after it, while it is read. A one-pass read of a store that checks
        big blocks together (``get_ahead``) sends them in batches (the first
        block alone, then ``_TOGETHER`` at a time) and has at most one and a
        half batches in flight: the next batch is checked while the second
        half of the last one is used.
        """
        source = ((e, p) for e in entries for p in e.pieces)
        queued: deque[tuple[FileEntry, FilePiece]] = deque()  # read, not yet yielded
        # Fetches in order of need: a block, or (``_Ahead``) one of a batch of
        # big blocks checked together and mapped when used.
        window: deque[Future[bytes | memoryview] | _Ahead] = deque()
        batch: list[Locator] = []  # big blocks waiting to be checked together
        last: str | None = None  # block of the last piece queued
        more = True
        ahead = self.store if isinstance(self.store, BatchReads) else None
        together = self._checks_together(ahead)
        limit = together + together // 2 if together else self.readahead

        checked = [0]  # batches sent to be checked

        def check_batch() -> None:
            assert ahead is not None  # a batch is made only where it checks ahead
            fetch = pool.submit(ahead.get_ahead, list(batch))
            window.extend(_Ahead(fetch, i) for i in range(len(batch)))
            batch.clear()
            checked[0] += 1

        with ThreadPoolExecutor(self.readahead, thread_name_prefix="wh-read") as pool:
            try:
                current_key: str | None = None
                data = memoryview(b"")
                while True:
                    while more and len(window) + len(batch) < limit and len(queued) < _AHEAD_PIECES:
                        item = next(source, None)
                        if item is None:
                            more = False
                            break
                        queued.append(item)
                        locator = item[1].locator
                        # Consecutive pieces in one block share one fetch.
                        if locator.key == last:
                            continue
                        last = locator.key
                        if together and locator.size >= MAPPED_MIN:
                            batch.append(locator)
                            # The first block alone: what is written starts
                            # as soon as one block is read and checked.
                            if len(batch) == (together if checked[0] else 1):
                                check_batch()
                            continue
                        if batch:
                            check_batch()
                        window.append(pool.submit(self.get_block, locator))
                    if batch and (not more or not window):
                        check_batch()
                    if not queued:
                        return
                    entry, piece = queued.popleft()
                    if piece.locator.key != current_key:
                        fetch = window.popleft()
                        if isinstance(fetch, _Ahead):
                            data = memoryview(self._named(piece.locator, fetch.take()))
                        else:
                            data = memoryview(fetch.result())
                        current_key = piece.locator.key
                    _GIVEN[0] += piece.length
                    yield entry, data[piece.offset : piece.offset + piece.length]
            finally:
                for f in window:
                    f.cancel()

    def _checks_together(self, ahead: BatchReads | None) -> int:
        """How many big blocks a one-pass read checks at once (0: one by
        one): a native call hashes that many side by side, one per SIMD lane."""
        if not self.one_pass or ahead is None or not ahead.checks_ahead():
            return 0
        from warehouse.native.md5 import lanes

        return min(lanes(), _TOGETHER)

    def iter_file(self, path: str) -> Iterator[memoryview]:
        for _, chunk in self.iter_chunks([self.entry(path)]):
            yield chunk

    def read_file(self, path: str) -> bytes:
        return b"".join(self.iter_file(path))

    def open(self, path: str) -> io.BufferedReader:
        """A read-only, seekable binary file object for one file (blocks read as needed,
        each verified): ``with reader.open("a.txt") as f: f.readline()``."""
        return io.BufferedReader(_CollectionFile(self, path), buffer_size=1 << 20)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """``length`` bytes of a file from ``offset`` (fewer at the end of the file)."""
        entry = self.entry(path)
        if offset < 0 or length < 0:
            raise UsageError("offset and length must not be negative")
        out = bytearray()
        pos = 0  # file offset where the current piece starts
        for piece in entry.pieces:
            end = pos + piece.length
            if end > offset and pos < offset + length:
                lo = max(offset, pos) - pos
                hi = min(offset + length, end) - pos
                block = self.get_block(piece.locator)
                out += block[piece.offset + lo : piece.offset + hi]
            pos = end
            if pos >= offset + length:
                break
        _GIVEN[0] += len(out)
        return bytes(out)


class _CollectionFile(io.RawIOBase):
    """One file of a collection, read by ranges (``CollectionReader.open``)."""

    def __init__(self, reader: CollectionReader, path: str) -> None:
        self._reader = reader
        self._path = path
        self._size = reader.entry(path).size  # NotFoundError now, not at the first read
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._reader.read_range(self._path, self._pos, len(view))
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)
