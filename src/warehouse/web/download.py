"""Downloads: any file of a collection, streamed, with HTTP Range; and the manifest.

One ``bytes=`` range is honoured (``a-b``, ``a-``, ``-n``); several ranges, or
a ``Range`` that does not parse, get the whole file (RFC 9110 lets a server
ignore them). A range starting past the end is answered 416. The content of
a PDH never changes, so the ETag is fixed and ``If-Range`` is simple.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from starlette.convertors import Convertor, register_url_convertor

from warehouse.collection.reader import CollectionReader
from warehouse.errors import NotFoundError
from warehouse.keys import is_pdh
from warehouse.web import reading
from warehouse.web.auth import Reader, site_of
from warehouse.web.pages import PREFIX, PageRoute

__all__ = ["IMAGE_TYPES", "Unsatisfiable", "iter_range", "parse_range", "router"]

# Images a browser may show inline (the preview page). Never SVG: it can hold script.
IMAGE_TYPES = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
}


def image_type(path: str) -> str | None:
    """The content type of an image the preview may show, by the name's extension."""
    name = path.rpartition("/")[2]
    return IMAGE_TYPES.get(name.rpartition(".")[2].lower()) if "." in name else None


class _FilePath(Convertor[str]):
    """A path in a collection, as ``path`` but across line breaks too: a
    name may hold a newline, and ``path``'s ``.*`` stops at one (404)."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("file_path", _FilePath())

router = APIRouter(prefix=PREFIX, route_class=PageRoute, include_in_schema=False)

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


class Unsatisfiable(Exception):
    """A range with no byte inside the file."""


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The (first, last) bytes asked for, inclusive; None for the whole file."""
    if not header:
        return None
    m = _RANGE.fullmatch(header.strip().replace(" ", ""))
    if m is None or (not m.group(1) and not m.group(2)):
        return None
    if not m.group(1):  # the last n bytes
        n = int(m.group(2))
        if n == 0 or size == 0:  # an empty file has no last bytes
            raise Unsatisfiable()
        return max(0, size - n), size - 1
    first = int(m.group(1))
    last = int(m.group(2)) if m.group(2) else size - 1
    if m.group(2) and last < first:
        return None  # not a valid range: ignored
    if first >= size:
        raise Unsatisfiable()
    return first, min(last, size - 1)


def iter_range(reader: CollectionReader, path: str, first: int, last: int) -> Iterator[bytes]:
    """Bytes ``first..last`` of a file, a block piece at a time, each block verified."""
    pos = 0
    for piece in reader.entry(path).pieces:
        end = pos + piece.length
        if end > first and pos <= last:
            lo = max(first, pos) - pos
            hi = min(last + 1, end) - pos
            block = reader.get_block(piece.locator)
            yield bytes(block[piece.offset + lo : piece.offset + hi])
        pos = end
        if pos > last:
            break


def _disposition(path: str) -> str:
    name = path.rpartition("/")[2] or "download"
    plain = "".join(c if c.isascii() and c.isprintable() and c not in '"\\;' else "_" for c in name)
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"


@router.api_route("/c/{pdh}/f/{path:file_path}", methods=["GET", "HEAD"])
def download(request: Request, pdh: str, path: str, user: Reader, inline: bool = False) -> Response:
    if not is_pdh(pdh):
        raise NotFoundError(f"{pdh!r} is not a collection's PDH")
    reading.require_collection(site_of(request), user, pdh)
    reader = site_of(request).file_reader(pdh, path)
    entry = reader.entry(path)
    size = entry.size
    etag = '"' + hashlib.md5(f"{pdh}/{entry.path}".encode()).hexdigest() + '"'
    headers = {
        "Accept-Ranges": "bytes",
        "ETag": etag,
        "Content-Disposition": _disposition(entry.path),
        "Cache-Control": "private, max-age=3600",
    }
    media_type = "application/octet-stream"
    shown = image_type(entry.path) if inline else None
    if shown is not None:
        # Shown in the preview: a fixed image type, never sniffed, with no rights.
        media_type = shown
        headers["Content-Disposition"] = "inline"
        headers["X-Content-Type-Options"] = "nosniff"
        headers["Content-Security-Policy"] = "default-src 'none'; sandbox"
    if_range = request.headers.get("if-range")
    asked = request.headers.get("range") if if_range in (None, etag) else None
    try:
        span = parse_range(asked, size)
    except Unsatisfiable:
        headers["Content-Range"] = f"bytes */{size}"
        return PlainTextResponse("range not satisfiable\n", 416, headers=headers)
    first, last = span if span is not None else (0, size - 1)
    headers["Content-Length"] = str(max(0, last - first + 1))
    if span is not None:
        headers["Content-Range"] = f"bytes {first}-{last}/{size}"
    status = 206 if span is not None else 200
    if request.method == "HEAD":  # the headers alone (a client asking the size): no block read
        return Response(status_code=status, media_type=media_type, headers=headers)
    body = iter_range(reader, entry.path, first, last) if size else iter(())
    return StreamingResponse(body, status_code=status, media_type=media_type, headers=headers)


@router.get("/c/{pdh}/manifest")
def manifest(request: Request, pdh: str, user: Reader) -> Response:
    """The manifest text (unsigned: it is the collection's content, as its PDH hashes)."""
    if not is_pdh(pdh):
        raise NotFoundError(f"{pdh!r} is not a collection's PDH")
    reading.require_collection(site_of(request), user, pdh)
    text = site_of(request).manifest_text(pdh)
    name = pdh.replace("+", "_") + ".manifest"
    return PlainTextResponse(
        text, headers={"Content-Disposition": f'attachment; filename="{name}"'}
    )
