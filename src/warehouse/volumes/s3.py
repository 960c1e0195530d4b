"""A volume in an S3 bucket: blocks as objects under their MD5 (DESIGN §4.1).

Keys, under the spec's prefix:

- ``<md5[0:3]>/<md5>``: a block, written with one PUT carrying its
  Content-MD5, so the store refuses bytes that are not the block's and a
  reader never sees part of one;
- ``trash/<md5>.<deadline>``: a trashed block (Unix seconds), moved there
  by copy then delete; ``empty_trash`` deletes what is past its deadline;
- ``quarantine/<md5>.<deadline>``: a copy a read found corrupt, moved aside
  the same way and removed with the trash.

The store has no mtime to touch: a block's "last wanted" time is the
object's LastModified, as the end of its second (HEAD answers whole seconds),
and a re-write of a block already stored copies the object onto itself
with new metadata, which sets LastModified to now without sending the bytes.
A copy's *verified mark* is its ETag: a single PUT's ETag is the MD5 of the
bytes the store received, so an ETag equal to the name means the copy is
good as written; any other (an object replaced behind the volume's back,
multipart, encrypted with KMS) is read and verified before it counts.
Every read hashes the whole block and compares it with its name.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any

from warehouse.blocks.locator import MAX_BLOCK_SIZE
from warehouse.blocks.volume import DEFAULT_TRASH_LIFETIME, BlockStat, VolumeSpace, move_aside
from warehouse.blocks.volumecounts import DELETE, GET, LIST, PUT, VolumeCounts
from warehouse.errors import CorruptDataError, NotFoundError, UsageError
from warehouse.volumes.s3client import S3Location, make_client, s3_error, status_of

if TYPE_CHECKING:
    from botocore.client import BaseClient

__all__ = ["S3BlockWriter", "S3Volume"]

# An object store has no free space to report; this much says "plenty",
# so a keep server's roomiest-volume rule sends new blocks here, unless the
# spec gives the volume a capacity.
UNBOUNDED = 1 << 60
# The request each client method sends, as metrics and bills name it.
_KINDS = {
    "head_object": "HEAD",
    "get_object": "GET",
    "put_object": "PUT",
    "copy_object": "COPY",
    "delete_object": "DELETE",
    "list_objects_v2": "LIST",
}
# And the kind of volume_usage each is counted as: what S3 bills it as
# (HEAD at the GET rate, COPY at the PUT rate).
_BILLED = {"HEAD": GET, "GET": GET, "PUT": PUT, "COPY": PUT, "DELETE": DELETE, "LIST": LIST}
_HEX = "0123456789abcdef"
_TRASH = "trash/"
_QUARANTINE = "quarantine/"
_SPOOL = 8 << 20  # a streamed write is held in memory up to this, then spooled to disk


def _mtime_ns(when: datetime) -> int:
    # The end of the second it was written in: HEAD says whole seconds and
    # a listing may say more, so both must read the same; and never earlier
    # than the write, or GC's age guard would count a block older than it is.
    return (int(when.timestamp()) + 1) * 1_000_000_000


def _content_md5(md5: str) -> str:
    return base64.b64encode(bytes.fromhex(md5)).decode()


def _check_md5(md5: str) -> None:
    if len(md5) != 32 or any(c not in _HEX for c in md5):
        raise UsageError(f"not a block hash: {md5!r}")


class S3Volume:
    """One bucket (and prefix) of blocks. Thread-safe: the client is."""

    def __init__(
        self,
        location: S3Location,
        *,
        trash_lifetime: float = DEFAULT_TRASH_LIFETIME,
        client: BaseClient | None = None,
    ) -> None:
        self.location = location
        self.trash_lifetime = trash_lifetime
        self._client: Any = client
        self._client_lock = threading.Lock()
        # Requests sent, by kind (HEAD, GET, ...), for keepd's metrics: what
        # a store bills by. Retries botocore makes count once.
        self._requests: Counter[str] = Counter()
        # Bytes of blocks held, counted by one listing when first asked and
        # kept by this process's writes and trash (None: not counted yet).
        self._held: int | None = None
        self._count_lock = threading.Lock()
        # The same requests by billed kind, and bytes gained, for the
        # catalog's volume_usage (taken and reset by whoever records them).
        self.counts = VolumeCounts()

    @property
    def client(self) -> Any:
        """The S3 client, made at the first request: a read the disk cache
        answers whole never loads boto3 (about 0.3 s of a process's start)."""
        with self._client_lock:
            if self._client is None:
                try:
                    self._client = make_client(self.location)
                except ModuleNotFoundError as e:
                    raise UsageError(
                        f"S3 volume {self.name} needs boto3: pip install 'warehouse[s3]'"
                    ) from e
            return self._client

    @classmethod
    def open(
        cls, spec: str, *, trash_lifetime: float = DEFAULT_TRASH_LIFETIME, check: bool = True
    ) -> S3Volume:
        """The volume a spec names, once the bucket answers (``check``): a
        missing bucket, refused credentials or an unreachable store are
        UsageError. Unchecked, the first request finds them (an OSError)."""
        volume = cls(S3Location.parse(spec), trash_lifetime=trash_lifetime)
        if check:
            volume.check_bucket()
        return volume

    def check_bucket(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        where = f" at {self.location.endpoint}" if self.location.endpoint else ""
        try:
            # A listing, not HeadBucket: its refusal says why (a HEAD has no body).
            self.client.list_objects_v2(
                Bucket=self.location.bucket, Prefix=self.location.prefix, MaxKeys=1
            )
        except NoCredentialsError:
            raise UsageError(
                f"S3 volume {self.name}: no credentials "
                "(set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
            ) from None
        except ClientError as e:
            status, code = status_of(e)
            if status == 404 or code == "NoSuchBucket":
                bucket = self.location.bucket
                raise UsageError(f"S3 volume {self.name}: no bucket {bucket!r}{where}") from None
            refused = s3_error(self.name, "listing the bucket", e)
            raise UsageError(refused.strerror or str(refused)) from None
        except BotoCoreError as e:
            raise UsageError(f"S3 volume {self.name}: cannot reach the store{where}: {e}") from None

    def __repr__(self) -> str:
        return f"S3Volume({self.name!r})"

    @property
    def name(self) -> str:
        return self.location.name

    def device(self) -> str:
        return f"s3:{self.location.endpoint or 'aws'}/{self.location.bucket}"

    def key_for(self, md5: str) -> str:
        _check_md5(md5)
        return f"{self.location.prefix}{md5[:3]}/{md5}"

    # -- requests --------------------------------------------------------

    def _call(self, what: str, method: str, *, absent: int = 404, **params: Any) -> Any:
        """One request (botocore retries it); None if the object is missing
        (404, or ``absent``), any other failure an OSError naming the volume."""
        from botocore.exceptions import BotoCoreError, ClientError

        kind = _KINDS.get(method, method)
        with self._count_lock:
            self._requests[kind] += 1
        if (billed := _BILLED.get(kind)) is not None:
            self.counts.count(billed)
        try:
            return getattr(self.client, method)(Bucket=self.location.bucket, **params)
        except ClientError as e:
            status, code = status_of(e)
            if code == "NoSuchBucket":  # not an absent object: the whole volume is gone
                raise s3_error(self.name, what, e) from None
            if status in (404, absent) or code in ("NoSuchKey", "NotFound"):
                return None
            if code == "BadDigest":
                raise UsageError(f"{what}: the data's MD5 is not the block's name") from None
            raise s3_error(self.name, what, e) from None
        except BotoCoreError as e:
            raise s3_error(self.name, what, e) from None

    def _head(self, md5: str) -> dict[str, Any] | None:
        head: dict[str, Any] | None = self._call(
            f"HEAD {md5}", "head_object", Key=self.key_for(md5)
        )
        return head

    def _copy(self, source: str, target: str, *, if_etag: str | None = None) -> bool:
        """Server-side copy; False if the source is gone (or changed)."""
        params: dict[str, Any] = {
            "Key": target,
            "CopySource": {"Bucket": self.location.bucket, "Key": source},
            # New metadata makes a copy onto itself legal, and sets
            # LastModified to now (the "touch").
            "MetadataDirective": "REPLACE",
            "Metadata": {"wh-wanted": str(int(time.time()))},
        }
        if if_etag is not None:
            params["CopySourceIfMatch"] = if_etag
        # 412: the source is no longer the object looked at.
        return self._call(f"copy {source}", "copy_object", absent=412, **params) is not None

    def _delete(self, key: str) -> None:
        self._call(f"DELETE {key}", "delete_object", Key=key)

    def _list(self, prefix: str, start_after: str = "") -> Iterator[dict[str, Any]]:
        """Every object under ``prefix``, a page (1,000) at a time, in key order."""
        params: dict[str, Any] = {"Prefix": prefix}
        if start_after:
            params["StartAfter"] = start_after
        while True:
            page = self._call(f"listing {prefix or '/'}", "list_objects_v2", **params)
            if page is None:
                return
            yield from page.get("Contents", [])
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return
            params = {"Prefix": prefix, "ContinuationToken": token}

    # -- blocks ----------------------------------------------------------

    def stat(self, md5: str) -> BlockStat | None:
        head = self._head(md5)
        if head is None:
            return None
        return BlockStat(md5, int(head["ContentLength"]), _mtime_ns(head["LastModified"]))

    def check(self, md5: str, size: int) -> bool:
        head = self._head(md5)
        if head is None or int(head["ContentLength"]) != size:
            return False
        if str(head.get("ETag", "")).strip('"') == md5:
            return True  # the store hashed these very bytes when they came
        try:
            self.get(md5)  # moves a corrupt copy aside
        except (CorruptDataError, NotFoundError):
            return False
        return True

    def touch(self, md5: str) -> bool:
        key = self.key_for(md5)
        return self._copy(key, key)

    def put(self, md5: str, data: bytes | bytearray | memoryview) -> bool:
        if self.check(md5, len(data)) and self.touch(md5):
            return False
        body = data if isinstance(data, bytes) else bytes(data)
        self._put_object(md5, body, len(body))
        return True

    def _put_object(self, md5: str, body: bytes | IO[bytes], size: int) -> None:
        # Content-MD5: the store refuses (BadDigest) bytes that are not the block.
        done = self._call(
            f"PUT {md5}",
            "put_object",
            Key=self.key_for(md5),
            Body=body,
            ContentLength=size,
            ContentMD5=_content_md5(md5),
        )
        if done is None:  # a 404 to a PUT: nothing was stored
            raise OSError(errno.EIO, f"S3 volume {self.name}: PUT {md5}: not found (HTTP 404)")
        self._count_held(size)
        self.counts.add_bytes(size)

    def requests(self) -> dict[str, int]:
        """Requests sent to the store since this volume was opened, by kind."""
        with self._count_lock:
            return dict(self._requests)

    def stored_bytes(self) -> int:
        """Bytes of the blocks held (trash and quarantine not counted): one
        listing the first time (a request per 1,000 blocks), then kept up to
        date by this process's writes and trash."""
        with self._count_lock:
            if self._held is not None:
                return self._held
        held = sum(s.size for s in self.index())
        with self._count_lock:
            if self._held is None:
                self._held = held
            return self._held

    def _count_held(self, n: int | None) -> None:
        """``n`` more bytes held; None: unknown, so counted again when asked."""
        with self._count_lock:
            if self._held is not None:
                self._held = None if n is None else self._held + n

    def open_write(self, md5: str, size: int) -> S3BlockWriter:
        return S3BlockWriter(self, md5, exists=self.check(md5, size))

    def _open_body(self, md5: str) -> tuple[Any, str]:
        got = self._call(f"GET {md5}", "get_object", Key=self.key_for(md5))
        if got is None:
            raise NotFoundError(f"block {md5} is not on {self.name}")
        if int(got.get("ContentLength", 0)) > MAX_BLOCK_SIZE:
            got["Body"].close()
            aside = self._move_aside(md5, str(got.get("ETag", "")))
            raise CorruptDataError(f"block {md5} on {self.name} is longer than any block{aside}")
        return got["Body"], str(got.get("ETag", ""))

    def _read_body(self, md5: str, body: Any, sink: Callable[[bytes], object]) -> str:
        """Stream the body to ``sink``; its MD5 (a failed read is an OSError)."""
        from botocore.exceptions import BotoCoreError

        digest = hashlib.md5()
        try:
            with body:
                for chunk in body.iter_chunks(1 << 20):
                    digest.update(chunk)
                    sink(chunk)
        except BotoCoreError as e:
            raise s3_error(self.name, f"GET {md5}", e) from None
        return digest.hexdigest()

    def get(self, md5: str) -> bytes:
        body, etag = self._open_body(md5)
        pieces: list[bytes] = []
        digest = self._read_body(md5, body, pieces.append)
        self._check_digest(md5, digest, etag)
        return b"".join(pieces)

    def get_into(self, md5: str, buf: bytearray) -> memoryview:
        view = memoryview(buf)
        body, etag = self._open_body(md5)
        n = 0

        def sink(chunk: bytes) -> None:
            nonlocal n
            if n + len(chunk) > len(view):
                raise CorruptDataError(f"block {md5} on {self.name} is longer than any block")
            view[n : n + len(chunk)] = chunk
            n += len(chunk)

        self._check_digest(md5, self._read_body(md5, body, sink), etag)
        return view[:n]

    def get_mapped(self, md5: str) -> memoryview | None:
        return None  # no file to map: callers read through ``get``

    def copy_to(self, md5: str, write: Callable[[bytes], object], *, piece: int = 1 << 20) -> int:
        body, etag = self._open_body(md5)
        n = 0

        def sink(chunk: bytes) -> None:
            nonlocal n
            n += len(chunk)
            write(chunk)

        self._check_digest(md5, self._read_body(md5, body, sink), etag)
        return n

    def _check_digest(self, md5: str, digest: str, etag: str) -> None:
        if digest != md5:
            aside = self._move_aside(md5, etag)
            raise CorruptDataError(
                f"block {md5} on {self.name} is corrupt (its MD5 differs){aside}"
            )

    def quarantine(self, md5: str, *, etag: str | None = None, now: float | None = None) -> bool:
        """Move a corrupt copy aside (``quarantine/``), only if it is still
        the object read (``etag``): a good copy may have replaced it."""
        deadline = int((time.time() if now is None else now) + self.trash_lifetime)
        key = self.key_for(md5)
        target = f"{self.location.prefix}{_QUARANTINE}{md5}.{deadline}"
        if not self._copy(key, target, if_etag=etag or None):
            return False
        self._delete(key)
        self._count_held(None)
        return True

    def _move_aside(self, md5: str, etag: str) -> str:
        return move_aside(lambda: self.quarantine(md5, etag=etag))

    # -- index, trash ----------------------------------------------------

    def space(self) -> VolumeSpace:
        capacity = self.location.capacity
        if capacity is None:
            return VolumeSpace(UNBOUNDED, UNBOUNDED)
        return VolumeSpace(max(0, capacity - self.stored_bytes()), capacity)

    def remove_stale_temporaries(self, max_age: float, now: float | None = None) -> int:
        return 0  # a block is one PUT: the store keeps no partial object

    def index(self, prefix: str = "") -> Iterator[BlockStat]:
        if len(prefix) > 32 or any(c not in _HEX for c in prefix):
            raise UsageError(f"not a hash prefix: {prefix!r}")
        base = self.location.prefix
        start = f"{base}{prefix[:3]}/{prefix}" if len(prefix) >= 3 else f"{base}{prefix}"
        for obj in self._list(start):
            rest = obj["Key"][len(base) :]
            if rest[:1] > "f":
                return  # past the shards: trash/, quarantine/, other objects
            shard, _, md5 = rest.partition("/")
            if shard != md5[:3] or len(md5) != 32 or any(c not in _HEX for c in md5):
                continue
            yield BlockStat(md5, int(obj["Size"]), _mtime_ns(obj["LastModified"]))

    def trash(self, md5: str, *, if_mtime_ns: int | None = None, now: float | None = None) -> bool:
        head = self._head(md5)
        if head is None:
            return False
        if if_mtime_ns is not None and _mtime_ns(head["LastModified"]) != if_mtime_ns:
            return False
        deadline = int((time.time() if now is None else now) + self.trash_lifetime)
        key = self.key_for(md5)
        target = f"{self.location.prefix}{_TRASH}{md5}.{deadline}"
        # Only the copy that was looked at: one written again since keeps
        # its place (between this copy and the delete lies the window a
        # local volume has between its stat and its rename).
        if not self._copy(key, target, if_etag=str(head.get("ETag", "")) or None):
            return False
        self._delete(key)
        self._count_held(-int(head["ContentLength"]))
        self.counts.add_bytes(-int(head["ContentLength"]))
        return True

    def _trashed(self, prefix: str) -> list[tuple[int, str]]:
        out = []
        for obj in self._list(prefix):
            _, _, deadline = obj["Key"].rpartition(".")
            if deadline.isdigit():
                out.append((int(deadline), obj["Key"]))
        return out

    def untrash(self, md5: str) -> bool:
        key = self.key_for(md5)
        trashed = sorted(self._trashed(f"{self.location.prefix}{_TRASH}{md5}."))
        if not trashed or not self._copy(trashed[-1][1], key):
            return False
        self._delete(trashed[-1][1])
        self._count_held(None)
        return True

    def empty_trash(self, now: float | None = None) -> int:
        now = time.time() if now is None else now
        removed = 0
        for where in (_TRASH, _QUARANTINE):
            for deadline, key in self._trashed(f"{self.location.prefix}{where}"):
                if deadline <= now:
                    self._delete(key)
                    removed += 1
        return removed


class S3BlockWriter:
    """A block arriving in pieces, hashed and spooled (memory, then an
    unnamed temporary file) until ``commit`` sends it in one PUT."""

    def __init__(self, volume: S3Volume, md5: str, *, exists: bool) -> None:
        self.volume = volume
        self.md5 = md5
        self.size = 0
        self._exists = exists
        # Closed by commit or abort (keepd always aborts after a commit).
        self._spool: IO[bytes] | None = (
            None if exists else tempfile.SpooledTemporaryFile(max_size=_SPOOL)  # noqa: SIM115
        )
        self._hash = hashlib.md5()
        self._done = False

    @property
    def exists(self) -> bool:
        return self._exists

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.write_pieces([data])

    def write_pieces(self, pieces: Sequence[bytes | bytearray | memoryview]) -> None:
        if self._done:
            raise UsageError(f"write of block {self.md5} is already finished")
        for piece in pieces:
            self._hash.update(piece)
            self.size += len(piece)
            if self._spool is not None:
                self._spool.write(piece)

    def commit(self) -> bool:
        if self._done:
            raise UsageError(f"write of block {self.md5} is already finished")
        got = self._hash.hexdigest()
        if got != self.md5:
            self.abort()
            raise UsageError(f"the data's MD5 is {got}, not {self.md5}")
        self._done = True
        spool, self._spool = self._spool, None
        if spool is None:
            if self.volume.touch(self.md5):
                return False
            raise FileNotFoundError(f"block {self.md5} left {self.volume.name} meanwhile")
        with spool:
            spool.seek(0)
            self.volume._put_object(self.md5, spool, self.size)
        return True

    def abort(self) -> None:
        self._done = True
        spool, self._spool = self._spool, None
        if spool is not None:
            spool.close()
