"""The keep server's HTTP interface (DESIGN §4.2): ``create_app(config)``.

Handlers parse, ask ``rules`` what to do, and hand blocking disk work to
``storage`` in threads. A PUT body is never held whole: it is hashed and
written to a temporary file in ~1 MiB batches as it arrives, and becomes a
block only once its length and MD5 are right.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from warehouse.blocks.locator import EMPTY_MD5, MAX_BLOCK_SIZE, Locator, LocatorError
from warehouse.blocks.signing import Check, check_signature, sign
from warehouse.blocks.volume import LocalVolume
from warehouse.errors import CorruptDataError, NotFoundError, UsageError
from warehouse.remote.tls import client_context
from warehouse.server.accesslog import AccessLog, note_user
from warehouse.server.bodytimeout import BodyTimeout
from warehouse.server.keepd.auth import ControllerUnavailable, Principal, bearer_token
from warehouse.server.keepd.buffers import BufferPool
from warehouse.server.keepd.config import KeepConfig
from warehouse.server.keepd.metrics import CountingMiddleware, Metrics, render_prometheus
from warehouse.server.keepd.rules import (
    PullItem,
    Refused,
    TrashItem,
    check_prefix,
    parse_pull_list,
    parse_put_target,
    parse_trash_list,
    put_length,
    read_refusal,
)
from warehouse.server.keepd.storage import VolumeSet
from warehouse.server.keepd.usagereport import UsageReporter
from warehouse.server.keepd.work import WorkQueue, clean_volumes, pull_worker, trash_worker

__all__ = ["KeepServer", "create_app"]

log = logging.getLogger("warehouse.keepd")
BATCH = 1 << 20  # bytes handed to a writer thread at a time
POOLED_READ = 4 << 20  # blocks this large are mapped, or read into a reused buffer
Handler = Callable[[Request], Awaitable[Response]]


class _BlockResponse(Response):
    """A verified block, sent in one piece from its mapped pages or the
    buffer it was read into.

    Not ``Response(bytes(data))``: that copies 64 MiB per read. uvicorn's
    transports take any bytes-like body and keep a view (uvloop) or a copy
    (asyncio) of what the socket did not take at once; a mapping lasts while
    a view of it does, and the buffer pool reuses a buffer only once no view
    of it is left.
    """

    media_type = "application/octet-stream"

    def __init__(self, data: memoryview) -> None:
        super().__init__(headers={"content-length": str(len(data))})
        self.data = data

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        await send({"type": "http.response.body", "body": self.data})
        with contextlib.suppress(BufferError):  # a view still sending keeps it
            self.data.release()


def _answering(handler: Handler) -> Handler:
    """Turn refusals into plain-text answers with their status."""

    async def run(request: Request) -> Response:
        try:
            return await handler(request)
        except Refused as e:
            status, message = e.status, e.message
        except ControllerUnavailable as e:
            status, message = 503, str(e)
        # uvicorn discards an unread body of known length and keeps the
        # connection; a body too long or of unknown length is not worth that.
        headers = {"Connection": "close"} if status in (411, 413) else None
        return PlainTextResponse(message + "\n", status, headers=headers)

    return run


class KeepServer:
    """State shared by the handlers of one keep server."""

    def __init__(self, config: KeepConfig) -> None:
        self.config = config
        self.metrics = Metrics()
        self.volumes = VolumeSet(config.volumes, self.metrics, config.reserve_bytes)
        self.buffers = BufferPool(MAX_BLOCK_SIZE)
        self.trash_queue: WorkQueue[TrashItem] = WorkQueue()
        self.pull_queue: WorkQueue[PullItem] = WorkQueue()

    async def _caller(self, request: Request) -> tuple[str, Principal]:
        token = bearer_token(request.headers.get("authorization"))
        if token is None:
            raise Refused(401, "no token: send Authorization: Bearer <token>")
        principal = await self.config.tokens.check(token)
        if principal is None:
            raise Refused(401, "unknown token")
        note_user(request.scope, principal.user)
        return token, principal

    async def _admin(self, request: Request) -> None:
        _, principal = await self._caller(request)
        if not principal.admin:
            raise Refused(403, "this needs an admin token")

    async def block(self, request: Request) -> Response:
        target = request.path_params["locator"]
        if request.method == "PUT":
            return await self._put(request, target)
        try:
            loc = Locator.parse(target)
        except LocatorError as e:
            raise Refused(400, str(e)) from None
        if loc.is_empty:  # never stored, always readable, reveals nothing
            return Response(b"", media_type="application/octet-stream")
        await self._check_read(request, loc)
        if request.method == "HEAD":
            st = await run_in_threadpool(self.volumes.stat, loc)
            if st is None:
                raise Refused(404, f"block {loc.key} is not here")
            return Response(b"", headers={"Content-Length": str(st.size)})
        # Large blocks are mapped, or read into a pooled 64 MiB buffer where
        # mapping cannot be made safe; small ones get their own buffer.
        large = loc.size >= POOLED_READ
        buf = self.buffers.take() if large and not LocalVolume.can_map else None
        try:
            data = await run_in_threadpool(
                functools.partial(self.volumes.read, loc, mapped=large, buf=buf)
            )
        except NotFoundError as e:
            raise Refused(404, str(e)) from None
        except CorruptDataError as e:
            raise Refused(502, str(e)) from None
        except OSError as e:
            raise Refused(503, f"cannot read block {loc.key}: {e.strerror or e}") from None
        finally:
            if buf is not None:
                self.buffers.give(buf)  # taken again only once the bytes are sent
        return _BlockResponse(data)

    async def _check_read(self, request: Request, loc: Locator) -> None:
        token = bearer_token(request.headers.get("authorization"))
        if token is None:
            raise Refused(401, "no token: send Authorization: Bearer <token>")
        c = self.config
        check = check_signature(loc, token, c.signing_key, c.signature_ttl)
        # A good signature proves the controller gave this token the block:
        # no need to ask who the token is.
        readable = check in (Check.OK, Check.LEGACY)
        principal = None if readable else await c.tokens.check(token)
        if principal is not None:
            note_user(request.scope, principal.user)
        refusal = read_refusal(check, principal)
        if refusal is not None:
            raise refusal

    async def _put(self, request: Request, target: str) -> Response:
        md5, declared = parse_put_target(target)
        token, _ = await self._caller(request)
        length = put_length(request.headers.get("content-length"), declared)
        if md5 == EMPTY_MD5 and length == 0:
            return self._stored(md5, 0, token, False)
        try:
            writer = await run_in_threadpool(self.volumes.open_write, md5, length)
        except OSError as e:
            raise self._write_failure(md5, e) from None
        received = 0
        # The pieces as they came, written together (no copy to join them).
        batch: list[bytes] = []
        batched = 0
        try:
            async for chunk in request.stream():
                received += len(chunk)
                if received > length:
                    raise Refused(413, f"the body is longer than its Content-Length {length}")
                batch.append(chunk)
                batched += len(chunk)
                if batched >= BATCH:
                    await run_in_threadpool(writer.write_pieces, batch)
                    batch, batched = [], 0
            if received != length:
                raise Refused(400, f"the body has {received} bytes, Content-Length said {length}")
            await run_in_threadpool(writer.write_pieces, batch)
            new = await run_in_threadpool(writer.commit)
        except UsageError as e:  # the MD5 did not match
            raise Refused(400, str(e)) from None
        except ClientDisconnect:
            log.info("PUT %s: the client hung up after %d of %d bytes", md5, received, length)
            return Response(status_code=400)  # nobody is listening
        except OSError as e:
            raise self._write_failure(md5, e) from None
        finally:
            writer.abort()  # no-op after a commit; otherwise nothing is left behind
            self.metrics.add(bytes_in=received)
        if new:
            self.metrics.add(blocks_stored=1)
        return self._stored(md5, length, token, new)

    def _stored(self, md5: str, size: int, token: str, new: bool) -> Response:
        c = self.config
        signed = sign(Locator(md5, size), token, c.signing_key, c.signature_ttl)
        # X-Keep-New tells the client (and so the accounting) whether bytes were written.
        headers = {"X-Keep-Replicas-Stored": "1", "X-Keep-New": "1" if new else "0"}
        return PlainTextResponse(str(signed), headers=headers)

    def _write_failure(self, md5: str, e: OSError) -> Refused:
        log.error("PUT %s: write failed: %s", md5, e)
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return Refused(507, "the volume is full")
        return Refused(503, f"cannot write the block: {e.strerror or e}")

    async def index(self, request: Request) -> Response:
        await self._admin(request)
        prefix = check_prefix(request.path_params.get("prefix", ""))
        text = await run_in_threadpool(self.volumes.index, prefix)
        return PlainTextResponse(text)

    async def _json(self, request: Request) -> object:
        try:
            return json.loads(await request.body())
        except ValueError:
            raise Refused(400, "the body is not JSON") from None

    async def put_trash(self, request: Request) -> Response:
        await self._admin(request)
        items = parse_trash_list(await self._json(request))
        self.trash_queue.replace(items)
        return PlainTextResponse(f"{len(items)} blocks to trash\n")

    async def put_pull(self, request: Request) -> Response:
        await self._admin(request)
        items = parse_pull_list(await self._json(request))
        self.pull_queue.replace(items)
        return PlainTextResponse(f"{len(items)} blocks to pull\n")

    async def untrash(self, request: Request) -> Response:
        await self._admin(request)
        md5, _ = parse_put_target(request.path_params["md5"])
        if not await run_in_threadpool(self.volumes.untrash, md5):
            raise Refused(404, f"block {md5} is not in the trash here")
        return PlainTextResponse("untrashed\n")

    async def status(self, request: Request) -> Response:
        await self._admin(request)
        gauges = await run_in_threadpool(self.volumes.gauges)
        return JSONResponse(
            {
                "version": self.config.version,
                "volumes": [
                    {
                        "path": g.path,
                        "free_bytes": g.free_bytes,
                        "total_bytes": g.total_bytes,
                        "device": g.device,
                        # As of the last whole index (GC's): counting now
                        # would mean listing 4,096 directories or a bucket.
                        "block_count": g.stored_blocks,
                        "stored_bytes": g.stored_bytes,
                        "requests": dict(g.requests),
                    }
                    for g in gauges
                ],
                "requests": self.metrics.requests_by_method(),
                "queues": {"trash": len(self.trash_queue), "pull": len(self.pull_queue)},
            }
        )

    async def prometheus(self, request: Request) -> Response:
        gauges = await run_in_threadpool(self.volumes.gauges)
        return PlainTextResponse(
            render_prometheus(self.metrics, gauges), media_type="text/plain; version=0.0.4"
        )

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        c = self.config
        client = httpx.AsyncClient(timeout=c.pull_timeout, verify=client_context())
        tasks = [
            asyncio.create_task(trash_worker(self.trash_queue, self.volumes)),
            asyncio.create_task(
                clean_volumes(self.volumes, c.clean_interval, c.stale_temporary_age)
            ),
        ]
        tasks += [
            asyncio.create_task(pull_worker(self.pull_queue, self.volumes, client, c.service_token))
            for _ in range(c.pull_workers)
        ]
        reporter = None
        if c.controller and c.service_token:
            reporter = UsageReporter(self.volumes, client, c.controller, c.service_token)
            reporting = asyncio.create_task(reporter.run(c.usage_interval))
        try:
            yield
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if reporter is not None:  # a last report: what was counted since the one before
                reporter.stop()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(reporting, 30)
            await client.aclose()
            aclose = getattr(c.tokens, "aclose", None)
            if aclose is not None:
                await aclose()


def create_app(config: KeepConfig) -> Starlette:
    """The keep server as an ASGI app; its ``state.keep`` is the ``KeepServer``."""
    keep = KeepServer(config)
    routes = [
        Route("/index", _answering(keep.index), methods=["GET"]),
        Route("/index/{prefix}", _answering(keep.index), methods=["GET"]),
        Route("/trash", _answering(keep.put_trash), methods=["PUT"]),
        Route("/pull", _answering(keep.put_pull), methods=["PUT"]),
        Route("/untrash/{md5}", _answering(keep.untrash), methods=["PUT"]),
        Route("/status", _answering(keep.status), methods=["GET"]),
        Route("/metrics", _answering(keep.prometheus), methods=["GET"]),
        Route("/{locator}", _answering(keep.block), methods=["GET", "HEAD", "PUT"]),
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(AccessLog),
            Middleware(BodyTimeout, idle=config.body_timeout),
            Middleware(CountingMiddleware, metrics=keep.metrics),
        ],
        lifespan=keep.lifespan,
    )
    app.state.keep = keep
    return app
