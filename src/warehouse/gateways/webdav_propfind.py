"""A WebDAV listing (``PROPFIND``, Depth 1) of a directory, written as it is
listed (docs/webdav.md, "A directory of many files").

wsgidav answers a PROPFIND with one XML document built whole: every member
of the directory and its properties held at once, a million of them for a
flat directory of a million files. Here the members are asked for a batch
at a time (a large directory's files come a page of its stream at a time,
``manifest/pages.py``), each batch's ``<response>`` elements made by
wsgidav's own property code and sent before the next batch is listed. The
answer is the same document, sent in pieces (no Content-Length).
"""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from wsgidav import util, xml_tools
from wsgidav.dav_error import HTTP_BAD_REQUEST, DAVError

__all__ = ["BATCH", "Listed", "streamed_propfind"]

# Members listed, and their responses written, at a time.
BATCH = 1000

_HEAD = b'<?xml version="1.0" encoding="utf-8"?>\n<D:multistatus xmlns:D="DAV:">'
_TAIL = b"</D:multistatus>\n"


class Listed(Protocol):
    """A directory whose members can be given a batch at a time."""

    def get_href(self) -> str: ...

    def get_properties(self, mode: str, *, name_list: list[str] | None = None) -> Any: ...

    def member_batches(self, count: int) -> Iterator[list[Any]]: ...


def _asked(environ: dict[str, Any]) -> tuple[str, list[str]]:
    """The PROPFIND body's mode (allprop, name or named) and the properties named."""
    body = util.parse_xml_body(environ, allow_empty=True)
    if body is None:
        return "allprop", []  # an empty body asks for every property (RFC 4918 9.1)
    if body.tag != "{DAV:}propfind":
        raise DAVError(HTTP_BAD_REQUEST)
    mode: str | None = None
    names: list[str] = []
    for part in body:
        found = {"{DAV:}allprop": "allprop", "{DAV:}name": "name", "{DAV:}prop": "named"}
        wanted = found.get(part.tag)
        if wanted is None:
            continue  # <include> and unknown elements: ignored, as wsgidav does
        # allprop, propname and prop exclude one another.
        if mode is not None and not (mode == wanted == "named"):
            raise DAVError(HTTP_BAD_REQUEST)
        mode = wanted
        if wanted == "named":
            names += [p.tag for p in part]
    return mode or "named", names


def _tostring(element: Any) -> bytes:
    if xml_tools.use_lxml:
        return bytes(xml_tools.etree.tostring(element, encoding="UTF-8"))
    return bytes(ElementTree.tostring(element, encoding="UTF-8"))


def _responses(members: Iterable[Any], mode: str, names: list[str]) -> bytes:
    """The ``<response>`` elements of ``members``, as wsgidav writes them."""
    holder = xml_tools.make_multistatus_el()
    for member in members:
        props = member.get_properties(mode, name_list=names if mode == "named" else None)
        util.add_property_response(holder, member.get_href(), props)
    return b"".join(_tostring(r) for r in holder)


def streamed_propfind(
    directory: Listed, environ: dict[str, Any], start_response: Callable[..., Any]
) -> Iterator[bytes]:
    """The answer to a Depth 1 PROPFIND of ``directory``: the directory
    itself, then its members a batch at a time."""
    mode, names = _asked(environ)  # a bad body fails before anything is sent
    first = _responses([directory], mode, names)
    headers = [
        ("Content-Type", "application/xml; charset=utf-8"),
        ("Date", util.get_rfc1123_time()),
    ]
    start_response("207 Multi-Status", headers)
    return _body(directory, first, mode, names)


def _body(directory: Listed, first: bytes, mode: str, names: list[str]) -> Iterator[bytes]:
    yield _HEAD + first
    for batch in directory.member_batches(BATCH):
        yield _responses(batch, mode, names)
    yield _TAIL
