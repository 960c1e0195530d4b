"""Write a collection (or part of it) into a directory, safely.

Every target path is checked before anything is written: no component may be
empty, ``.`` or ``..``; no directory on the way may be a symbolic link (which
could lead out of the destination); an existing file is only replaced with
``force``. Each file is written to a temporary name and renamed into place
once all its blocks verified, so a failed get never leaves a partial file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from warehouse.collection.reader import CollectionReader
from warehouse.errors import NotFoundError, UsageError, WarehouseError
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
    """No directory between ``dest`` and the file may be a symlink or a non-directory."""
    cur = dest
    for part in rel.split("/")[:-1]:
        cur = cur / part
        if cur.is_symlink():
            raise UsageError(f"refusing to write through symbolic link {cur}")
        if cur.exists() and not cur.is_dir():
            raise WarehouseError(f"{cur} exists and is not a directory")


def _plan(dest: Path, chosen: list[tuple[str, FileEntry]], dirs: list[str], force: bool) -> None:
    if dest.is_symlink() and not dest.is_dir():
        raise UsageError(f"refusing to write through symbolic link {dest}")
    files = {rel for rel, _ in chosen}
    existing: list[str] = []
    for rel, _ in chosen:
        parents = rel.split("/")[:-1]
        for i in range(1, len(parents) + 1):
            if (clash := "/".join(parents[:i])) in files:
                raise UsageError(f"the collection holds a file and a directory named {clash!r}")
        _check_rel(rel)
        _check_dirs(dest, rel)
        target = dest / rel
        if os.path.lexists(target):
            if target.is_dir() and not target.is_symlink():
                raise WarehouseError(f"{target} exists and is a directory")
            existing.append(rel)
    for rel in dirs:
        _check_rel(rel)
        _check_dirs(dest, rel + "/x")
    if existing and not force:
        shown = ", ".join(existing[:5]) + (" …" if len(existing) > 5 else "")
        raise WarehouseError(
            f"{len(existing)} file(s) already exist in {dest} ({shown}); "
            "use --force to overwrite them"
        )


def extract(
    reader: CollectionReader,
    dest: Path | None,
    *,
    subpath: str = "",
    force: bool = False,
    rehash: bool = False,
    progress: Progress | None = None,
) -> list[ExtractedFile]:
    """Write (or, with ``dest=None``, only read and verify) files; return their digests.

    Every block is verified whatever happens. The listed MD5 of a file is the
    one recorded when it was stored, if the warehouse has it (the verified
    blocks hold exactly those bytes), else, or with ``rehash``, computed from
    the bytes read.
    """
    chosen, dirs = select(reader, subpath)
    known = None if rehash else reader.file_md5s
    if dest is not None:
        sub = subpath.strip("/")
        if sub and sub in reader.files and not dest.is_dir():
            # A single file and a destination that is not a directory: the file's new name.
            chosen = [(dest.name, chosen[0][1])]
            dest = dest.parent if str(dest.parent) else Path(".")
        _plan(dest, chosen, dirs, force)
        for rel in dirs:
            (dest / rel).mkdir(parents=True, exist_ok=True)
    out: list[ExtractedFile] = []
    sink: _Sink | None = None
    pending = iter(chosen)
    hasher = ThreadPoolExecutor(1, thread_name_prefix="wh-md5")
    try:
        for entry, chunk in reader.iter_chunks(e for _, e in chosen):
            # Empty files yield no chunk: they are opened and closed on the way.
            while sink is None or sink.entry is not entry:
                if sink is not None:
                    out.append(sink.close())
                rel, nxt = next(pending)
                sink = _Sink(rel, nxt, dest, hasher, known)
            sink.write(chunk)
            if progress is not None:
                progress(len(chunk))
        if sink is not None:
            out.append(sink.close())
            sink = None
        for rel, entry in pending:
            out.append(_Sink(rel, entry, dest, hasher, known).close())
    except BaseException:
        if sink is not None:
            sink.abort()
        raise
    finally:
        hasher.shutdown(wait=True)
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
        dest: Path | None,
        hasher: ThreadPoolExecutor,
        known: dict[str, str] | None,
    ) -> None:
        self.hasher = hasher
        self.known = None if known is None else known.get(entry.path)
        self.pending: Future[None] | None = None
        self.rel = rel
        self.entry = entry
        self.md5 = hashlib.md5()
        self.size = 0
        self.target = self.tmp = None if dest is None else dest / rel
        self.file = None
        if self.target is not None:
            self.target.parent.mkdir(parents=True, exist_ok=True)
            self.tmp = self.target.with_name(f".{self.target.name}.wh-part-{os.getpid()}")
            self.file = open(self.tmp, "wb")  # noqa: SIM115 - closed in close()/abort()

    def write(self, chunk: memoryview) -> None:
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
            self.file.close()
            assert self.tmp is not None and self.target is not None
            os.replace(self.tmp, self.target)
        return ExtractedFile(self.rel, self.known or self.md5.hexdigest(), self.size)

    def abort(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
        if self.file is not None:
            self.file.close()
            assert self.tmp is not None
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)
