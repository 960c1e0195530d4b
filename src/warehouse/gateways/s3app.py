"""The S3 gateway in front of the controller's app: ``/s3/...`` is S3,
every other path the controller's (docs/s3-gateway.md).

It sits outside the controller's app, not inside it: S3 bodies are not the
API's (a 2 GB PutObject is streamed to blocks, not held to the API's body
limit), and S3 clients want S3's XML errors, never the API's JSON. It has
its own access log lines and body timeout all the same.
"""

from __future__ import annotations

import logging
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from warehouse import catalog
from warehouse.blocks.cache import BlockCache
from warehouse.catalog.s3credentials import s3_identity, s3_identity_and_name, s3_secret
from warehouse.errors import ForbiddenError, NotFoundError, UsageError, WarehouseError
from warehouse.gateways import s3ops
from warehouse.gateways.s3call import Call
from warehouse.gateways.s3objects import ContentsCache, is_pdh_bucket
from warehouse.gateways.s3read import SHARED_BLOCKS_BYTES
from warehouse.gateways.s3sigv4 import SigError, check, parse
from warehouse.gateways.s3uploads import Uploads
from warehouse.gateways.s3xml import S3Error, error_response
from warehouse.server.accesslog import AccessLog, note_user
from warehouse.server.bodytimeout import BodyTimeout
from warehouse.server.controller.state import ControllerState

__all__ = ["PREFIX", "S3Gateway", "with_s3"]

PREFIX = "/s3"

log = logging.getLogger("warehouse.s3")


class S3Gateway:
    """The S3 API over one controller's state."""

    def __init__(self, state: ControllerState) -> None:
        self.state = state
        self.cache = ContentsCache()
        self.blocks = BlockCache(SHARED_BLOCKS_BYTES)
        self.uploads = Uploads()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        path = scope["path"][len(PREFIX) :]
        bucket, _, key = path.lstrip("/").partition("/") if path.startswith("/") else ("", "", "")
        head = request.method == "HEAD"
        resource = "/" + bucket + ("/" + key if key else "")
        try:
            if request.method in ("GET", "HEAD"):
                # One hop to a worker for the whole of a read: the signature,
                # the catalog, and a small object's bytes (a hop per step was
                # much of a small GET's cost).
                response = await run_in_threadpool(self._read, request, bucket, key)
            else:
                user, payload, _ = await run_in_threadpool(self._caller, request)
                note_user(scope, user.name)
                call = Call(self, request, user, bucket, key, payload)
                response = await s3ops.dispatch(call)
        except SigError as e:
            response = error_response(S3Error(e.code, str(e), e.status), resource, head=head)
        except S3Error as e:
            response = error_response(e, resource, head=head)
        except NotFoundError as e:
            what = "NoSuchKey" if key else "NoSuchBucket"
            response = error_response(S3Error(what, str(e), 404), resource, head=head)
        except ForbiddenError as e:
            response = error_response(S3Error("AccessDenied", str(e), 403), resource, head=head)
        except UsageError as e:
            response = error_response(S3Error("InvalidArgument", str(e), 400), resource, head=head)
        except WarehouseError as e:
            log.error("%s %s: %s", request.method, resource, e)
            response = error_response(S3Error("InternalError", str(e), 500), resource, head=head)
        if response.status_code >= 300 and _has_body(request):
            # A body refused before it was read (maybe never sent, after an
            # Expect: 100-continue) must not be read as the next request.
            response.headers["connection"] = "close"
        await response(scope, receive, send)

    def _read(self, request: Request, bucket: str, key: str) -> Response:
        """A GET or HEAD answered on a worker thread."""
        # A name's record is read with the credential: one catalog read less.
        name = bucket if bucket and not is_pdh_bucket(bucket) else None
        user, payload, named = self._caller(request, name)
        note_user(request.scope, user.name)
        return s3ops.read(Call(self, request, user, bucket, key, payload, named))

    def _caller(
        self, request: Request, name: str | None = None
    ) -> tuple[catalog.User, str, tuple[catalog.NameRecord | None] | None]:
        """Who signed the request, and the payload hash it signed (blocks: on
        a worker); with ``name``, that name's record read at the same time."""
        headers = {k.lower(): v for k, v in request.headers.items()}
        raw_query = request.scope.get("query_string", b"").decode("latin-1")
        query = parse_qsl(raw_query, keep_blank_values=True)
        signed = parse(query, headers)
        if signed is None:
            raise S3Error("AccessDenied", "Anonymous access is not allowed: sign the request", 403)
        state = self.state
        named: tuple[catalog.NameRecord | None] | None = None
        if name is None:
            who = s3_identity(state.engine, signed.access_key_id)
        else:
            who, record = s3_identity_and_name(state.engine, signed.access_key_id, name)
            named = (record,)
        if who is None:
            raise S3Error(
                "InvalidAccessKeyId",
                "The AWS Access Key Id you provided does not exist in our records.",
                403,
            )
        secret = s3_secret(state.signing_key, who.access_key_id, who.salt)
        raw_path = request.scope.get("raw_path") or request.scope["path"].encode()
        payload = check(
            signed,
            secret,
            method=request.method,
            raw_path=raw_path.decode("latin-1"),
            raw_query=raw_query,
            headers=headers,
        )
        return catalog.User(who.user, who.admin), payload, named


def _has_body(request: Request) -> bool:
    h = request.headers
    return h.get("content-length", "0") not in ("", "0") or "transfer-encoding" in h


class _Split:
    """``/s3`` and below to the gateway, the rest to the controller's app."""

    def __init__(self, app: ASGIApp, gateway: ASGIApp) -> None:
        self.app = app
        self.gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope.get("path", "")
            if path == PREFIX or path.startswith(PREFIX + "/"):
                await self.gateway(scope, receive, send)
                return
        await self.app(scope, receive, send)


def with_s3(app: ASGIApp, state: ControllerState) -> ASGIApp:
    """The controller's ``app`` with the S3 gateway at ``/s3``."""
    gateway: ASGIApp = S3Gateway(state)
    gateway = BodyTimeout(gateway, idle=state.config.body_timeout)
    return _Split(app, AccessLog(gateway))
