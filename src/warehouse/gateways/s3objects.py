"""What the S3 gateway reads: buckets (a name or a PDH), their keys (the
collection's file paths), listings and object bytes (docs/s3-gateway.md).

Permissions are the API's (docs/permissions.md): a bucket the caller may
not read answers NoSuchBucket, as one that does not exist.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from warehouse import catalog
from warehouse.catalog.records import collection_summary
from warehouse.collection.listings import parse_listing
from warehouse.collection.records import listing_of, load_manifest, load_stored_text
from warehouse.errors import CorruptDataError, NotFoundError, UsageError
from warehouse.gateways.s3outline import OutlinedContents
from warehouse.gateways.s3xml import S3Error
from warehouse.manifest import FileEntry, Manifest
from warehouse.permissions import Level
from warehouse.server.controller.access import hide_name, require_collection_read
from warehouse.server.controller.state import ControllerState

__all__ = [
    "MAX_KEYS",
    "MAX_KEY_BYTES",
    "Bucket",
    "Contents",
    "ListPage",
    "Listable",
    "bucket_pdh_name",
    "check_key",
    "etag_matches",
    "etag_of",
    "is_pdh_bucket",
    "list_page",
    "resolve_bucket",
    "start_key",
]

# S3's own bounds: a key of at most 1,024 bytes, a page of at most 1,000.
MAX_KEY_BYTES = 1024
MAX_KEYS = 1000
# Files past which a collection is listed from its outline, not parsed whole.
OUTLINED_FROM = 100_000
# A PDH as a bucket: "md5+size", or "md5-size" (SDKs refuse a "+" in a bucket name).
_PDH_BUCKET = re.compile(r"([0-9a-f]{32})[+-]((?:0|[1-9][0-9]{0,14}))")
# The last code point: no string of one more follows a string ending in it.
_LAST = "\U0010ffff"


def bucket_pdh_name(pdh: str) -> str:
    """The bucket name a PDH is listed under (``-`` for ``+``)."""
    return pdh.replace("+", "-")


@dataclass(frozen=True)
class Bucket:
    name: str  # as asked
    pdh: str
    is_name: bool  # a name (writable, if the caller may): else a PDH
    level: Level
    # An object's Last-Modified: when the name last moved, or when the
    # collection was recorded (the manifest keeps no time per file).
    modified: float


def is_pdh_bucket(bucket: str) -> bool:
    return _PDH_BUCKET.fullmatch(bucket) is not None


def resolve_bucket(
    state: ControllerState,
    user: catalog.User,
    bucket: str,
    named: tuple[catalog.NameRecord | None] | None = None,
) -> Bucket:
    """The collection a bucket names now, if ``user`` may read it; else
    NoSuchBucket. ``named``: the name's record (or None: no such name) as
    read with the caller's credential, in this request."""
    missing = S3Error("NoSuchBucket", "The specified bucket does not exist", 404, BucketName=bucket)
    engine = state.engine
    found = _PDH_BUCKET.fullmatch(bucket)
    if found is not None:
        pdh = f"{found.group(1)}+{found.group(2)}"
        try:
            require_collection_read(engine, user, pdh)
            recorded = collection_summary(engine, pdh)
        except NotFoundError:
            raise missing from None
        return Bucket(bucket, pdh, False, Level.READ, recorded.created_at)
    try:
        catalog.check_name(bucket)
        level = hide_name(engine, user, bucket)
        record = catalog.get_name(engine, bucket) if named is None else named[0]
    except (UsageError, NotFoundError):
        raise missing from None
    if record is None:
        raise missing
    return Bucket(bucket, record.pdh, True, max(level, Level.READ), record.updated_at)


def check_key(key: str, *, writing: bool) -> None:
    """Refuse a key no file may have. Reading, a key a collection cannot
    hold is only absent (NoSuchKey); writing, it is refused: it must be a
    path inside the collection (no empty, ``.`` or ``..`` part, no leading
    ``/``, no NUL or control character)."""
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise S3Error("KeyTooLongError", f"a key is at most {MAX_KEY_BYTES} bytes", 400)
    if not writing:
        return
    bad = not key or any(part in ("", ".", "..") for part in key.split("/"))
    if bad or any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
        raise S3Error(
            "InvalidArgument",
            "a key must be a path inside the collection: no empty, '.' or '..' part, "
            "no leading or doubled '/', no NUL or control character",
            400,
        )
    if any(0xD800 <= ord(c) <= 0xDFFF for c in key):
        raise S3Error("InvalidArgument", "a key must be UTF-8", 400)


class Contents:
    """A collection's files in key order (S3 lists keys in UTF-8 byte
    order, which is code point order), with the caller's own MD5s if any."""

    def __init__(self, manifest: Manifest, md5s: dict[str, str] | None) -> None:
        self.manifest = manifest
        files = manifest.files_view()
        self.keys = sorted(files)
        self.files = files
        self.md5s = md5s or {}
        self.cost = sum(len(k) + 200 for k in self.keys)

    def entry(self, key: str) -> FileEntry | None:
        return self.files.get(key)

    def keys_from(self, least: str, roll_from: int | None = None) -> Iterator[str]:
        """The keys not less than ``least``, in key order (``roll_from``:
        see ``OutlinedContents.keys_from``; every key is at hand here)."""
        keys = self.keys
        for i in range(bisect.bisect_left(keys, least), len(keys)):
            yield keys[i]


class Listable(Protocol):
    """What a listing and a GetObject read of a collection's files: a
    ``Contents`` (parsed whole), or an ``OutlinedContents`` (a large one)."""

    md5s: dict[str, str]
    cost: int

    def entry(self, key: str) -> FileEntry | None: ...

    def keys_from(self, least: str, roll_from: int | None = None) -> Iterator[str]: ...


class ContentsCache:
    """Collections' contents kept among the last used, within a byte budget
    (a PDH names fixed content). A collection's listing is its caller's, so
    the user is part of the key; one of more than ``OUTLINED_FROM`` files is
    read from its outline (no listing: everyone's alike), but parsed whole
    for a write, which makes its new manifest from the whole."""

    def __init__(self, budget: int = 256 << 20) -> None:
        self.budget = budget
        self._held: OrderedDict[tuple[str, str], Listable] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def _kept(self, key: tuple[str, str]) -> Listable | None:
        with self._lock:
            found = self._held.get(key)
            if found is not None:
                self._held.move_to_end(key)
            return found

    def _keep(self, key: tuple[str, str], made: Listable) -> None:
        with self._lock:
            if made.cost <= self.budget and key not in self._held:
                self._held[key] = made
                self._bytes += made.cost
                while self._bytes > self.budget:
                    # Not closed here: a request may still be reading it (its
                    # scratch file is let go with the last reference).
                    _, dropped = self._held.popitem(last=False)
                    self._bytes -= dropped.cost

    def get(self, state: ControllerState, pdh: str, user: str) -> Listable:
        """What a listing or a read of ``pdh`` needs."""
        found = self._kept((pdh, user)) or self._kept((pdh, ""))
        if found is not None:
            return found
        record = collection_summary(state.engine, pdh)
        if record.file_count <= OUTLINED_FROM:
            return self.whole(state, pdh, user)
        text = load_stored_text(state.keep(), state.engine, pdh, None)
        if text is None:
            raise CorruptDataError(f"the stored manifest of {pdh} does not match its PDH")
        made = OutlinedContents(pdh, text)
        self._keep((pdh, ""), made)
        return made

    def whole(self, state: ControllerState, pdh: str, user: str) -> Contents:
        """The collection parsed whole (a write, or a small collection)."""
        found = self._kept((pdh, user))
        if isinstance(found, Contents):
            return found
        manifest, _ = load_manifest(state.keep(), state.engine, pdh, None)
        big = len(manifest.files_view()) > OUTLINED_FROM
        # A large collection's ETags use no listing, read or written alike.
        text = None if big else listing_of(state.engine, pdh, user)
        made = Contents(manifest, parse_listing(text) if text else None)
        if not big:
            self._keep((pdh, user), made)
        return made


def etag_of(contents: Listable, entry: FileEntry) -> str:
    """The file's MD5 where it is known: the caller's own listing of it, or
    a file that is one whole block (whose name is its MD5). Otherwise a
    digest of where its bytes lie, with a ``-1`` suffix as S3 marks an ETag
    that is not the content's MD5 (clients then do not compare it with one)."""
    known = contents.md5s.get(entry.path)
    if known:
        return f'"{known}"'
    if entry.size == 0:
        return '"d41d8cd98f00b204e9800998ecf8427e"'
    if len(entry.pieces) == 1:
        piece = entry.pieces[0]
        if piece.offset == 0 and piece.length == piece.locator.size:
            return f'"{piece.locator.md5}"'
    where = ",".join(f"{p.locator.key}:{p.offset}:{p.length}" for p in entry.pieces)
    return f'"{hashlib.md5(where.encode()).hexdigest()}-1"'


def etag_matches(header: str, etag: str) -> bool:
    """Whether an If-Match or If-None-Match list names ``etag`` (or is ``*``)."""
    tags = [t.strip() for t in header.split(",")]
    return "*" in tags or etag in tags or etag.strip('"') in tags


@dataclass
class ListPage:
    keys: list[str]
    prefixes: list[str]
    truncated: bool
    next_token: str | None  # for ListObjectsV2
    next_marker: str | None  # the last key or prefix shown (ListObjects v1)


def _after(text: str) -> str | None:
    """The least string greater than every string starting with ``text``;
    None if there is none (``text`` is all U+10FFFF, the last code point)."""
    if not text:
        return ""
    # Trailing last code points have no next one: the one before them goes up.
    head = text.rstrip(_LAST)
    return head[:-1] + chr(ord(head[-1]) + 1) if head else None


def encode_token(kind: str, value: str) -> str:
    return base64.urlsafe_b64encode(f"{kind}:{value}".encode()).decode()


def decode_token(token: str) -> tuple[str, str]:
    try:
        kind, sep, value = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
    except (ValueError, UnicodeError):
        kind, sep, value = "", "", ""
    if not sep or kind not in ("k", "p"):
        raise S3Error("InvalidArgument", "The continuation token provided is incorrect", 400)
    return kind, value


def list_page(
    contents: Listable, prefix: str, delimiter: str, least: str | None, max_keys: int
) -> ListPage:
    """One page of keys from ``least`` on (None: past every key): those
    starting with ``prefix``, the ones holding ``delimiter`` after it rolled
    up into common prefixes; at most ``max_keys`` of both."""
    shown: list[str] = []
    if least is None or max_keys <= 0:
        # max-keys=0 asks for none: no key to go on from, so not truncated
        # (as S3 answers it), or a client would ask again forever.
        return ListPage(shown, [], False, None, None)
    prefixes: list[str] = []
    last: tuple[str, str] | None = None
    # With "/", a large collection's directories rolled up whole are not read.
    roll = len(prefix) if delimiter == "/" else None
    keys = contents.keys_from(max(least, prefix), roll)
    while (key := next(keys, None)) is not None and key.startswith(prefix):
        if len(shown) + len(prefixes) >= max_keys:
            assert last is not None
            return ListPage(shown, prefixes, True, encode_token(*last), last[1])
        cut = key.find(delimiter, len(prefix)) if delimiter else -1
        if cut >= 0:
            common = key[: cut + len(delimiter)]
            prefixes.append(common)
            last = ("p", common)
            following = _after(common)
            if following is None:
                break  # no key sorts after this prefix's
            keys = contents.keys_from(following, roll)
            continue
        shown.append(key)
        last = ("k", key)
    return ListPage(shown, prefixes, False, None, None)


def start_key(token: str | None, start_after: str) -> str | None:
    """The least key a page may show: after the continuation token's key or
    common prefix, or after ``start_after``, whichever is further; None if
    no key can follow."""
    # The least string greater than ``k`` is ``k`` and NUL (no key holds a NUL).
    least = start_after + "\0" if start_after else ""
    if token:
        kind, value = decode_token(token)
        following = value + "\0" if kind == "k" else _after(value)
        if following is None:
            return None
        least = max(least, following)
    return least
