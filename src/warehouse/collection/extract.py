"""Write a collection (or part of it) into a directory, safely.

Every target path is checked before anything is written: no component may be
empty, ``.`` or ``..``; no directory on the way may be a symbolic link (which
could lead out of the destination); an existing file is only replaced with
``force``; every name and path must fit the file system. Each file is written
to a temporary name and renamed into place once all its blocks verified, so
a failed get never leaves a partial file; the writes never follow a symbolic
link (``destination.py``).

Blocks are read and verified in manifest order by one thread; small files,
whole and verified, go in batches to a few writer threads (creating many
small files is mostly waiting on system calls), bigger ones are written by
the reading thread. The listing keeps manifest order. A collection read
from its stored text (the whole of it, or a directory: only its streams are
made into entries; or one file: its directory's stream) is gone through
stream by stream, twice (to check, then to write), and its recorded digests
are read in step with it, so no table of every file is built.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import os
import stat
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from warehouse.collection.destination import Destination, Parts
from warehouse.collection.listings import Digests
from warehouse.collection.reader import CollectionReader
from warehouse.errors import ForbiddenError, NotFoundError, UsageError, WarehouseError, os_error
from warehouse.manifest import FileEntry
from warehouse.manifest.normal import iter_normal_dirs, iter_normal_files
from warehouse.manifest.parse import Text

__all__ = ["ExtractedFile", "extract", "path_kind", "select", "selected_size"]

Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class ExtractedFile:
    path: str  # relative to the destination (or to the selected sub-path)
    md5: str
    size: int


def select(reader: CollectionReader, subpath: str) -> tuple[list[tuple[str, FileEntry]], list[str]]:
    """The files (with their output paths) and empty directories under ``subpath``."""
    sub = subpath.strip("/")
    files = reader.files
    if not sub:
        return list(files.items()), reader.manifest.empty_directories()
    if sub in files:
        return [(sub.rsplit("/", 1)[-1], files[sub])], []
    prefix = sub + "/"
    chosen = [(p[len(prefix) :], e) for p, e in files.items() if p.startswith(prefix)]
    dirs = [d[len(prefix) :] for d in reader.manifest.empty_directories() if d.startswith(prefix)]
    if not chosen and not dirs and sub not in reader.manifest.empty_directories():
        raise NotFoundError(f"no file or directory {sub!r} in collection {reader.pdh}")
    return chosen, dirs


def selected_size(reader: CollectionReader, subpath: str) -> int:
    """The bytes of the files under ``subpath`` (all of them for ``""``)."""
    if reader.normal_text is not None:
        sub = subpath.strip("/")
        under = sub + "/" if sub else ""
        return sum(
            size or 0
            for path, size in iter_normal_files(reader.normal_text)
            if path.startswith(under) or path == sub
        )
    return sum(entry.size for _, entry in select(reader, subpath)[0])


def path_kind(text: Text, sub: str) -> bool | None:
    """Whether ``sub`` is a file (True) or a directory (False) of normalized
    manifest ``text``; None if it is neither. Stops at the first sign."""
    under = sub + "/"
    parent, _, name = sub.rpartition("/")
    parent_prefix = parent + "/" if parent else ""
    for prefix, names, _ in iter_normal_dirs(text):
        if prefix.startswith(under):
            return False
        if prefix == parent_prefix and names is not None and name in names:
            return True
    return None


def _one_file(reader: CollectionReader, sub: str) -> FileEntry:
    """File ``sub`` of a reader of stored text, from its directory's stream only."""
    parent = sub.rpartition("/")[0]
    for entries, _ in reader.iter_streams(lambda d: d == parent):
        for entry in entries:
            if entry.path == sub:
                return entry
    raise NotFoundError(f"no file {sub!r} in collection {reader.pdh}")


def _check_rel(rel: str) -> None:
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in rel:
        raise UsageError(f"refusing unsafe path {rel!r}: it could escape the destination")


def _streamed_paths(text: Text, dirs: list[str], under: str = "") -> Iterator[str]:
    """The path below ``under`` (``""`` or a directory and a '/') of every file
    under it in normalized manifest ``text``, checked to be safe; the empty
    directories below it are added to ``dirs`` as they come."""
    cut = len(under)
    for prefix, names, _ in iter_normal_dirs(text):
        if not prefix.startswith(under):
            continue
        if names is None:
            _check_rel(prefix[:-1])
            if len(prefix) > cut:  # not ``under`` itself
                dirs.append(prefix[cut:-1])
            continue
        for name in names:
            _check_rel(prefix + name)
            yield prefix[cut:] + name


def _streamed(reader: CollectionReader, under: str = "") -> Iterator[tuple[str, FileEntry]]:
    """Every file of the collection under ``under`` (``""`` or a directory and
    a '/') with its path below it, stream by stream; other streams are skipped."""
    cut = len(under)
    keep = None if not under else lambda d: (d + "/").startswith(under)
    for entries, _ in reader.iter_streams(keep):
        for entry in entries:
            # Checked here too: a reader whose manifest is parsed already
            # gives every stream, whatever ``keep`` says.
            if entry.path.startswith(under):
                yield entry.path[cut:], entry


class _Dirs:
    """Directories below DEST as they are now, each looked at once.

    Only an early, clear report: the writes themselves never follow a link
    (see ``destination.py``), whatever appears after these checks.
    """

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.exists: dict[str, bool] = {"": dest.is_dir()}
        self.names: dict[str, set[str]] = {}

    def check(self, rel: str) -> bool:
        """Whether directory DEST/rel exists; raise if it, or a directory on
        the way to it, is a symbolic link or not a directory."""
        known = self.exists.get(rel)
        if known is not None:
            return known
        missing: list[str] = []
        up = rel
        while (known := self.exists.get(up)) is None:
            missing.append(up)
            up = up.rpartition("/")[0]
        for path in reversed(missing):
            # Below a directory that does not exist nothing exists either.
            known = known and self._lstat(path)
            self.exists[path] = known
        return known

    def _lstat(self, rel: str) -> bool:
        cur = self.dest / rel
        try:
            mode = os.lstat(cur).st_mode
        except FileNotFoundError:
            return False
        except OSError as e:
            raise os_error(e, f"cannot look at {cur}") from None
        if stat.S_ISLNK(mode):
            raise UsageError(f"refusing to write through symbolic link {cur}")
        if not stat.S_ISDIR(mode):
            raise WarehouseError(f"{cur} exists and is not a directory")
        return True

    def holds(self, parent: str, name: str) -> bool:
        """Whether anything is named ``name`` in existing directory DEST/parent."""
        names = self.names.get(parent)
        if names is None:
            cur = self.dest / parent if parent else self.dest
            try:
                names = self.names[parent] = set(os.listdir(cur))
            except OSError as e:
                raise os_error(e, f"cannot list {cur}") from None
        return name in names


def _existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.absolute().parents):
        if os.path.lexists(candidate):
            return candidate
    return Path("/")


def _limit(path: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(path, name)
    except (OSError, ValueError):
        return default


class _Room:
    """What this file system cannot hold or we may not write, refused before writing."""

    def __init__(self, dest: Path) -> None:
        base = self.base = _existing_ancestor(dest)
        if not base.is_dir():
            if base.is_symlink():
                raise UsageError(f"refusing to write through symbolic link {base}")
            raise WarehouseError(f"{base} exists and is not a directory")
        if not os.access(base, os.W_OK | os.X_OK):
            raise ForbiddenError(f"cannot write into {base}: permission denied")
        self.name_max = _limit(base, "PC_NAME_MAX", 255)
        self.path_max = _limit(base, "PC_PATH_MAX", 4096)

    def check(self, rel: str) -> None:
        data = rel.encode("utf-8", "surrogateescape")
        # The listing names each file relative to DEST, for `md5sum -c` run there.
        if len(data) >= self.path_max:
            raise WarehouseError(
                f"cannot write {rel[:60]!r}…: its path of {len(data)} bytes is longer "
                f"than the system allows ({self.path_max - 1})"
            )
        if len(data) <= self.name_max:
            return  # no part can be longer than the whole
        for part in data.split(b"/"):
            if len(part) > self.name_max:
                shown = part.decode("utf-8", "replace")
                raise WarehouseError(
                    f"cannot write {shown[:60]!r}…: a name of {len(part)} bytes is longer "
                    f"than the file system of {self.base} allows ({self.name_max})"
                )


def _plan(dest: Path, chosen: list[tuple[str, FileEntry]], dirs: list[str], force: bool) -> None:
    """Check every path of a chosen list of files before anything is written."""
    files = {rel for rel, _ in chosen}
    # Each directory once, not once a file: 100,000 files share a few hundred.
    parents = dict.fromkeys(rel.rpartition("/")[0] for rel, _ in chosen)
    for parent in parents:
        up = parent
        while up:
            if up in files:
                raise UsageError(f"the collection holds a file and a directory named {up!r}")
            up = up.rpartition("/")[0]
    for rel, _ in chosen:
        _check_rel(rel)
    for rel in dirs:
        _check_rel(rel)
        if rel in files:
            raise UsageError(f"the collection holds a file and a directory named {rel!r}")
    del files, parents
    _check_dest(dest, (rel for rel, _ in chosen), dirs, force)


def _check_dest(dest: Path, rels: Iterable[str], dirs: list[str], force: bool) -> None:
    """Every file and directory fits DEST's file system, and none goes through a
    symbolic link or replaces a directory; a file there already only with ``force``.

    ``rels`` is gone through once; ``dirs`` after it (it may be filled meanwhile).
    """
    room = _Room(dest)
    found = _Dirs(dest)
    existing = 0
    shown: list[str] = []
    for rel in rels:
        room.check(rel)
        parent, _, name = rel.rpartition("/")
        if not found.check(parent) or not found.holds(parent, name):
            continue
        target = dest / rel
        if target.is_dir() and not target.is_symlink():
            raise WarehouseError(f"{target} exists and is a directory")
        existing += 1
        if len(shown) <= 5:
            shown.append(rel)
    for rel in dirs:
        room.check(rel)
        found.check(rel)
    if existing and not force:
        listed = ", ".join(shown[:5]) + (" …" if existing > 5 else "")
        raise WarehouseError(
            f"{existing} file(s) already exist in {dest} ({listed}); use --force to overwrite them"
        )


def _split(rel: str) -> tuple[Parts, str]:
    *parents, name = rel.split("/")
    return tuple(parents), name


def extract(
    reader: CollectionReader,
    dest: Path | None,
    *,
    subpath: str = "",
    force: bool = False,
    rehash: bool = False,
    progress: Progress | None = None,
    on_file: Callable[[ExtractedFile], None] | None = None,
    writers: int | None = None,
    into: bool = False,
) -> list[ExtractedFile]:
    """Write (or, with ``dest=None``, only read and verify) files; return their digests.

    ``into``: ``dest`` is a directory even if it does not exist yet (it was
    given with a trailing ``/``): a single file goes inside it, not as it.

    ``on_file``: called with each file's digest as soon as it is written,
    instead of returning them all (a million files' digests are not held).
    Files and their digests come in manifest order.
    ``writers``: threads writing small files at once (default ``WRITERS``).

    Every block is verified whatever happens. The listed MD5 of a file is the
    one recorded when it was stored, if the warehouse has it (the verified
    blocks hold exactly those bytes), else, or with ``rehash``, computed from
    the bytes read. Nothing is written before every path is checked; after a
    failure no partial file and no directory made empty here is left.
    """
    known = None if rehash else reader.file_md5s
    target: Destination | None = None
    sub = subpath.strip("/")
    dirs: list[str] = []
    chosen: Callable[[], Iterator[tuple[str, FileEntry]]]
    text = reader.normal_text
    kind = None if text is None or not sub else path_kind(text, sub)
    if text is not None and sub and kind is None:
        raise NotFoundError(f"no file or directory {sub!r} in collection {reader.pdh}")
    if text is not None and kind is not True:
        # The whole collection, or a directory of it, from its text: once to
        # check, once to write, a stream at a time; no table of every file.
        under = sub + "/" if sub else ""
        chosen = functools.partial(_streamed, reader, under)
        if dest is not None:
            _check_dest(dest, _streamed_paths(text, dirs, under), dirs, force)
    else:
        if text is not None:
            listed = [(sub.rsplit("/", 1)[-1], _one_file(reader, sub))]
        else:
            listed, dirs = select(reader, subpath)
        if dest is not None:
            if sub and (kind or sub in reader.files) and not into and not dest.is_dir():
                # A single file and a destination that is not a directory: the file's new name.
                listed = [(dest.name, listed[0][1])]
                dest = dest.parent if str(dest.parent) else Path(".")
            _plan(dest, listed, dirs, force)
        chosen = functools.partial(iter, listed)

    if dest is not None:
        target = Destination(dest)
    out: list[ExtractedFile] = []
    done = out.append if on_file is None else on_file
    pool = _Pool(target, force, WRITERS if writers is None else writers, done)
    sink: _Sink | None = None
    gathered: list[memoryview] = []
    small: tuple[str, FileEntry] | None = None  # the small file being gathered
    # Two walks over the same files: the blocks are fetched (and the file
    # entries parsed) a little ahead of the files being written.
    pending, ahead = itertools.tee(chosen())
    hasher = ThreadPoolExecutor(1, thread_name_prefix="wh-md5")
    failed = True

    def finish() -> None:
        nonlocal sink, small
        if small is not None:
            rel, entry = small
            data = bytes(gathered[0]) if len(gathered) == 1 else b"".join(gathered)
            gathered.clear()
            small = None
            pool.add(rel, data, None if known is None else known.get(entry.path))
        elif sink is not None:
            pool.done_here(sink.close())
            sink = None

    def start(rel: str, entry: FileEntry) -> None:
        nonlocal sink, small
        if pool.takes(entry):
            small = (rel, entry)
        else:
            # Written here once the pool's files before it are written, so
            # that a big file filling the disk fails alone, as it would in turn.
            pool.drain()
            sink = _Sink(rel, entry, target, hasher, known, force)

    try:
        if target is not None:
            for rel in dirs:
                target.directory(tuple(rel.split("/")))
        current: FileEntry | None = None
        for entry, chunk in reader.iter_chunks(e for _, e in ahead):
            # Empty files yield no chunk: they are opened and closed on the way.
            while current is not entry:
                if current is not None:
                    finish()
                rel, current = next(pending)
                start(rel, current)
            if sink is not None:
                sink.write(chunk)
            else:
                gathered.append(chunk)
            if progress is not None:
                progress(len(chunk))
        if current is not None:
            finish()
        for rel, entry in pending:
            start(rel, entry)
            finish()
        pool.finish()
        failed = False
    except BaseException:
        if sink is not None:
            sink.abort()
        pool.abort()
        raise
    finally:
        hasher.shutdown(wait=True)
        if target is not None:
            target.close(failed=failed)
    return out


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


class _Pool:
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


class _Sink:
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
