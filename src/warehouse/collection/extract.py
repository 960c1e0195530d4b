"""Write a collection (or part of it) into a directory, safely.

Every target path is checked before anything is written: no component may be
empty, ``.`` or ``..``; no directory on the way may be a symbolic link (which
could lead out of the destination); an existing file is only replaced with
``force``; every name and path must fit the file system. Each file is written
to a temporary name and renamed into place once all its blocks verified, so
a failed get never leaves a partial file; the writes never follow a symbolic
link (``destination.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from warehouse.collection.destination import Destination, Parts
from warehouse.collection.reader import CollectionReader
from warehouse.errors import ForbiddenError, NotFoundError, UsageError, WarehouseError, os_error
from warehouse.manifest import FileEntry

__all__ = ["ExtractedFile", "extract", "select"]

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
        raise NotFoundError(f"no file or directory {sub!r} in collection {reader.manifest.pdh}")
    return chosen, dirs


def _check_rel(rel: str) -> None:
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in rel:
        raise UsageError(f"refusing unsafe path {rel!r}: it could escape the destination")


def _check_dirs(dest: Path, rel: str) -> None:
    """No directory between ``dest`` and the file may be a symlink or a non-directory.

    Only an early, clear report: the writes themselves never follow a link
    (see ``destination.py``), whatever appears after this check.
    """
    cur = dest
    for part in rel.split("/")[:-1]:
        cur = cur / part
        if cur.is_symlink():
            raise UsageError(f"refusing to write through symbolic link {cur}")
        if cur.exists() and not cur.is_dir():
            raise WarehouseError(f"{cur} exists and is not a directory")


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


def _check_room(dest: Path, rels: list[str]) -> None:
    """Refuse, before writing anything, what this file system cannot hold or we may not write."""
    base = _existing_ancestor(dest)
    if not base.is_dir():
        if base.is_symlink():
            raise UsageError(f"refusing to write through symbolic link {base}")
        raise WarehouseError(f"{base} exists and is not a directory")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ForbiddenError(f"cannot write into {base}: permission denied")
    name_max = _limit(base, "PC_NAME_MAX", 255)
    path_max = _limit(base, "PC_PATH_MAX", 4096)
    for rel in rels:
        data = rel.encode("utf-8", "surrogateescape")
        # The listing names each file relative to DEST, for `md5sum -c` run there.
        if len(data) >= path_max:
            raise WarehouseError(
                f"cannot write {rel[:60]!r}…: its path of {len(data)} bytes is longer "
                f"than the system allows ({path_max - 1})"
            )
        for part in data.split(b"/"):
            if len(part) > name_max:
                shown = part.decode("utf-8", "replace")
                raise WarehouseError(
                    f"cannot write {shown[:60]!r}…: a name of {len(part)} bytes is longer "
                    f"than the file system of {base} allows ({name_max})"
                )


def _plan(dest: Path, chosen: list[tuple[str, FileEntry]], dirs: list[str], force: bool) -> None:
    files = {rel for rel, _ in chosen}
    existing: list[str] = []
    for rel, _ in chosen:
        parents = rel.split("/")[:-1]
        for i in range(1, len(parents) + 1):
            if (clash := "/".join(parents[:i])) in files:
                raise UsageError(f"the collection holds a file and a directory named {clash!r}")
        _check_rel(rel)
    for rel in dirs:
        _check_rel(rel)
        if rel in files:
            raise UsageError(f"the collection holds a file and a directory named {rel!r}")
    _check_room(dest, [rel for rel, _ in chosen] + dirs)
    for rel, _ in chosen:
        _check_dirs(dest, rel)
        target = dest / rel
        if os.path.lexists(target):
            if target.is_dir() and not target.is_symlink():
                raise WarehouseError(f"{target} exists and is a directory")
            existing.append(rel)
    for rel in dirs:
        _check_dirs(dest, rel + "/x")
    if existing and not force:
        shown = ", ".join(existing[:5]) + (" …" if len(existing) > 5 else "")
        raise WarehouseError(
            f"{len(existing)} file(s) already exist in {dest} ({shown}); "
            "use --force to overwrite them"
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
) -> list[ExtractedFile]:
    """Write (or, with ``dest=None``, only read and verify) files; return their digests.

    ``on_file``: called with each file's digest as soon as it is written,
    instead of returning them all (a million files' digests are not held).

    Every block is verified whatever happens. The listed MD5 of a file is the
    one recorded when it was stored, if the warehouse has it (the verified
    blocks hold exactly those bytes), else, or with ``rehash``, computed from
    the bytes read. Nothing is written before every path is checked; after a
    failure no partial file and no directory made empty here is left.
    """
    chosen, dirs = select(reader, subpath)
    known = None if rehash else reader.file_md5s
    target: Destination | None = None
    if dest is not None:
        sub = subpath.strip("/")
        if sub and sub in reader.files and not dest.is_dir():
            # A single file and a destination that is not a directory: the file's new name.
            chosen = [(dest.name, chosen[0][1])]
            dest = dest.parent if str(dest.parent) else Path(".")
        _plan(dest, chosen, dirs, force)
        target = Destination(dest)
    out: list[ExtractedFile] = []
    done = out.append if on_file is None else on_file
    sink: _Sink | None = None
    pending = iter(chosen)
    hasher = ThreadPoolExecutor(1, thread_name_prefix="wh-md5")
    failed = True
    try:
        if target is not None:
            for rel in dirs:
                target.directory(tuple(rel.split("/")))
        for entry, chunk in reader.iter_chunks(e for _, e in chosen):
            # Empty files yield no chunk: they are opened and closed on the way.
            while sink is None or sink.entry is not entry:
                if sink is not None:
                    done(sink.close())
                rel, nxt = next(pending)
                sink = _Sink(rel, nxt, target, hasher, known, force)
            sink.write(chunk)
            if progress is not None:
                progress(len(chunk))
        if sink is not None:
            done(sink.close())
            sink = None
        for rel, entry in pending:
            done(_Sink(rel, entry, target, hasher, known, force).close())
        failed = False
    except BaseException:
        if sink is not None:
            sink.abort()
        raise
    finally:
        hasher.shutdown(wait=True)
        if target is not None:
            target.close(failed=failed)
    return out


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
        known: dict[str, str] | None,
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
