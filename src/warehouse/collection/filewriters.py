"""How a get writes files: small ones, whole and verified, in batches by a
few writer threads (``WriterPool``); bigger ones chunk by chunk by the
reading thread (``FileSink``), hashed on a helper thread meanwhile. Each
file goes to a temporary name and is renamed into place once written.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

from warehouse.collection.destination import Destination, Parts
from warehouse.collection.listings import Digests
from warehouse.errors import WarehouseError, os_error
from warehouse.manifest import FileEntry

__all__ = ["WRITERS", "ExtractedFile", "FileSink", "WriterPool"]


@dataclass(frozen=True, slots=True)
class ExtractedFile:
    path: str  # relative to the destination (or to the selected sub-path)
    md5: str
    size: int


def _split(rel: str) -> tuple[Parts, str]:
    *parents, name = rel.split("/")
    return tuple(parents), name


# Threads that write small files at once. Creating a file, writing it and
# renaming it are system calls that release the GIL, so a writer beside the
# reading thread overlaps them with reading and verifying. Each create and
# rename locks its directory, and consecutive files share one: writers
# beyond the cores mostly spin on that lock (on 2 cores, 4 writers spent
# more system time than 2 for the same files, and were no faster).
WRITERS = max(2, min(4, os.cpu_count() or 1))
# A small file is written by the pool, whole, in a batch of files written in
# order by one thread; a larger one by the reading thread, chunk by chunk.
_SMALL_FILE = 1 << 20
_BATCH_BYTES = 1 << 20
_BATCH_FILES = 256
# Batches handed out and not yet listed, per writer: bounds the memory held.
_AHEAD = 2


@dataclass(slots=True)
class _Written:
    """A batch's outcome: the files written, in order, and the error that stopped it."""

    files: list[ExtractedFile]
    error: Exception | None = None


class WriterPool:
    """Small files written by several threads, listed in the order given.

    Each batch (consecutive files) is written in order by one thread; the
    digests come back through ``done`` in the order the files were given,
    whichever thread wrote them. Without a destination, or with no writers,
    nothing goes to another thread.
    """

    def __init__(
        self,
        target: Destination | None,
        force: bool,
        writers: int,
        done: Callable[[ExtractedFile], None],
    ) -> None:
        self.target = target
        self.force = force
        self.done = done
        self.threads = writers if target is not None else 0
        self.executor: ThreadPoolExecutor | None = None
        self.batch: list[tuple[str, bytes, str | None]] = []
        self.batch_bytes = 0
        self.window: deque[Future[_Written] | _Written] = deque()

    def takes(self, entry: FileEntry) -> bool:
        return self.threads > 0 and entry.size <= _SMALL_FILE

    def add(self, rel: str, data: bytes, md5: str | None) -> None:
        self.batch.append((rel, data, md5))
        self.batch_bytes += len(data)
        if self.batch_bytes >= _BATCH_BYTES or len(self.batch) >= _BATCH_FILES:
            self.flush()

    def flush(self) -> None:
        """Hand the gathered files to a writer."""
        if not self.batch:
            return
        if self.executor is None:
            self.executor = ThreadPoolExecutor(self.threads, thread_name_prefix="wh-write")
        batch, self.batch, self.batch_bytes = self.batch, [], 0
        assert self.target is not None
        self.window.append(self.executor.submit(_write_batch, self.target, batch, self.force))
        self._list(self.threads * _AHEAD)

    def done_here(self, file: ExtractedFile) -> None:
        """A file written by the caller, after the ones handed out before it."""
        if not self.window:
            self.done(file)
            return
        self.window.append(_Written([file]))
        self._list(self.threads * _AHEAD)

    def _list(self, keep: int) -> None:
        """List the files of finished batches, in order, waiting while more
        than ``keep`` batches are out; raise the first error met."""
        window = self.window
        while window:
            head = window[0]
            if isinstance(head, Future):
                if len(window) <= keep and not head.done():
                    return
                written = head.result()
            else:
                written = head
            window.popleft()
            for file in written.files:
                self.done(file)
            if written.error is not None:
                raise written.error

    def drain(self) -> None:
        """Hand out the gathered files and wait until all handed out are written."""
        self.flush()
        self._list(0)

    def finish(self) -> None:
        try:
            self.drain()
        finally:
            if self.executor is not None:
                self.executor.shutdown(wait=True)

    def abort(self) -> None:
        """Stop after a failure: the batches handed out (all before the point
        of failure) are still written, as a single writer would have, and
        their files listed; a later error of theirs is not the one reported."""
        if self.executor is not None:
            self.executor.shutdown(wait=True)
        window, self.window = self.window, deque()
        for head in window:
            if isinstance(head, Future):
                if head.exception() is not None:
                    continue
                head = head.result()
            for file in head.files:
                self.done(file)


def _write_batch(
    target: Destination, batch: list[tuple[str, bytes, str | None]], force: bool
) -> _Written:
    written: list[ExtractedFile] = []
    start = 0
    while start < len(batch):
        # The files of one directory go to the native library in one call;
        # the first it could not write (and those after it in the directory)
        # are written here, which says why one fails.
        parts, _ = _split(batch[start][0])
        run: list[tuple[str, bytes]] = []
        for rel, data, _ in itertools.islice(batch, start, None):
            here, name = _split(rel)
            if here != parts:
                break
            run.append((name, data))
        try:
            native = target.put_files(parts, run, replace=force)
        except Exception as e:  # its directory could not be opened
            return _Written(written, e)
        for i, (rel, data, md5) in enumerate(itertools.islice(batch, start, start + len(run))):
            if i >= native:
                try:
                    _write_small(target, rel, data, force)
                except Exception as e:  # reported once the files before it are listed
                    return _Written(written, e)
            written.append(ExtractedFile(rel, md5 or hashlib.md5(data).hexdigest(), len(data)))
        start += len(run)
    return _Written(written)


def _write_small(target: Destination, rel: str, data: bytes, force: bool) -> None:
    """One whole file under a temporary name, then renamed to its own."""
    parts, name = _split(rel)
    fd, tmp = target.create(parts)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    except OSError as e:
        target.discard(parts, tmp)
        raise os_error(e, f"cannot write {target.root / rel}") from None
    except BaseException:
        target.discard(parts, tmp)
        raise
    try:
        target.commit(parts, tmp, name, replace=force)
    except BaseException:
        target.discard(parts, tmp)
        raise


# Chunks at least this large are hashed on a helper thread while the main
# thread writes them (both release the GIL); smaller ones are not worth a hop.
_OVERLAP_BYTES = 1 << 20


class FileSink:
    """One file being written to a temporary name and hashed."""

    def __init__(
        self,
        rel: str,
        entry: FileEntry,
        target: Destination | None,
        hasher: ThreadPoolExecutor,
        known: Digests | None,
        force: bool = False,
    ) -> None:
        self.hasher = hasher
        self.known = None if known is None else known.get(entry.path)
        self.pending: Future[None] | None = None
        self.rel = rel
        self.entry = entry
        self.md5 = hashlib.md5()
        self.size = 0
        self.target = target
        self.force = force
        self.parts, self.name = _split(rel)
        self.file: BinaryIO | None = None
        self.tmp = ""
        if target is not None:
            fd, self.tmp = target.create(self.parts)
            self.file = open(fd, "wb")  # noqa: SIM115 - closed in close()/abort()

    def _failed(self, e: OSError) -> WarehouseError:
        assert self.target is not None
        return os_error(e, f"cannot write {self.target.root / self.rel}")

    def write(self, chunk: memoryview) -> None:
        try:
            self._write(chunk)
        except OSError as e:
            raise self._failed(e) from None

    def _write(self, chunk: memoryview) -> None:
        self.size += len(chunk)
        if self.known is not None:
            if self.file is not None:
                self.file.write(chunk)
            return
        if self.file is None or len(chunk) < _OVERLAP_BYTES:
            self._wait()
            self.md5.update(chunk)
            if self.file is not None:
                self.file.write(chunk)
            return
        # At most one chunk waits to be hashed, so memory stays bounded.
        self._wait()
        self.pending = self.hasher.submit(self.md5.update, chunk)
        self.file.write(chunk)

    def _wait(self) -> None:
        if self.pending is not None:
            self.pending.result()
            self.pending = None

    def close(self) -> ExtractedFile:
        self._wait()
        if self.file is not None:
            assert self.target is not None
            file, self.file = self.file, None
            try:
                file.close()
            except OSError as e:
                self.target.discard(self.parts, self.tmp)
                raise self._failed(e) from None
            try:
                self.target.commit(self.parts, self.tmp, self.name, replace=self.force)
            except BaseException:
                self.target.discard(self.parts, self.tmp)
                raise
        return ExtractedFile(self.rel, self.known or self.md5.hexdigest(), self.size)

    def abort(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
        if self.file is not None:
            assert self.target is not None
            with contextlib.suppress(OSError):
                self.file.close()
            self.file = None
            self.target.discard(self.parts, self.tmp)
