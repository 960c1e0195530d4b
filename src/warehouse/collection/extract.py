"""Write a collection (or part of it) into a directory, safely.

Every target path is checked before anything is written: no component may be
empty, ``.`` or ``..``; no directory on the way may be a symbolic link (which
could lead out of the destination); an existing file is only replaced with
``force``; every name and path must fit the file system (``destcheck.py``).
Each file is written to a temporary name and renamed into place once all its
blocks verified, so a failed get never leaves a partial file; the writes
never follow a symbolic link (``destination.py``).

Blocks are read and verified in manifest order by one thread; small files,
whole and verified, go in batches to a few writer threads (creating many
small files is mostly waiting on system calls), bigger ones are written by
the reading thread (``filewriters.py``). The listing keeps manifest order. A collection read
from its stored text (the whole of it, or a directory: only its streams are
made into entries; or one file: its directory's stream) is gone through
stream by stream, twice (to check, then to write), and its recorded digests
are read in step with it, so no table of every file is built.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from warehouse.collection.destcheck import check_dest, check_plan, check_rel
from warehouse.collection.destination import Destination
from warehouse.collection.filewriters import WRITERS, ExtractedFile, FileSink, WriterPool
from warehouse.collection.reader import CollectionReader
from warehouse.errors import NotFoundError
from warehouse.manifest import FileEntry
from warehouse.manifest.normal import iter_normal_dirs, iter_normal_files
from warehouse.manifest.parse import Text

# ExtractedFile: what extract returns, so its callers find it here.
__all__ = ["ExtractedFile", "extract", "path_kind", "select", "selected_size"]

Progress = Callable[[int], None]


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


def _streamed_paths(text: Text, dirs: list[str], under: str = "") -> Iterator[str]:
    """The path below ``under`` (``""`` or a directory and a '/') of every file
    under it in normalized manifest ``text``, checked to be safe; the empty
    directories below it are added to ``dirs`` as they come."""
    cut = len(under)
    for prefix, names, _ in iter_normal_dirs(text):
        if not prefix.startswith(under):
            continue
        if names is None:
            check_rel(prefix[:-1])
            if len(prefix) > cut:  # not ``under`` itself
                dirs.append(prefix[cut:-1])
            continue
        for name in names:
            check_rel(prefix + name)
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
            check_dest(dest, _streamed_paths(text, dirs, under), dirs, force)
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
            check_plan(dest, listed, dirs, force)
        chosen = functools.partial(iter, listed)

    if dest is not None:
        target = Destination(dest)
    out: list[ExtractedFile] = []
    done = out.append if on_file is None else on_file
    pool = WriterPool(target, force, WRITERS if writers is None else writers, done)
    sink: FileSink | None = None
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
            sink = FileSink(rel, entry, target, hasher, known, force)

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
