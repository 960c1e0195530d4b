"""Files of many blocks, read by DuckDB block by block, each checked when first touched.

A table partition is stored with each Parquet column chunk in blocks of its
own (``builtin:table``), so a query that reads three columns of sixteen
needs only their blocks. DuckDB opens such a file through this filesystem
(registered with the connection); the first read that touches any byte of
a block maps the whole block file of the local volume and checks its MD5,
and every byte DuckDB gets is copied out of a block so checked, in this
step.
A block that fails its check is moved aside by the volume (as on any read)
and the read fails; the query step then fails with the reason.

The check of a block DuckDB touches first takes along the blocks at the same
place in the step's other files cut alike (the same column chunk of the
other partitions, which a scan reads too) and, where the query's columns
are known, the chunks of the same columns in the other row groups (a
fixed number of blocks apart), all hashed in one call of
``warehouse.native.md5.md5_many`` (SIMD lanes side by side, without the
GIL). Only a block DuckDB touches can fail a read: one taken along that
fails is left unchecked, to be checked (and reported) if DuckDB touches it.

Checked blocks are kept, up to ``KEEP_BYTES``, while the step runs (DuckDB
reads a column chunk once, but a read may straddle two blocks); one
dropped is read and checked again if touched again.
"""

from __future__ import annotations

import bisect
import datetime
import io
import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from fsspec import AbstractFileSystem  # type: ignore[import-untyped]

from warehouse.blocks.volume import LocalVolume
from warehouse.errors import CorruptDataError, NotFoundError
from warehouse.manifest import FileEntry
from warehouse.native.md5 import can_map, map_md5, md5_many

__all__ = ["KEEP_BYTES", "PROTOCOL", "BlockFiles", "lazy_layout"]

PROTOCOL = "whblocks"
KEEP_BYTES = 256 << 20
# Blocks checked in one call at most (the one touched and those taken along),
# and their bytes: a lane each, a share of what is kept.
BATCH_BLOCKS = 64
BATCH_BYTES = 64 << 20
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def lazy_layout(entry: FileEntry) -> list[tuple[str, int]] | None:
    """The (MD5, size) of each block of a file made of more than one whole
    block, in order; None for any other file (read as before)."""
    if len(entry.pieces) < 2:
        return None
    out = []
    for piece in entry.pieces:
        size = piece.locator.size
        if piece.offset != 0 or piece.length != size or not size:
            return None
        out.append((piece.locator.md5, size))
    return out


class _File:
    def __init__(
        self, name: str, blocks: Sequence[tuple[str, int]], named: Sequence[bool] | None
    ) -> None:
        self.name = name
        self.md5s = [md5 for md5, _ in blocks]
        # Cut as ``builtin:table`` cuts a partition (its head, each column
        # chunk of each row group, its tail), a column's chunks are as many
        # blocks apart as the table has columns. ``named``: which columns
        # the query names (by position); None if unknown, or if the blocks
        # do not fall so (a chunk cut again).
        n = len(blocks) - 2
        fits = named and n >= len(named) and n % len(named) == 0
        self.named = list(named) if named and fits else None
        self.starts = []
        pos = 0
        for _, size in blocks:
            self.starts.append(pos)
            pos += size
        self.size = pos


class BlockFiles:
    """The many-block files of one step, by the path DuckDB opens them at."""

    def __init__(self, volume: LocalVolume) -> None:
        self.volume = volume
        self.files: dict[str, _File] = {}
        # The first block that failed its check (or could not be read): DuckDB
        # reports a failed read in its own words; the step raises this.
        self.error: Exception | None = None
        self.checked_bytes = 0
        self._kept: OrderedDict[str, memoryview] = OrderedDict()
        self._kept_bytes = 0
        # Blocks a thread is checking now: another wanting one waits for it.
        self._checking: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.fs = _BlockFS(self)

    def add(
        self, name: str, blocks: Sequence[tuple[str, int]], named: Sequence[bool] | None = None
    ) -> str:
        """The path DuckDB reads the file at (``name`` ends as the file's does);
        ``named``: whether the query names each column of the table, if known
        (the chunks of those in all row groups are checked together)."""
        path = f"{len(self.files)}/{name.rsplit('/', 1)[-1]}"
        self.files[path] = _File(name, blocks, named)
        return f"{PROTOCOL}://{path}"

    def register(self, con: Any) -> None:
        if self.files and self.fs.protocol not in con.list_filesystems():
            con.register_filesystem(self.fs)

    def _size(self, f: _File, i: int) -> int:
        end = f.starts[i + 1] if i + 1 < len(f.starts) else f.size
        return end - f.starts[i]

    def block(self, f: _File, i: int, last: int | None = None) -> memoryview:
        """Block ``i`` of ``f``, checked in this step; if it is checked now,
        so are those up to ``last`` that the same read will want."""
        md5 = f.md5s[i]
        size = self._size(f, i)
        while True:
            with self._lock:
                data = self._kept.get(md5)
                if data is not None and len(data) == size:  # a file may list it with another size
                    return data
                busy = self._checking.get(md5)
                if busy is None:
                    batch = self._batch(f, i, i if last is None else last)
                    done = threading.Event()
                    for other, _ in batch:
                        self._checking[other] = done
            if busy is None:
                break
            busy.wait()  # another thread is checking it: kept once that is done, if good
        try:
            found = self._check(batch)
        finally:
            with self._lock:
                for other, _ in batch:
                    self._checking.pop(other, None)
            done.set()
        data = found.get(md5)
        if data is None:  # the volume's own check, which moves a bad copy aside, says why
            data = self._checked_one(f, i)
            self._keep({md5: data})
        return data

    def _batch(self, f: _File, i: int, last: int) -> list[tuple[str, int]]:
        """Block ``i`` of ``f`` and, to check along with it, the next ones up
        to ``last``, the blocks at the same places in the other files of as
        many blocks, then (where the files' columns are known) the chunks of
        the same columns in the other row groups, those the query names: none
        kept or being checked. A read spans several blocks, a scan reads a
        column in every row group, and the SIMD lanes are filled only by a
        call of many. (A read may span a column the query does not name,
        where DuckDB joins two reads: that one is not taken along from other
        row groups.)"""
        batch = [(f.md5s[i], self._size(f, i))]
        total = batch[0][1]
        seen = {f.md5s[i]}
        alike = [f] + [o for o in self.files.values() if o is not f and len(o.md5s) == len(f.md5s)]
        places = [list(range(i, last + 1))]
        named = f.named
        if named and all(o.named == named for o in alike):
            stride, n = len(named), len(f.md5s)
            ours = [j for j in range(max(i, 1), min(last, n - 2) + 1) if named[(j - 1) % stride]]
            # The later row groups first (a scan reads on), then the earlier.
            for k in [*range(1, n // stride + 1), *range(-1, -n // stride - 1, -1)]:
                places.append([j + k * stride for j in ours if 1 <= j + k * stride <= n - 2])
        for js in places:
            for other in alike:
                for j in js:
                    if len(batch) >= BATCH_BLOCKS:
                        return batch
                    md5, size = other.md5s[j], self._size(other, j)
                    if md5 in seen or md5 in self._kept or md5 in self._checking:
                        continue
                    if total + size > BATCH_BYTES:
                        return batch
                    seen.add(md5)
                    batch.append((md5, size))
                    total += size
        return batch

    def _check(self, batch: list[tuple[str, int]]) -> dict[str, memoryview]:
        """The blocks of ``batch`` that are here whole and pass their check,
        mapped; all hashed in one call. The rest are left out, unreported."""
        if LocalVolume.can_map and can_map():
            # One native call maps, faults in and hashes them all, the GIL
            # released throughout (DuckDB's other thread reads meanwhile).
            paths = [str(self.volume.path_for(md5)) for md5, _ in batch]
            found = map_md5(paths, [size for _, size in batch])
            good = {
                md5: got[0]
                for (md5, _), got in zip(batch, found, strict=True)
                if got is not None and got[1].hex() == md5
            }
            self._keep(good)
            return good
        mapped: dict[str, memoryview] = {}
        for md5, size in batch:
            data = self._map(md5, size)
            if data is not None:
                mapped[md5] = data
        sums = md5_many(list(mapped.values()))
        good = {
            md5: data
            for (md5, data), digest in zip(mapped.items(), sums, strict=True)
            if digest.hex() == md5
        }
        self._keep(good)
        return good

    def _map(self, md5: str, size: int) -> memoryview | None:
        """The block file's pages, mapped and faulted in (a read error is an
        OSError here, not a SIGBUS later); None if it is not here whole, or
        cannot be mapped so."""
        if not LocalVolume.can_map or not size:
            return None
        try:
            fd = os.open(self.volume.path_for(md5), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            if os.fstat(fd).st_size != size:
                return None
            pages = mmap.mmap(fd, size, prot=mmap.PROT_READ)
        except OSError:
            return None
        finally:
            os.close(fd)
        try:
            pages.madvise(_MADV_POPULATE_READ)
        except OSError:
            pages.close()
            return None
        # Block files are never changed in place (a write renames a new file
        # in, trash renames it away): the pages stay those hashed.
        return memoryview(pages)

    def _checked_one(self, f: _File, i: int) -> memoryview:
        """Block ``i`` of ``f`` through the volume's own check (a bad copy is
        moved aside); the error, naming the file, if it fails."""
        md5, size = f.md5s[i], self._size(f, i)
        try:
            # Mapped whole and checked by the volume, never from the
            # warehouse's block cache: each step checks anew.
            data = self.volume.get_mapped(md5)
            if data is None:  # this system cannot fault a mapping in ahead
                data = memoryview(self.volume.get(md5))
            if len(data) != size:
                raise CorruptDataError(f"block {md5} has {len(data)} bytes, not {size}")
        except (CorruptDataError, NotFoundError, OSError) as e:
            kind = CorruptDataError if isinstance(e, CorruptDataError | NotFoundError) else OSError
            error = kind(f"{e}; it holds data of: {f.name}")
            with self._lock:
                self.error = self.error or error
            raise error from e
        return data

    def _keep(self, blocks: dict[str, memoryview]) -> None:
        with self._lock:
            for md5, data in blocks.items():
                self.checked_bytes += len(data)
                if md5 not in self._kept:
                    self._kept[md5] = data
                    self._kept_bytes += len(data)
            while self._kept_bytes > KEEP_BYTES and len(self._kept) > 1:
                _, old = self._kept.popitem(last=False)
                self._kept_bytes -= len(old)

    def read(self, f: _File, pos: int, n: int) -> bytes:
        end = min(pos + n, f.size)
        parts: list[memoryview] = []
        i = bisect.bisect_right(f.starts, pos) - 1
        last = bisect.bisect_right(f.starts, end - 1) - 1
        while pos < end:
            data = self.block(f, i, last)
            start = f.starts[i]
            take = min(end - pos, start + len(data) - pos)
            parts.append(data[pos - start : pos - start + take])
            pos += take
            i += 1
        # DuckDB takes bytes (it copies them out under the GIL).
        return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)


class _Reader(io.RawIOBase):
    """An open file: DuckDB seeks, then reads.

    DuckDB's threads share one handle per file and read at a position as a
    seek and a read, two calls between which another thread may run: the
    position is each thread's own, so no thread reads where another sought.
    (A thread that has not sought yet starts where the handle was last.)
    """

    def __init__(self, files: BlockFiles, f: _File) -> None:
        super().__init__()
        self._files = files
        self._f = f
        self._pos: dict[int, int] = {}  # thread id -> position
        self._last = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos.get(threading.get_ident(), self._last)

    def _moved(self, pos: int) -> int:
        self._pos[threading.get_ident()] = self._last = pos
        return pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self.tell()
        elif whence == io.SEEK_END:
            offset += self._f.size
        return self._moved(offset)

    def read(self, size: int | None = -1) -> bytes:
        pos = self.tell()
        if size is None or size < 0:
            size = self._f.size - pos
        data = self._files.read(self._f, pos, size)
        self._moved(pos + len(data))
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class _BlockFS(AbstractFileSystem):  # type: ignore[misc]
    protocol = PROTOCOL
    cachable = False  # one per step, never shared through fsspec's instance cache

    def __init__(self, files: BlockFiles) -> None:
        super().__init__()
        self._files = files

    def _file(self, path: str) -> _File:
        key = path.split("://", 1)[-1]
        try:
            return self._files.files[key]
        except KeyError:
            raise FileNotFoundError(path) from None

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> _Reader:
        if mode != "rb":
            raise PermissionError(f"{path} is read-only")
        return _Reader(self._files, self._file(path))

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        f = self._file(path)
        return {"name": path.split("://", 1)[-1], "size": f.size, "type": "file"}

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        found = self.info(path)
        return [found] if detail else [found["name"]]

    def exists(self, path: str, **kwargs: Any) -> bool:
        return path.split("://", 1)[-1] in self._files.files

    def modified(self, path: str) -> datetime.datetime:
        self._file(path)
        return _EPOCH
