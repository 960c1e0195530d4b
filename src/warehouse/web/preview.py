"""A file's preview (text or image) and a folder downloaded as one zip or tar stream."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from warehouse import catalog
from warehouse.collection.reader import CollectionReader
from warehouse.errors import NotFoundError, UsageError
from warehouse.keys import is_pdh
from warehouse.manifest.entries import FileEntry
from warehouse.web import reading
from warehouse.web.archive import FORMATS, stream_tar, stream_zip
from warehouse.web.auth import Reader, site_of
from warehouse.web.download import image_type, iter_range
from warehouse.web.pages import PREFIX, PageRoute, render

__all__ = ["PREVIEW_BYTES", "folder_entries", "router"]

PREVIEW_BYTES = 64 * 1024  # of a text file shown on its preview page

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)


def _checked(request: Request, user: catalog.User, pdh: str) -> None:
    if not is_pdh(pdh):
        raise NotFoundError(f"{pdh!r} is not a collection's PDH")
    reading.require_collection(site_of(request), user, pdh)


def folder_entries(reader: CollectionReader, folder: str) -> Iterator[tuple[str, FileEntry | None]]:
    """The files under ``folder`` ("" for all), named from the folder's own
    name down, in manifest order, a stream at a time, with each empty
    directory there as ``(name, None)`` (a folder that is itself empty is
    one); NotFoundError at once for a folder with neither."""
    folder = folder.strip("/")
    base = folder.rpartition("/")[0]
    cut = len(base) + 1 if base else 0

    def under(path: str) -> bool:
        return not folder or path.startswith(folder + "/")

    found: Iterator[tuple[str, FileEntry | None]] = itertools.chain.from_iterable(
        itertools.chain(
            ((e.path[cut:], e) for e in entries if under(e.path)),
            ((d[cut:], None) for d in dirs if d and (d == folder or under(d))),
        )
        for entries, dirs in reader.iter_streams()
    )
    first = next(found, None)
    if first is None:
        if folder:
            raise NotFoundError(f"no folder {folder!r} in collection {reader.pdh}")
        return iter(())
    return itertools.chain((first,), found)


def _file_chunks(reader: CollectionReader, entry: FileEntry) -> Iterator[bytes]:
    """A file's bytes, a block piece at a time, each block verified."""
    for piece in entry.pieces:
        block = reader.get_block(piece.locator)
        yield bytes(block[piece.offset : piece.offset + piece.length])


@router.get("/c/{pdh}/preview/{path:file_path}")
def preview(request: Request, pdh: str, path: str, user: Reader) -> Response:
    _checked(request, user, pdh)
    reader = site_of(request).file_reader(pdh, path)
    entry = reader.entry(path)
    image = image_type(entry.path) is not None
    text: str | None = None
    binary = False
    if not image and entry.size:
        head = b"".join(iter_range(reader, entry.path, 0, min(entry.size, PREVIEW_BYTES) - 1))
        binary = b"\0" in head
        # A cut in the middle of a UTF-8 sequence shows as one replacement mark.
        text = None if binary else head.decode("utf-8", errors="replace")
    return render(
        request,
        "preview.html",
        pdh=pdh,
        entry=entry,
        image=image,
        text=text,
        binary=binary,
        cut=entry.size > PREVIEW_BYTES,
        limit=PREVIEW_BYTES,
    )


@router.get("/c/{pdh}/archive")
def archive(
    request: Request, pdh: str, user: Reader, path: str = "", format: str = "zip"
) -> Response:
    """The folder ``path`` (the whole collection if empty), streamed as zip or tar."""
    _checked(request, user, pdh)
    if format not in FORMATS:
        raise UsageError(f"format must be one of {', '.join(FORMATS)}, not {format[:20]!r}")
    reader = site_of(request).folder_reader(pdh, path)
    entries = folder_entries(reader, path)
    root = path.strip("/").rpartition("/")[2] or pdh.partition("+")[0]
    name = f"{root}.{format}"
    plain = "".join(c if (c.isascii() and c.isalnum()) or c in "._-" else "_" for c in name)
    headers = {
        "Content-Disposition": (
            f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"
        ),
        "Cache-Control": "private, no-store",
    }

    def chunks(entry: FileEntry) -> Iterator[bytes]:
        return _file_chunks(reader, entry)

    if format == "zip":
        body, media = stream_zip(entries, chunks), "application/zip"
    else:
        body, media = stream_tar(entries, chunks), "application/x-tar"
    return StreamingResponse(body, media_type=media, headers=headers)
