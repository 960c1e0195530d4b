"""What the S3 gateway writes: an object's bytes as blocks, and a new
version of the bucket's collection with the object put or deleted, the
name moved by compare-and-swap (docs/s3-gateway.md)."""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from warehouse import catalog
from warehouse.blocks import MAX_BLOCK_SIZE
from warehouse.catalog.holdings import record_block_bytes
from warehouse.collection.records import store_manifest
from warehouse.errors import ConflictError, ForbiddenError
from warehouse.gateways.s3objects import Contents, ContentsCache
from warehouse.gateways.s3xml import S3Error
from warehouse.manifest import FileEntry, FilePiece, Manifest
from warehouse.permissions import Level
from warehouse.server.controller.access import hide_name
from warehouse.server.controller.quota import check_quota
from warehouse.server.controller.state import ControllerState

__all__ = ["BlockSink", "Written", "commit"]

# Moves of the name lost to another writer before the gateway gives up (503).
_TRIES = 8


@dataclass
class Written:
    """An object's bytes as stored: its pieces, size and digests."""

    pieces: tuple[FilePiece, ...]
    size: int
    md5: str
    sha256: str | None
    writes: list[tuple[str, int, bool]] = field(default_factory=list)


class BlockSink:
    """Cut a body into 64 MiB blocks and store each as it fills (the most
    held is one block), hashing the whole as it goes."""

    def __init__(self, state: ControllerState, *, sha256: bool) -> None:
        self.state = state
        self.buffer = bytearray()
        self.pieces: list[FilePiece] = []
        self.size = 0
        self.md5 = hashlib.md5()
        self.sha = hashlib.sha256() if sha256 else None
        self.writes: list[tuple[str, int, bool]] = []

    def full(self) -> bool:
        return len(self.buffer) >= MAX_BLOCK_SIZE

    def add(self, data: bytes) -> None:
        """Take ``data``; the caller stores what fills a block (``spill``) when ``full``."""
        self.buffer += data
        self.size += len(data)
        self.md5.update(data)
        if self.sha is not None:
            self.sha.update(data)

    def spill(self, *, last: bool = False) -> None:
        """Store every whole block held (and, ``last``, what is left)."""
        while len(self.buffer) >= MAX_BLOCK_SIZE or (last and self.buffer):
            chunk = bytes(self.buffer[:MAX_BLOCK_SIZE])
            del self.buffer[:MAX_BLOCK_SIZE]
            stored = self.state.keep().put(chunk)
            self.pieces.append(FilePiece(stored.locator, 0, len(chunk)))
            self.writes.append((stored.locator.md5, len(chunk), stored.new))

    def finish(self) -> Written:
        self.spill(last=True)
        self.state.keep().flush()
        sha = None if self.sha is None else self.sha.hexdigest()
        return Written(tuple(self.pieces), self.size, self.md5.hexdigest(), sha, self.writes)


def _conflicts(contents: Contents, key: str) -> str | None:
    """Why ``key`` cannot be a file beside the collection's files: one of
    its directories is a file, or it is a directory of files."""
    parts = key.split("/")
    for i in range(1, len(parts)):
        if contents.entry("/".join(parts[:i])) is not None:
            return f"{'/'.join(parts[:i])!r} is a file of the collection"
    below = key + "/"
    at = bisect.bisect_left(contents.keys, below)
    if at < len(contents.keys) and contents.keys[at].startswith(below):
        return f"{key!r} is a directory of the collection"
    return None


def commit(
    state: ControllerState,
    cache: ContentsCache,
    user: catalog.User,
    bucket: str,
    key: str,
    written: Written | None,
    *,
    precondition: Callable[[Contents], None] | None = None,
    md5: str | None = None,
) -> str:
    """Put (``written``) or delete (None) ``key`` in a new version of the
    collection the name ``bucket`` holds and move the name to it, again on
    the newest version while others move it meanwhile. ``precondition``
    is checked on each version (If-Match, If-None-Match). Returns the new PDH."""
    engine = state.engine
    for _ in range(_TRIES):
        level = hide_name(engine, user, bucket)
        record = catalog.get_name(engine, bucket)  # NotFoundError: the app's NoSuchBucket
        contents = cache.whole(state, record.pdh, user.name)
        if precondition is not None:
            precondition(contents)
        files = dict(contents.files)
        if written is None:
            if files.pop(key, None) is None:
                return record.pdh  # S3 deletes what is not there without an error
        else:
            why = _conflicts(contents, key)
            if why is not None:
                raise S3Error("InvalidArgument", f"cannot put {key!r} here: {why}", 400)
            files[key] = FileEntry(key, written.size, written.pieces)
        manifest = Manifest.from_files(files.values(), _kept_dirs(contents.manifest, key))
        listing = None
        if contents.md5s and all(p in contents.md5s for p in contents.files):
            listing = {p: contents.md5s[p] for p in files if p in contents.md5s}
            if written is not None:
                if md5 is None:
                    listing = None  # a multipart object's MD5 is not known
                else:
                    listing[key] = md5
        block_bytes = sum(loc.size for loc in manifest.blocks())
        check_quota(state, user, manifest.pdh, max(manifest.size, block_bytes))
        store_manifest(state.keep(), engine, manifest, user.name, listing)
        record_block_bytes(engine, manifest.pdh, block_bytes)
        if written is not None and written.writes:
            catalog.record_block_writes(engine, user.name, written.writes)
        try:
            catalog.set_name(
                engine,
                bucket,
                manifest.pdh,
                expect=record.pdh,
                user=user.name,
                admin=user.admin or level >= Level.WRITE,
            )
        except ConflictError:
            continue  # moved meanwhile: put the key into its newest version
        except ForbiddenError:
            raise S3Error("AccessDenied", f"you may not change the name {bucket!r}", 403) from None
        return manifest.pdh
    raise S3Error("SlowDown", f"the name {bucket!r} kept moving under this write: try again", 503)


def _kept_dirs(old: Manifest, key: str) -> list[str]:
    """The collection's empty directories, but those the new key now fills."""
    parts = key.split("/")
    filled = {"/".join(parts[:i]) for i in range(1, len(parts))}
    return [d for d in old.empty_directories() if d not in filled]
