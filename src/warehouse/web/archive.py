"""A folder of a collection as a zip or tar stream, in bounded memory.

Each file is read one block piece at a time and written through the standard
library's ``zipfile`` (to a stream it cannot seek: sizes go in data
descriptors) or as tar headers from ``tarfile`` followed by the data, so only
a block and what the archiver buffers are held at any time. An entry with
no file (``None``) is an empty directory: it goes in as a directory entry,
so the archive holds what the collection does.
"""

from __future__ import annotations

import io
import tarfile
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator

from warehouse.manifest.entries import FileEntry

__all__ = ["FORMATS", "Chunks", "stream_tar", "stream_zip"]

FORMATS = ("zip", "tar")
Chunks = Callable[[FileEntry], Iterable[bytes]]  # a file's bytes, in order

# The web server hands each piece of a streamed body to a thread of its pool
# and sends it as an HTTP chunk: a tar of 200,000 files of 10 bytes was
# 600,000 pieces (header, data, padding) and took over two minutes, now ten
# seconds. Pieces are sent joined up to this size; a bigger one as it is.
PIECE = 1 << 16


def _joined(parts: Iterable[bytes]) -> Iterator[bytes]:
    """``parts`` gathered into pieces of about ``PIECE`` bytes, in order."""
    held: list[bytes] = []
    size = 0
    for part in parts:
        if len(part) >= PIECE:  # a block's piece: not copied into another
            if held:
                yield b"".join(held)
                held.clear()
                size = 0
            yield part
            continue
        if part:
            held.append(part)
            size += len(part)
            if size >= PIECE:
                yield b"".join(held)
                held.clear()
                size = 0
    if held:
        yield b"".join(held)


class _Sink(io.RawIOBase):
    """A write-only stream that hands back what was written since the last take."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._pos = 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self._parts.append(bytes(data))
        self._pos += len(data)
        return len(data)

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        raise OSError("not seekable")  # zipfile then writes data descriptors

    def seekable(self) -> bool:
        return False

    def take(self) -> bytes:
        out = b"".join(self._parts)
        self._parts.clear()
        return out


def _zip_name(name: str) -> str:
    """A zip separates names with "/" only; extractors on Windows read a
    backslash as a separator too, so "..\\x" would land outside the folder
    extracted into. A backslash, ordinary in a collection's names, is "_" there."""
    return name.replace("\\", "_")


def stream_zip(
    entries: Iterable[tuple[str, FileEntry | None]], chunks: Chunks, mtime: float | None = None
) -> Iterator[bytes]:
    """A zip of ``(name in the archive, file or None for an empty
    directory)`` pairs, deflated at level 1."""
    return _joined(_zip_parts(entries, chunks, mtime))


def _zip_parts(
    entries: Iterable[tuple[str, FileEntry | None]], chunks: Chunks, mtime: float | None
) -> Iterator[bytes]:
    stamp = time.gmtime(time.time() if mtime is None else mtime)[:6]
    sink = _Sink()
    with zipfile.ZipFile(sink, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name, entry in entries:
            if entry is None:
                folder = zipfile.ZipInfo(_zip_name(name) + "/", date_time=stamp)
                # The Unix mode of a directory, and the MS-DOS directory bit.
                folder.external_attr = (0o40755 << 16) | 0x10
                archive.writestr(folder, b"")
                yield sink.take()
                continue
            info = zipfile.ZipInfo(_zip_name(name), date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            with archive.open(info, "w", force_zip64=True) as out:
                for chunk in chunks(entry):
                    out.write(chunk)
                    if sink.tell():
                        yield sink.take()
            yield sink.take()
    yield sink.take()  # the central directory


def stream_tar(
    entries: Iterable[tuple[str, FileEntry | None]], chunks: Chunks, mtime: float | None = None
) -> Iterator[bytes]:
    """A POSIX (pax) tar of ``(name in the archive, file or None for an
    empty directory)`` pairs."""
    return _joined(_tar_parts(entries, chunks, mtime))


def _tar_parts(
    entries: Iterable[tuple[str, FileEntry | None]], chunks: Chunks, mtime: float | None
) -> Iterator[bytes]:
    when = int(time.time() if mtime is None else mtime)
    for name, entry in entries:
        if entry is None:
            folder = tarfile.TarInfo(name)
            folder.type = tarfile.DIRTYPE
            folder.mtime = when
            folder.mode = 0o755
            yield folder.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
            continue
        info = tarfile.TarInfo(name)
        info.size = entry.size
        info.mtime = when
        info.mode = 0o644
        yield info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
        for chunk in chunks(entry):
            yield bytes(chunk)
        pad = -entry.size % tarfile.BLOCKSIZE
        if pad:
            yield b"\0" * pad
    yield b"\0" * (2 * tarfile.BLOCKSIZE)  # the end-of-archive marker
