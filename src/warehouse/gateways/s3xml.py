"""The S3 gateway's XML: answers and error bodies, as S3 writes them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from xml.etree import ElementTree as ET

from starlette.responses import Response

__all__ = [
    "NS",
    "S3Error",
    "element",
    "error_response",
    "http_time",
    "iso_time",
    "root",
    "texts",
    "xml_response",
]

NS = "http://s3.amazonaws.com/doc/2006-03-01/"


class S3Error(Exception):
    """An S3 error: its code (``NoSuchKey``…), message and HTTP status."""

    def __init__(self, code: str, message: str, status: int, **extra: str) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.extra = extra


def _clean(text: str) -> str:
    # XML 1.0 cannot carry most control characters, even escaped: a key
    # holding one is shown with it replaced (listings use encoding-type=url).
    return "".join(c if c in "\t\n\r" or ord(c) >= 0x20 else "\ufffd" for c in text)


def element(parent: ET.Element, tag: str, text: str | int | None = None) -> ET.Element:
    child = ET.SubElement(parent, tag)
    if text is not None:
        child.text = _clean(str(text))
    return child


def xml_response(
    root: ET.Element, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    body = b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(
        root, encoding="utf-8", xml_declaration=False
    )
    return Response(body, status_code=status, media_type="application/xml", headers=headers)


def root(tag: str) -> ET.Element:
    return ET.Element(tag, xmlns=NS)


def error_response(err: S3Error, resource: str, *, head: bool = False) -> Response:
    """The error as S3 sends it; a HEAD's answer has no body (the status tells)."""
    request_id = uuid.uuid4().hex[:16].upper()
    headers = {"x-amz-request-id": request_id}
    if head:
        return Response(status_code=err.status, headers=headers)
    top = ET.Element("Error")
    element(top, "Code", err.code)
    element(top, "Message", str(err))
    for key, value in err.extra.items():
        element(top, key, value)
    element(top, "Resource", resource[:1024])
    element(top, "RequestId", request_id)
    return xml_response(top, err.status, headers)


def iso_time(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(t))


def http_time(t: float) -> str:
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(t))


def texts(parent: ET.Element, tag: str, values: Iterable[str]) -> None:
    for v in values:
        element(parent, tag, v)
