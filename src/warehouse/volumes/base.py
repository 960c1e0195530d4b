"""What every volume offers, whatever keeps its blocks (DESIGN §4.1).

A volume stores blocks under their MD5 and reads them back verified. The
local directory (``warehouse.blocks.volume.LocalVolume``) and the S3 bucket
(``warehouse.volumes.s3.S3Volume``) both implement ``Volume``; the keep
server, GC, fsck and the embedded warehouse use only what is listed here.
A volume is named by a *spec*: a directory, or ``s3://BUCKET/PREFIX?...``
(``open_volume``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

from warehouse.blocks.volume import DEFAULT_TRASH_LIFETIME, BlockStat, LocalVolume, VolumeSpace
from warehouse.blocks.volumecounts import VolumeCounts

__all__ = ["BlockWrite", "Volume", "child_spec", "is_s3_spec", "open_volume"]


class BlockWrite(Protocol):
    """A block arriving in pieces, hashed as it comes; stored on ``commit``."""

    @property
    def exists(self) -> bool: ...

    @property
    def size(self) -> int: ...

    def write(self, data: bytes | bytearray | memoryview) -> None: ...

    def write_pieces(self, pieces: Sequence[bytes | bytearray | memoryview]) -> None: ...

    def commit(self) -> bool:
        """Check the MD5 and store the block; True if it is new. UsageError
        on a mismatch (nothing stored)."""

    def abort(self) -> None: ...


class Volume(Protocol):
    """A place for blocks. Every read is verified against the block's name;
    a copy found corrupt is moved aside, so it counts as missing. I/O
    failures (a disk's, or an object store's after its retries) are OSError."""

    trash_lifetime: float
    # Requests asked of the volume by kind, and bytes gained (docs/usage.md).
    counts: VolumeCounts

    @property
    def name(self) -> str:
        """How logs, errors and ``/status`` name the volume."""

    def device(self) -> str:
        """What volumes sharing one store have in common (a disk, a bucket)."""

    def stat(self, md5: str) -> BlockStat | None: ...

    def check(self, md5: str, size: int) -> bool:
        """Whether a good copy of ``size`` bytes is stored (a writer may skip it)."""

    def put(self, md5: str, data: bytes | bytearray | memoryview) -> bool:
        """Store ``data`` (hashed by the caller); True if new. A block already
        stored only has its mtime refreshed (GC reads it as "last wanted")."""

    def open_write(self, md5: str, size: int) -> BlockWrite: ...

    def get(self, md5: str) -> bytes:
        """The block's verified bytes; NotFoundError, CorruptDataError."""

    def get_into(self, md5: str, buf: bytearray) -> memoryview: ...

    def get_mapped(self, md5: str) -> memoryview | None:
        """The verified bytes mapped from a file; None where there is no file."""

    def copy_to(self, md5: str, write: Callable[[bytes], object], *, piece: int = ...) -> int:
        """Copy the block a piece at a time, verified once all is copied."""

    def touch(self, md5: str) -> bool: ...

    def space(self) -> VolumeSpace: ...

    def index(self, prefix: str = "") -> Iterator[BlockStat]:
        """Every block whose hash starts with ``prefix``, in hash order."""

    def trash(self, md5: str, *, if_mtime_ns: int | None = None, now: float | None = None) -> bool:
        """Trash a block unless it was written again since ``if_mtime_ns``."""

    def untrash(self, md5: str) -> bool: ...

    def empty_trash(self, now: float | None = None) -> int: ...

    def remove_stale_temporaries(self, max_age: float, now: float | None = None) -> int: ...


def is_s3_spec(spec: str | Path) -> bool:
    return isinstance(spec, str) and spec.startswith("s3://")


def child_spec(spec: str, name: str) -> str:
    """An S3 spec one level down: ``s3://B/P?E`` and ``keep0`` give
    ``s3://B/P/keep0/?E`` (each of several keep servers its own prefix)."""
    base, sep, query = spec.partition("?")
    return f"{base.rstrip('/')}/{name}/{sep}{query}"


def open_volume(
    spec: str | Path, *, trash_lifetime: float = DEFAULT_TRASH_LIFETIME, check: bool = True
) -> Volume:
    """The volume a spec names: ``s3://…`` an S3 volume (``check``ed now: a
    missing bucket or refused credentials are a UsageError; unchecked, its
    first request finds them), anything else a local directory (created if
    missing)."""
    if is_s3_spec(spec):
        # Only an S3 volume loads boto3, at its first request: a client-only
        # install has none.
        from warehouse.volumes.s3 import S3Volume

        return S3Volume.open(str(spec), trash_lifetime=trash_lifetime, check=check)
    return LocalVolume(Path(spec).absolute(), trash_lifetime=trash_lifetime)
