"""Multipart uploads and multi-object deletes for the S3 gateway.

An upload's parts are stored as blocks as they come; the controller keeps
which blocks make which part in memory until CompleteMultipartUpload
commits them as one file (docs/s3-gateway.md, "Multipart uploads"). A
controller restarted meanwhile forgets its uploads (the client starts
again); blocks of parts never completed are garbage for GC.
"""

from __future__ import annotations

import hashlib
from xml.etree import ElementTree as ET

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from warehouse.gateways.s3call import Call
from warehouse.gateways.s3objects import Bucket, check_key
from warehouse.gateways.s3puts import MAX_OBJECT, held_body, writable
from warehouse.gateways.s3write import Written, commit
from warehouse.gateways.s3xml import S3Error, element, iso_time, root, xml_response
from warehouse.manifest import FilePiece

__all__ = [
    "MAX_PARTS",
    "abort_upload",
    "complete_upload",
    "create_upload",
    "delete_objects",
    "list_uploads",
    "upload_part",
]

# S3's bounds: parts 1 to 10,000; 1,000 keys a DeleteObjects.
MAX_PARTS = 10000
MAX_DELETE = 1000
# Bodies read whole (CompleteMultipartUpload, DeleteObjects): XML, bounded.
MAX_XML_BODY = 2 << 20


async def create_upload(call: Call) -> Response:
    await run_in_threadpool(writable, call)
    ident = call.gateway.uploads.start(call.user.name, call.bucket, call.key)
    top = root("InitiateMultipartUploadResult")
    element(top, "Bucket", call.bucket)
    element(top, "Key", call.key)
    element(top, "UploadId", ident)
    return xml_response(top)


def _part_number(q: dict[str, str]) -> int:
    text = q.get("partNumber", "")
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_PARTS:
        raise S3Error("InvalidArgument", f"partNumber must be 1 to {MAX_PARTS}", 400)
    return int(text)


async def upload_part(call: Call, q: dict[str, str]) -> Response:
    number = _part_number(q)
    upload = call.gateway.uploads.find(q["uploadId"], call.user.name, call.bucket, call.key)
    written = await held_body(call, MAX_OBJECT)
    upload.parts[number] = written
    return Response(status_code=200, headers={"ETag": f'"{written.md5}"'})


def abort_upload(call: Call, q: dict[str, str]) -> Response:
    call.gateway.uploads.find(q["uploadId"], call.user.name, call.bucket, call.key)
    call.gateway.uploads.drop(q["uploadId"])
    return Response(status_code=204)


async def _xml_body(call: Call) -> ET.Element:
    data = bytearray()
    try:
        async for chunk in call.request.stream():
            data += chunk
            if len(data) > MAX_XML_BODY:
                raise S3Error("MaxMessageLengthExceeded", "Your request was too big.", 400)
    except ClientDisconnect:
        raise S3Error("IncompleteBody", "the body ended early", 400) from None
    if "<!DOCTYPE" in data.decode("utf-8", "replace").upper():
        raise S3Error("MalformedXML", "a DOCTYPE is not taken", 400)
    try:
        top = ET.fromstring(bytes(data))
    except ET.ParseError:
        raise S3Error("MalformedXML", "The XML you provided was not well-formed", 400) from None
    for e in top.iter():  # the namespace S3 clients write, or none
        e.tag = e.tag.rpartition("}")[2]
    return top


async def complete_upload(call: Call, q: dict[str, str]) -> Response:
    ident = q["uploadId"]
    upload = call.gateway.uploads.find(ident, call.user.name, call.bucket, call.key)
    top = await _xml_body(call)
    asked: list[tuple[int, str]] = []
    for part in top.findall("Part"):
        number_text = part.findtext("PartNumber", "")
        etag = part.findtext("ETag", "").strip().strip('"')
        if not (number_text.isascii() and number_text.isdigit()):
            raise S3Error("MalformedXML", "a part has no PartNumber", 400)
        asked.append((int(number_text), etag))
    if not asked:
        raise S3Error("MalformedXML", "name at least one part", 400)
    if [n for n, _ in asked] != sorted({n for n, _ in asked}):
        raise S3Error("InvalidPartOrder", "The list of parts was not in ascending order.", 400)
    pieces: list[FilePiece] = []
    size = 0
    digests = b""
    for number, etag in asked:
        written = upload.parts.get(number)
        if written is None or (etag and etag != written.md5):
            raise S3Error("InvalidPart", f"part {number} was not uploaded as named", 400)
        pieces.extend(written.pieces)
        size += written.size
        digests += bytes.fromhex(written.md5)
    writes = [w for n, _ in asked for w in upload.parts[n].writes]
    md5 = upload.parts[asked[0][0]].md5 if len(asked) == 1 else None
    whole = Written(tuple(pieces), size, md5 or "", None, writes)
    state, cache = call.gateway.state, call.gateway.cache
    await run_in_threadpool(commit, state, cache, call.user, call.bucket, call.key, whole, md5=md5)
    call.gateway.uploads.drop(ident)
    etag = f'"{hashlib.md5(digests).hexdigest()}-{len(asked)}"'
    out = root("CompleteMultipartUploadResult")
    element(out, "Location", f"/{call.bucket}/{call.key}")
    element(out, "Bucket", call.bucket)
    element(out, "Key", call.key)
    element(out, "ETag", etag)
    return xml_response(out)


def list_uploads(call: Call, bucket: Bucket) -> Response:
    top = root("ListMultipartUploadsResult")
    element(top, "Bucket", call.bucket)
    element(top, "IsTruncated", "false")
    for ident, upload in call.gateway.uploads.of(call.user.name, bucket.name)[:1000]:
        item = element(top, "Upload")
        element(item, "Key", upload.key)
        element(item, "UploadId", ident)
        element(item, "Initiated", iso_time(upload.started))
    return xml_response(top)


async def delete_objects(call: Call) -> Response:
    """DeleteObjects: each key removed in turn (each a new version)."""
    await run_in_threadpool(writable, call)
    top = await _xml_body(call)
    keys = [o.findtext("Key", "") for o in top.findall("Object")]
    if len(keys) > MAX_DELETE:
        raise S3Error("MalformedXML", f"at most {MAX_DELETE} keys a request", 400)
    quiet = top.findtext("Quiet", "false").strip().lower() == "true"
    out = root("DeleteResult")
    state, cache = call.gateway.state, call.gateway.cache
    for key in keys:
        try:
            check_key(key, writing=True)
            await run_in_threadpool(commit, state, cache, call.user, call.bucket, key, None)
        except S3Error as e:
            err = element(out, "Error")
            element(err, "Key", key)
            element(err, "Code", e.code)
            element(err, "Message", str(e))
            continue
        if not quiet:
            element(element(out, "Deleted"), "Key", key)
    return xml_response(out)
