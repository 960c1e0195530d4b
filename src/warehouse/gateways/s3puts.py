"""The S3 gateway's writes of one object: PutObject, DeleteObject, and
CreateBucket (a new name holding an empty collection)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from warehouse import catalog
from warehouse.blocks import MAX_BLOCK_SIZE
from warehouse.collection.records import store_manifest
from warehouse.errors import ConflictError, UsageError
from warehouse.gateways.s3call import Call
from warehouse.gateways.s3chunked import ChunkedBody
from warehouse.gateways.s3objects import Bucket, Contents, etag_matches, etag_of
from warehouse.gateways.s3sigv4 import STREAMING_UNSIGNED_TRAILER, UNSIGNED
from warehouse.gateways.s3write import BlockSink, Written, commit
from warehouse.gateways.s3xml import S3Error
from warehouse.manifest import Manifest
from warehouse.permissions import Level

__all__ = [
    "MAX_OBJECT",
    "create_bucket",
    "delete_object",
    "held_body",
    "put_object",
    "receive_body",
    "writable",
]

# The largest object one PutObject (or one part) may carry: S3's own bound.
MAX_OBJECT = 5 * 1024**3


def writable(call: Call) -> Bucket:
    """The bucket, which must be a name: a PDH names fixed content."""
    bucket = call.resolve()
    if not bucket.is_name:
        raise S3Error(
            "AccessDenied", "a bucket named by a PDH is fixed content: put into a name", 403
        )
    return bucket


def _failed() -> S3Error:
    return S3Error("PreconditionFailed", "At least one of the preconditions failed", 412)


def put_precondition(call: Call) -> Callable[[Contents], None] | None:
    """If-None-Match (``*``: only a new key) and If-Match (only over that
    ETag) on a put, checked against each version the put is made on."""
    h = call.request.headers
    none_match, match = h.get("if-none-match"), h.get("if-match")
    if none_match is None and match is None:
        return None

    def check(contents: Contents) -> None:
        entry = contents.entry(call.key)
        etag = None if entry is None else etag_of(contents, entry)
        if none_match is not None and etag is not None and etag_matches(none_match, etag):
            raise _failed()
        if match is not None and (etag is None or not etag_matches(match, etag)):
            raise _failed()

    return check


async def receive_body(call: Call, limit: int) -> Written:
    """The request's body stored as blocks, checked against its length,
    its Content-MD5 and the SHA-256 it was signed with (or, aws-chunked,
    its trailing checksum)."""
    h = call.request.headers
    chunked = "aws-chunked" in h.get("content-encoding", "")
    if chunked != (call.payload == STREAMING_UNSIGNED_TRAILER):
        raise S3Error(
            "NotImplemented",
            f"aws-chunked bodies are taken with {STREAMING_UNSIGNED_TRAILER} only",
            501,
        )
    length = h.get("x-amz-decoded-content-length" if chunked else "content-length")
    if length is None:
        raise S3Error(
            "MissingContentLength", "You must provide the Content-Length HTTP header.", 411
        )
    if not (length.isascii() and length.isdigit()):  # int() refuses "²"
        raise S3Error("InvalidArgument", "Content-Length is not a number", 400)
    size = int(length)
    if size > limit:
        raise S3Error("EntityTooLarge", f"an object or part is at most {limit} bytes", 400)
    decoder = ChunkedBody(h.get("x-amz-trailer")) if chunked else None
    sink = BlockSink(
        call.gateway.state, sha256=call.payload not in (UNSIGNED, STREAMING_UNSIGNED_TRAILER)
    )
    try:
        async for chunk in call.request.stream():
            for data in decoder.feed(chunk) if decoder is not None else (chunk,):
                if sink.size + len(data) > size:
                    raise S3Error("IncompleteBody", "the body is longer than its length", 400)
                sink.add(data)
                if sink.full():
                    await run_in_threadpool(sink.spill)
    except ClientDisconnect:
        raise S3Error("IncompleteBody", "the body ended early", 400) from None
    if decoder is not None:
        decoder.finish()
    if sink.size != size:
        raise S3Error("IncompleteBody", "the body ended before its length", 400)
    written = await run_in_threadpool(sink.finish)
    if written.sha256 is not None and written.sha256 != call.payload:
        raise S3Error(
            "XAmzContentSHA256Mismatch",
            "The provided 'x-amz-content-sha256' header does not match what was computed.",
            400,
        )
    given = h.get("content-md5")
    if given is not None:
        try:
            want = base64.b64decode(given, validate=True).hex()
        except ValueError:
            want = ""
        if want != written.md5:
            raise S3Error(
                "BadDigest", "The Content-MD5 you specified did not match what we received.", 400
            )
    return written


async def held_body(call: Call, limit: int) -> Written:
    """``receive_body`` within the gateway's budget of bodies held at once
    (up to a block each): a request over it waits up to a few seconds,
    then is answered 503 SlowDown, which S3 clients retry."""
    announced = call.request.headers.get(
        "x-amz-decoded-content-length", call.request.headers.get("content-length", "")
    )
    digits = announced.isascii() and announced.isdigit()
    need = min(int(announced) if digits else MAX_BLOCK_SIZE, MAX_BLOCK_SIZE)
    budget = call.gateway.uploads.bodies
    for _ in range(50):
        if budget.take(need):
            break
        await asyncio.sleep(0.1)
    else:
        raise S3Error("SlowDown", "too many uploads at once: try again", 503)
    try:
        return await receive_body(call, limit)
    finally:
        budget.give(need)


async def put_object(call: Call) -> Response:
    await run_in_threadpool(writable, call)
    written = await held_body(call, MAX_OBJECT)
    state, cache = call.gateway.state, call.gateway.cache
    await run_in_threadpool(
        lambda: commit(
            state,
            cache,
            call.user,
            call.bucket,
            call.key,
            written,
            precondition=put_precondition(call),
            md5=written.md5,
        )
    )
    return Response(status_code=200, headers={"ETag": f'"{written.md5}"'})


def delete_object(call: Call) -> Response:
    writable(call)
    state, cache = call.gateway.state, call.gateway.cache
    commit(state, cache, call.user, call.bucket, call.key, None)
    return Response(status_code=204)


def create_bucket(call: Call) -> Response:
    """A new name holding an empty collection; a name that exists and the
    caller may write answers as made (as S3's us-east-1 does)."""
    state = call.gateway.state
    made = Response(status_code=200, headers={"Location": f"/{call.bucket}"})
    try:
        bucket: Bucket | None = call.resolve()
    except S3Error:
        bucket = None
    if bucket is not None:
        if bucket.is_name and bucket.level >= Level.WRITE:
            return made
        raise S3Error("BucketAlreadyExists", "The requested bucket name is not available.", 409)
    try:
        catalog.check_name(call.bucket)
    except UsageError:
        raise S3Error("InvalidBucketName", "The specified bucket is not valid.", 400) from None
    empty = Manifest(())
    store_manifest(state.keep(), state.engine, empty, call.user.name, {})
    try:
        catalog.set_name(
            state.engine, call.bucket, empty.pdh, expect=None, create=True, user=call.user.name
        )
    except ConflictError:
        # Taken meanwhile, or hidden from the caller: names are one namespace.
        raise S3Error(
            "BucketAlreadyExists", "The requested bucket name is not available.", 409
        ) from None
    return made
