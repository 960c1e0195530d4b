"""The operations every warehouse offers, embedded or remote (one interface,
one shared test suite)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol, Self

if TYPE_CHECKING:
    # Types only: a Protocol needs none at run time, and `wh ls` through a
    # controller then loads no writer, extractor nor scanner (docs/latency.md).
    from warehouse import catalog
    from warehouse.base import PutResult
    from warehouse.blocks.store import BlockStore
    from warehouse.collection.extract import ExtractedFile
    from warehouse.collection.reader import CollectionReader
    from warehouse.collection.scan import DirNode, Filter
    from warehouse.collection.storedtext import StoredText
    from warehouse.keys import Key
    from warehouse.manifest import Manifest
    from warehouse.permissions import Grant, GroupRecord, Level, Mode, Perms
    from warehouse.putcache import PutCache

__all__ = ["Warehouse"]

Progress = Callable[[int], None]


class Warehouse(Protocol):
    @property
    def user(self) -> str:
        """Who the warehouse acts for (recorded in names and accounting)."""

    @property
    def store(self) -> BlockStore:
        """Where blocks go: a local volume or the keep servers."""

    def close(self) -> None: ...

    # `with warehouse.open() as wh:` closes it (docs/python.md).
    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...

    def scan(self, paths: Sequence[Path], keep: Filter | None = None) -> DirNode: ...

    def put(
        self,
        paths: Sequence[Path | str] | Path | str | DirNode,
        *,
        name: str | None = None,
        expect: str | None = None,
        create: bool = False,
        replace: bool = False,
        allow_changing: bool = False,
        progress: Progress | None = None,
        cache: PutCache | None = None,
    ) -> PutResult: ...

    def cache_identity(self) -> str:
        """Which store this is, for the resume cache of ``put``."""

    def put_manifest(
        self,
        manifest: Manifest,
        *,
        name: str | None = None,
        expect: str | None = None,
        create: bool = False,
    ) -> catalog.CollectionRecord: ...

    def put_manifest_text(
        self,
        text: bytes,
        *,
        name: str | None = None,
        expect: str | None = None,
        create: bool = False,
    ) -> catalog.CollectionRecord: ...

    def put_manifest_file(
        self,
        f: BinaryIO,
        limit: int,
        *,
        name: str | None = None,
        expect: str | None = None,
        create: bool = False,
    ) -> catalog.CollectionRecord: ...

    def manifest_text(self, key: str | Key) -> bytes | None: ...

    def stored_text(self, key: str | Key) -> bytes | StoredText | None: ...

    def save_manifest(
        self, manifest: Manifest, file_md5s: dict[str, str] | None = None
    ) -> catalog.CollectionRecord: ...

    def key(self, key: str | Key) -> Key: ...

    def resolve(self, key: str | Key) -> str: ...

    def manifest(self, key: str | Key) -> Manifest: ...

    def reader(self, key: str | Key, *, one_pass: bool = False) -> CollectionReader: ...

    def get(
        self,
        key: str,
        dest: Path | None,
        *,
        force: bool = False,
        rehash: bool = False,
        progress: Progress | None = None,
    ) -> list[ExtractedFile]: ...

    def set_name(
        self, name: str, pdh: str, *, expect: str | None, create: bool = False
    ) -> catalog.NameRecord: ...

    def get_name(self, name: str) -> catalog.NameRecord: ...

    def list_names(self, prefix: str = "") -> list[catalog.NameRecord]: ...

    def name_log(self, name: str) -> list[catalog.NameChange]: ...

    def remove_name(self, name: str, *, expect: str) -> catalog.NameChange:
        """Remove ``name`` if it holds ``expect`` now; the change is kept in its log."""

    def name_writers(self, name: str) -> list[str]: ...

    def add_name_writer(self, name: str, writer: str) -> None: ...

    def remove_name_writer(self, name: str, writer: str) -> None: ...

    def accounting(self, since: float = 0.0) -> list[catalog.AccountingRow]: ...

    # Groups, grants and the mode (docs/permissions.md).
    def list_groups(self) -> list[GroupRecord]: ...

    def add_group(self, name: str) -> GroupRecord: ...

    def add_group_member(self, group: str, user: str) -> None: ...

    def remove_group_member(self, group: str, user: str) -> None: ...

    def share(self, key: str, who: str, level: Level) -> Grant: ...

    def unshare(self, key: str, who: str) -> None: ...

    def perms(self, key: str) -> Perms: ...

    def permission_mode(self) -> Mode: ...

    def set_permission_mode(self, mode: Mode) -> None: ...
