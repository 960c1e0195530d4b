"""The S3 operations the gateway answers (docs/s3-gateway.md, "Operations")."""

from __future__ import annotations

import re
from email.utils import parsedate_to_datetime
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from warehouse import catalog
from warehouse.gateways import s3multipart
from warehouse.gateways.s3call import Call
from warehouse.gateways.s3objects import (
    MAX_KEYS,
    Bucket,
    check_key,
    etag_matches,
    etag_of,
    list_page,
    start_key,
)
from warehouse.gateways.s3puts import create_bucket, delete_object, put_object
from warehouse.gateways.s3read import object_body, small_body
from warehouse.gateways.s3xml import S3Error, element, http_time, iso_time, root, xml_response
from warehouse.server.controller.access import readable_names

__all__ = ["dispatch", "read"]

# The most buckets ListBuckets lists (names the caller reads).
MAX_BUCKETS = 10000
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


# S3 sub-resources not served: asked for, they are 501, never taken for a
# plain GetObject or ListObjects (whose answer a client would misread).
_NOT_SERVED = frozenset(
    [
        "acl",
        "policy",
        "policyStatus",
        "cors",
        "lifecycle",
        "tagging",
        "website",
        "encryption",
        "object-lock",
        "replication",
        "logging",
        "notification",
        "accelerate",
        "requestPayment",
        "analytics",
        "inventory",
        "metrics",
        "ownershipControls",
        "publicAccessBlock",
        "intelligent-tiering",
        "versions",
        "retention",
        "legal-hold",
        "torrent",
        "attributes",
        "restore",
        "select",
    ]
)


def _refuse_unserved(call: Call, q: dict[str, str]) -> None:
    asked = _NOT_SERVED.intersection(q)
    if asked or (call.key and call.request.method == "GET" and "uploadId" in q):
        what = ", ".join(sorted(asked)) or "ListParts"
        raise S3Error("NotImplemented", f"{what} is not implemented", 501)


def read(call: Call) -> Response:
    """A GET or HEAD, whole (it blocks: run on a worker thread)."""
    method, q = call.request.method, call.query
    _refuse_unserved(call, q)
    if not call.bucket:
        if method == "GET":
            return list_buckets(call)
        raise S3Error("MethodNotAllowed", "only GET lists buckets", 405)
    if not call.key:
        if "location" in q:
            return xml_response(root("LocationConstraint"))
        bucket = call.resolve()
        if method == "HEAD":
            return Response(status_code=200, headers={"x-amz-bucket-region": "us-east-1"})
        if "versioning" in q:
            return xml_response(root("VersioningConfiguration"))
        if "uploads" in q:
            return s3multipart.list_uploads(call, bucket)
        return list_objects(call, bucket)
    check_key(call.key, writing=False)
    return get_object(call)


async def dispatch(call: Call) -> Response:
    """Any other request (its body is read on the event loop)."""
    method, q = call.request.method, call.query
    _refuse_unserved(call, q)
    if not call.bucket:
        raise S3Error("MethodNotAllowed", "only GET lists buckets", 405)
    if not call.key:
        if method == "PUT":
            return await run_in_threadpool(create_bucket, call)
        if method == "POST" and "delete" in q:
            return await s3multipart.delete_objects(call)
        raise S3Error("NotImplemented", f"{method} on a bucket is not implemented", 501)
    check_key(call.key, writing=method in ("PUT", "POST"))
    if method == "PUT":
        if "x-amz-copy-source" in call.request.headers:
            raise S3Error("NotImplemented", "CopyObject is not implemented", 501)
        if "uploadId" in q:
            return await s3multipart.upload_part(call, q)
        return await put_object(call)
    if method == "POST":
        if "uploads" in q:
            return await s3multipart.create_upload(call)
        if "uploadId" in q:
            return await s3multipart.complete_upload(call, q)
    if method == "DELETE":
        if "uploadId" in q:
            return s3multipart.abort_upload(call, q)
        return await run_in_threadpool(delete_object, call)
    raise S3Error("NotImplemented", f"{method} on an object is not implemented", 501)


def list_buckets(call: Call) -> Response:
    """The names the caller may read (at most MAX_BUCKETS), in name order."""
    engine = call.gateway.state.engine
    top = root("ListAllMyBucketsResult")
    owner = element(top, "Owner")
    element(owner, "ID", call.user.name)
    element(owner, "DisplayName", call.user.name)
    buckets = element(top, "Buckets")
    after, shown = "", 0
    while shown < MAX_BUCKETS:
        page = catalog.list_names(engine, after=after, limit=1000)
        if not page:
            break
        readable = readable_names(engine, call.user, [r.name for r in page])
        for r in page:
            # A name in a project (`lab/run42`) cannot be a bucket: S3
            # bucket names hold no '/' (docs/s3-gateway.md).
            if r.name in readable and "/" not in r.name and shown < MAX_BUCKETS:
                b = element(buckets, "Bucket")
                element(b, "Name", r.name)
                element(b, "CreationDate", iso_time(r.updated_at))
                shown += 1
        after = page[-1].name
    return xml_response(top)


def _max_keys(text: str | None) -> int:
    if text is None:
        return MAX_KEYS
    # ASCII digits only: str.isdigit takes "²", which int() refuses.
    if not (text.isascii() and text.isdigit()):
        raise S3Error("InvalidArgument", "max-keys must be a whole number", 400)
    return min(int(text), MAX_KEYS)


def list_objects(call: Call, bucket: Bucket) -> Response:
    """ListObjectsV2 (``list-type=2``) or ListObjects (v1, with ``marker``)."""
    q = call.query
    v2 = q.get("list-type") == "2"
    prefix, delimiter = q.get("prefix", ""), q.get("delimiter", "")
    max_keys = _max_keys(q.get("max-keys"))
    url = q.get("encoding-type") == "url"
    if q.get("encoding-type") not in (None, "url"):
        raise S3Error("InvalidArgument", "encoding-type must be url", 400)
    contents = call.contents(bucket.pdh)
    if v2:
        least = start_key(q.get("continuation-token"), q.get("start-after", ""))
    else:
        least = start_key(None, q.get("marker", ""))
    page = list_page(contents, prefix, delimiter, least, max_keys)

    def shown(text: str) -> str:
        return quote(text, safe="/") if url else text

    top = root("ListBucketResult")
    element(top, "Name", call.bucket)
    element(top, "Prefix", shown(prefix))
    if delimiter:
        element(top, "Delimiter", shown(delimiter))
    element(top, "MaxKeys", max_keys)
    if url:
        element(top, "EncodingType", "url")
    element(top, "IsTruncated", "true" if page.truncated else "false")
    if v2:
        element(top, "KeyCount", len(page.keys) + len(page.prefixes))
        if "continuation-token" in q:
            element(top, "ContinuationToken", q["continuation-token"])
        if "start-after" in q:
            element(top, "StartAfter", shown(q["start-after"]))
        if page.next_token:
            element(top, "NextContinuationToken", page.next_token)
    else:
        element(top, "Marker", shown(q.get("marker", "")))
        if page.truncated and page.next_marker is not None:
            element(top, "NextMarker", shown(page.next_marker))
    modified = iso_time(bucket.modified)
    for key in page.keys:
        entry = contents.entry(key)
        assert entry is not None
        item = element(top, "Contents")
        element(item, "Key", shown(key))
        element(item, "LastModified", modified)
        element(item, "ETag", etag_of(contents, entry))
        element(item, "Size", entry.size)
        element(item, "StorageClass", "STANDARD")
    for common in page.prefixes:
        element(element(top, "CommonPrefixes"), "Prefix", shown(common))
    return xml_response(top)


def _since(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError):
        return None  # a date that does not parse is ignored, as HTTP says


def check_conditions(call: Call, etag: str, modified: float) -> Response | None:
    """If-Match, If-Unmodified-Since (412), If-None-Match, If-Modified-Since
    (304), in the order HTTP gives them; None when the request goes on."""
    h = call.request.headers
    if "if-match" in h:
        if not etag_matches(h["if-match"], etag):
            raise S3Error("PreconditionFailed", "At least one of the preconditions failed", 412)
    else:
        since = _since(h.get("if-unmodified-since"))
        if since is not None and int(modified) > since:
            raise S3Error("PreconditionFailed", "At least one of the preconditions failed", 412)
    headers = {"ETag": etag, "Last-Modified": http_time(modified)}
    if "if-none-match" in h:
        if etag_matches(h["if-none-match"], etag):
            return Response(status_code=304, headers=headers)
    else:
        since = _since(h.get("if-modified-since"))
        if since is not None and int(modified) <= since:
            return Response(status_code=304, headers=headers)
    return None


def _range(header: str | None, size: int) -> tuple[int, int] | None:
    """The bytes asked for (first, last inclusive); None: the whole object.
    InvalidRange (416) for a range with no byte inside the object."""
    if not header:
        return None
    m = _RANGE.fullmatch(header.strip())
    if m is None or (not m.group(1) and not m.group(2)):
        return None  # several ranges, or not one: S3 sends the whole object
    unsatisfiable = S3Error(
        "InvalidRange", "The requested range is not satisfiable", 416, ActualObjectSize=str(size)
    )
    if not m.group(1):
        n = int(m.group(2))
        if n == 0 or size == 0:
            raise unsatisfiable
        return max(0, size - n), size - 1
    first = int(m.group(1))
    last = int(m.group(2)) if m.group(2) else size - 1
    if first >= size:
        raise unsatisfiable
    if last < first:
        return None
    return first, min(last, size - 1)


def get_object(call: Call) -> Response:
    bucket = call.resolve()
    contents = call.contents(bucket.pdh)
    entry = contents.entry(call.key)
    if entry is None:
        raise S3Error("NoSuchKey", "The specified key does not exist.", 404, Key=call.key)
    etag = etag_of(contents, entry)
    modified = bucket.modified
    early = check_conditions(call, etag, modified)
    if early is not None:
        return early
    span = _range(call.request.headers.get("range"), entry.size)
    first, last = span if span is not None else (0, entry.size - 1)
    headers = {
        "ETag": etag,
        "Last-Modified": http_time(modified),
        "Accept-Ranges": "bytes",
        "Content-Length": str(max(0, last - first + 1)),
    }
    if span is not None:
        headers["Content-Range"] = f"bytes {first}-{last}/{entry.size}"
    status = 206 if span is not None else 200
    if call.request.method == "HEAD":
        return Response(status_code=status, headers=headers, media_type="binary/octet-stream")
    # The servers read at most a second ago: one catalog read fewer a GET.
    store = call.gateway.state.keep(max_age=1.0)
    shared = call.gateway.blocks
    small = small_body(store, shared, entry, first, last) if entry.size else b""
    if small is not None:
        return Response(small, status, headers=headers, media_type="binary/octet-stream")
    body = object_body(store, bucket.pdh, entry, first, last)
    return StreamingResponse(body, status, headers=headers, media_type="binary/octet-stream")
