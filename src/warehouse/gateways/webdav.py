"""WebDAV, read-only, at ``/webdav`` on ``wh serve``: the mount's tree
(``by_id/<PDH>/…``, ``by_name/<name>/…``) for desktop clients and rclone
(docs/webdav.md).

The protocol is wsgidav's (a WSGI library), run in the server's process
through a2wsgi's WSGI adapter beside the S3 gateway, outside the
controller's app (its errors are WebDAV's, not the API's JSON). What it
serves comes from ``mount.Tree`` over one user's view of the catalog
(``webdav_source.UserView``): listings from manifests' outlines without
reading a block, file bytes through the controller's block client (each
block verified), Range answered by wsgidav over a seekable reader. Every
request carries the user's token (HTTP Basic with the token as password,
or ``Authorization: Bearer``); private mode applies as through the API.
Methods that would write are refused (405): the provider is read-only.
A directory's listing (PROPFIND, Depth 1) is written as it is listed, a
batch of members at a time (``webdav_propfind.py``), never built whole.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import dataclasses
import hashlib
import io
import logging
import mimetypes
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from a2wsgi import WSGIMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send
from wsgidav.dav_provider import DAVCollection, DAVNonCollection, DAVProvider
from wsgidav.error_printer import ErrorPrinter
from wsgidav.request_resolver import RequestResolver
from wsgidav.wsgidav_app import WsgiDAVApp

from warehouse import catalog
from warehouse.blocks.store import BlockStore
from warehouse.errors import NotFoundError, UsageError, WarehouseError
from warehouse.gateways.webdav_propfind import streamed_propfind
from warehouse.gateways.webdav_source import UserView
from warehouse.manifest import FileEntry
from warehouse.mount import Tree
from warehouse.mount._tree import Listing, Node
from warehouse.server.accesslog import AccessLog, note_user
from warehouse.server.controller.auth import is_job_token
from warehouse.server.controller.state import ControllerState

__all__ = ["PREFIX", "with_webdav"]

PREFIX = "/webdav"
# Bytes wsgidav reads from a file at a time for a GET (its default, 8 KiB,
# costs a Python call each).
_BLOCK = 1 << 20
# Pieces after the one read looked through for the next block to fetch.
_LOOK = 64
# Users whose trees (their collections' outlines and names) are kept.
_TREES = 32
# Threads answering WebDAV requests at once (each may wait on a block).
_WORKERS = 8
_REALM = "warehouse"

log = logging.getLogger("warehouse.webdav")

Environ = dict[str, Any]
StartResponse = Callable[..., Any]


class _Reader(io.RawIOBase):
    """A file's bytes by offset, each block fetched (verified) when first needed."""

    def __init__(self, entry: FileEntry, store: BlockStore, pool: ThreadPoolExecutor) -> None:
        self.entry = entry
        self.store = store
        self.pool = pool
        # The next block of the file, fetched while this one is sent.
        self.ahead: tuple[str, Future[bytes | memoryview]] | None = None
        self.starts: list[int] = []
        pos = 0
        for piece in entry.pieces:
            self.starts.append(pos)
            pos += piece.length
        self.pos = 0
        self.current: tuple[str, bytes | memoryview] | None = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.entry.size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self.pos = base + offset
        return self.pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self.pos >= self.entry.size or not view:
            return 0
        i = bisect.bisect_right(self.starts, self.pos) - 1
        piece = self.entry.pieces[i]
        lo = self.pos - self.starts[i]
        n = min(piece.length - lo, len(view))
        key = piece.locator.key
        if self.current is None or self.current[0] != key:
            self.current = (key, self._fetch(i))
        block = self.current[1]
        view[:n] = block[piece.offset + lo : piece.offset + lo + n]
        self.pos += n
        return n

    def _fetch(self, i: int) -> bytes | memoryview:
        """Block of piece ``i`` (verified), and the next one asked for ahead."""
        locator = self.entry.pieces[i].locator
        ahead, self.ahead = self.ahead, None
        if ahead is not None and ahead[0] == locator.key:
            data = ahead[1].result()
        else:
            if ahead is not None:
                ahead[1].cancel()
            data = self.store.get(locator)
        for piece in self.entry.pieces[i + 1 : i + 1 + _LOOK]:
            if piece.locator.key != locator.key:
                self.ahead = (piece.locator.key, self.pool.submit(self.store.get, piece.locator))
                break
        return data

    def close(self) -> None:
        if self.ahead is not None:
            self.ahead[1].cancel()
            self.ahead = None
        super().close()


def _etag(node: Node) -> str:
    # A PDH's contents never change: its path inside names the bytes.
    return hashlib.md5(f"{node.pdh}/{node.path}".encode()).hexdigest()


class _Dir(DAVCollection):  # type: ignore[misc]  # wsgidav is untyped
    def __init__(self, path: str, environ: Environ, tree: Tree, node: Node, started: float) -> None:
        super().__init__(path, environ)
        self.tree = tree
        self.node = node
        self.started = started

    def _child(self, name: str, node: Node, entry: FileEntry | None) -> Any:
        path = self.path.rstrip("/") + "/" + name
        if entry is None:
            return _Dir(path, self.environ, self.tree, node, self.started)
        return _File(path, self.environ, self.tree, node, entry, self.started)

    def get_member_names(self) -> list[str]:
        return [name for name, _, _ in _listed(self.tree, self.node)]

    def get_member(self, name: str) -> Any:
        try:
            node, entry = self.tree.lookup_in(self.node, name)
        except (NotFoundError, UsageError):
            return None
        return self._child(name, node, entry)

    def get_member_list(self) -> list[Any]:
        return [self._child(n, node, e) for n, node, e in _listed(self.tree, self.node)]

    def member_batches(self, count: int) -> Iterator[list[Any]]:
        """The members, ``count`` at a time (a PROPFIND's listing): a large
        directory's files are read a page at a time, never all at once."""
        if self.node.kind == "by_id":
            return  # as _listed
        listing = Listing(self.tree, self.node, numbered=False)
        offset = 0
        while batch := listing.entries(offset, count):
            offset = batch[-1][4]
            yield [self._child(name, node, entry) for name, _, node, entry, _ in batch]

    def get_creation_date(self) -> float:
        return self.started

    def get_last_modified(self) -> float:
        return self.started

    def get_etag(self) -> str | None:
        return None

    def support_etag(self) -> bool:
        return False


def _listed(tree: Tree, node: Node) -> list[tuple[str, Node, FileEntry | None]]:
    # by_id lists nothing (a PDH is asked for, never guessed), as on the mount.
    return tree.children_of(node) if node.kind != "by_id" else []


class _File(DAVNonCollection):  # type: ignore[misc]
    def __init__(
        self,
        path: str,
        environ: Environ,
        tree: Tree,
        node: Node,
        entry: FileEntry,
        started: float,
    ) -> None:
        super().__init__(path, environ)
        self.tree = tree
        self.node = node
        self.entry = entry
        self.started = started
        self.pool: ThreadPoolExecutor = environ["warehouse.pool"]

    def get_content_length(self) -> int:
        return self.entry.size

    def get_content_type(self) -> str:
        return mimetypes.guess_type(self.entry.path)[0] or "application/octet-stream"

    def get_content(self) -> io.BufferedReader:
        reader = _Reader(self.entry, self.tree.warehouse.store, self.pool)
        return io.BufferedReader(reader, _BLOCK)

    def get_creation_date(self) -> float:
        return self.started

    def get_last_modified(self) -> float:
        return self.started

    def get_etag(self) -> str:
        return _etag(self.node)

    def support_etag(self) -> bool:
        return True

    def support_ranges(self) -> bool:
        return True


class _Provider(DAVProvider):  # type: ignore[misc]
    """The tree of the user the request was authenticated as (``_Authenticated``)."""

    def __init__(self, state: ControllerState) -> None:
        super().__init__()
        self.state = state
        self.started = time.time()
        self._lock = threading.Lock()
        self._trees: OrderedDict[tuple[str, bool], Tree] = OrderedDict()
        # Blocks fetched ahead of the ones GETs send (one a GET).
        self.pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="wh-webdav-ahead")

    def is_readonly(self) -> bool:
        return True

    def custom_request_handler(
        self, environ: Environ, start_response: StartResponse, default: Any
    ) -> Iterable[bytes]:
        # A directory's Depth 1 listing is written as it is listed, not
        # built whole (webdav_propfind.py). Depth was made lower case.
        if environ["REQUEST_METHOD"] == "PROPFIND" and environ.get("HTTP_DEPTH") == "1":
            found = self.get_resource_inst(environ["PATH_INFO"], environ)
            if isinstance(found, _Dir):
                return streamed_propfind(found, environ, start_response)
        return default(environ, start_response)  # type: ignore[no-any-return]

    def _tree(self, user: catalog.User) -> Tree:
        key = (user.name, user.admin)
        with self._lock:
            tree = self._trees.get(key)
            if tree is None:
                tree = self._trees[key] = Tree(UserView(self.state, user))
            self._trees.move_to_end(key)
            while len(self._trees) > _TREES:
                self._trees.popitem(last=False)
            return tree

    def get_resource_inst(self, path: str, environ: Environ) -> Any:
        user: catalog.User = environ["warehouse.user"]
        environ["warehouse.pool"] = self.pool
        tree = self._tree(user)
        parts = [p for p in path.split("/") if p]
        try:
            node, entry = tree.walk(parts)
            if node.pdh:
                # Checked on every request, not only when its outline was
                # made: a collection unshared since is not served again.
                view = tree.warehouse
                assert isinstance(view, UserView)
                view.require(node.pdh)
        except (NotFoundError, UsageError):
            return None
        except WarehouseError as e:
            log.warning("webdav %s: %s", path, e)
            raise
        if entry is None:
            return _Dir(path, environ, tree, node, self.started)
        return _File(path, environ, tree, node, entry, self.started)


def _token(environ: Environ) -> str | None:
    """The token of an ``Authorization`` header: Bearer, or Basic's password."""
    scheme, _, value = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        return value or None
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2] or None
    return None


class _Authenticated:
    """A WSGI app: the request's user from its token, or 401."""

    def __init__(
        self, app: Callable[[Environ, StartResponse], Iterable[bytes]], state: ControllerState
    ) -> None:
        self.app = app
        self.state = state

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        token = _token(environ)
        user = catalog.user_for_token(self.state.engine, token) if token else None
        if user is None:
            body = b"a token is needed: HTTP Basic with the token as password, or Bearer\n"
            start_response(
                "401 Unauthorized",
                [
                    ("WWW-Authenticate", f'Basic realm="{_REALM}", charset="UTF-8"'),
                    ("Content-Type", "text/plain; charset=utf-8"),
                    ("Content-Length", str(len(body))),
                ],
            )
            return [body]
        method = environ.get("REQUEST_METHOD", "")
        if method == "PROPFIND" and environ.get("HTTP_DEPTH", "infinity").lower() == "infinity":
            # Everything below a folder at once (a missing Depth means so):
            # a million files in one answer. RFC 4918 lets a server refuse it.
            body = (
                b'<?xml version="1.0" encoding="utf-8"?>\n<D:error xmlns:D="DAV:">'
                b"<D:propfind-finite-depth/></D:error>\n"
            )
            start_response(
                "403 Forbidden",
                [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))],
            )
            return [body]
        if user.admin and is_job_token(self.state.engine, token or ""):
            # As through the API: a step's token is never an admin's.
            user = dataclasses.replace(user, admin=False)
        scope = environ.get("asgi.scope")
        if isinstance(scope, dict):
            note_user(scope, user.name)
        environ["warehouse.user"] = user
        environ["wsgidav.auth.user_name"] = user.name
        return self.app(environ, start_response)


def _wsgidav(state: ControllerState) -> WsgiDAVApp:
    config = {
        "provider_mapping": {"/": _Provider(state)},
        # Where it is served (SCRIPT_NAME, _Split): its hrefs begin with it.
        "mount_path": PREFIX,
        # Authentication is ours (_Authenticated), before wsgidav sees the request.
        "middleware_stack": [ErrorPrinter, RequestResolver],
        "http_authenticator": {"domain_controller": None},
        "simple_dc": {"user_mapping": {"*": True}},
        "lock_storage": None,
        "property_manager": None,
        "block_size": _BLOCK,
        "verbose": 1,
        "logging": {"enable": False},
        "suppress_version_info": True,
    }
    return WsgiDAVApp(config)


class _Split:
    """``/webdav`` and below to the gateway, the rest to ``app``."""

    def __init__(self, app: ASGIApp, gateway: ASGIApp) -> None:
        self.app = app
        self.gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope.get("path", "")
            if path == PREFIX or path.startswith(PREFIX + "/"):
                # wsgidav names its hrefs below SCRIPT_NAME, the mount point.
                rooted = {**scope, "root_path": scope.get("root_path", "") + PREFIX}
                await self.gateway(rooted, receive, send)
                return
        await self.app(scope, receive, send)


def with_webdav(app: ASGIApp, state: ControllerState) -> ASGIApp:
    """``app`` with read-only WebDAV at ``/webdav``."""
    wsgi = _Authenticated(_wsgidav(state), state)
    gateway: ASGIApp = WSGIMiddleware(wsgi, workers=_WORKERS)  # type: ignore[arg-type,assignment]
    return _Split(app, AccessLog(gateway))
