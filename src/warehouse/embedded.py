"""The embedded warehouse: a local volume and a SQLite catalog under ``$WH_HOME``.

Layout: ``blocks/`` (the volume), ``warehouse.db`` (the catalog), ``cache/``
(reserved for the disk block cache). Created on first use.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from warehouse import catalog
from warehouse.blocks.cache import BlockCache
from warehouse.blocks.store import LocalBlockStore
from warehouse.blocks.volume import LocalVolume
from warehouse.collection.extract import ExtractedFile, extract
from warehouse.collection.reader import CollectionReader
from warehouse.collection.records import load_manifest, store_manifest
from warehouse.collection.scan import DirNode, scan_paths
from warehouse.collection.writer import WriteResult, write_tree
from warehouse.errors import ConflictError, NotFoundError
from warehouse.keys import Key, parse_key
from warehouse.manifest import Manifest

__all__ = ["DEFAULT_CACHE_BYTES", "EmbeddedWarehouse", "PutResult", "default_home"]

DEFAULT_CACHE_BYTES = 256 * 1024 * 1024
Progress = Callable[[int], None]


def default_home() -> Path:
    env = os.environ.get("WH_HOME")
    if env:
        return Path(env)
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local/share")
    return Path(data) / "warehouse"


@dataclass(frozen=True)
class PutResult:
    write: WriteResult
    name: catalog.NameRecord | None
    copies: int = 1  # the fewest copies any block of the collection got

    @property
    def pdh(self) -> str:
        return self.write.pdh


class EmbeddedWarehouse:
    def __init__(
        self,
        home: Path | None = None,
        *,
        user: str | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self.home = Path(home) if home is not None else default_home()
        self.home.mkdir(parents=True, exist_ok=True)
        self.user = user or os.environ.get("WH_USER") or getpass.getuser()
        self.volume = LocalVolume(self.home / "blocks")
        self.store = LocalBlockStore(self.volume, BlockCache(cache_bytes))
        self.engine: sa.Engine = catalog.open_engine(f"sqlite:///{self.home / 'warehouse.db'}")
        catalog.upgrade(self.engine)

    def close(self) -> None:
        self.store.close()
        self.engine.dispose()

    def __enter__(self) -> EmbeddedWarehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- collections ---------------------------------------------------------

    def save_manifest(
        self, manifest: Manifest, file_md5s: dict[str, str] | None = None
    ) -> catalog.CollectionRecord:
        """Store a manifest's text as blocks and record the collection.

        Every block it lists must already be stored (nothing dangling is recorded).
        ``file_md5s`` (every file's MD5, as read when it was stored) is kept for
        the md5sum listing of ``get``.
        """
        for loc in manifest.blocks():
            if not self.store.exists(loc):
                raise NotFoundError(f"block {loc.key} of the manifest is not stored")
        return store_manifest(self.store, self.engine, manifest, self.user, file_md5s)

    def resolve(self, key: str | Key) -> str:
        """The PDH a key or name stands for now."""
        k = parse_key(key) if isinstance(key, str) else key
        if k.is_pdh:
            return k.head
        return catalog.get_name(self.engine, catalog.check_name(k.head)).pdh

    def manifest(self, key: str | Key) -> Manifest:
        return load_manifest(self.store, self.engine, self.resolve(key))[0]

    def reader(self, key: str | Key) -> CollectionReader:
        manifest, digests = load_manifest(self.store, self.engine, self.resolve(key))
        return CollectionReader(self.store, manifest, file_md5s=digests)

    def scan(self, paths: Sequence[Path]) -> DirNode:
        return scan_paths(paths)

    def put(
        self,
        paths: Sequence[Path] | DirNode,
        *,
        name: str | None = None,
        expect: str | None = None,
        create: bool = False,
        progress: Progress | None = None,
    ) -> PutResult:
        """Store a tree; optionally point ``name`` at it (``expect``: its current PDH)."""
        if name is not None:
            catalog.check_name(name)
            self._precheck_name(name, expect, create)
        result = write_tree(self.store, paths, progress=progress)
        catalog.record_block_writes(
            self.engine, self.user, ((b.locator.md5, b.locator.size, b.new) for b in result.blocks)
        )
        self.save_manifest(result.manifest, result.file_md5s)
        record = (
            None if name is None else self.set_name(name, result.pdh, expect=expect, create=create)
        )
        return PutResult(result, record)

    def put_manifest(
        self,
        manifest: Manifest,
        *,
        name: str | None = None,
        expect: str | None = None,
        create: bool = False,
    ) -> catalog.CollectionRecord:
        """Record a collection from manifest text whose blocks are already stored."""
        if name is not None:
            catalog.check_name(name)
            self._precheck_name(name, expect, create)
        record = self.save_manifest(manifest)
        if name is not None:
            self.set_name(name, record.pdh, expect=expect, create=create)
        return record

    def _precheck_name(self, name: str, expect: str | None, create: bool) -> None:
        # Fail before reading a terabyte when the name is already known to conflict;
        # the compare-and-swap after the write is what actually decides.
        try:
            current = catalog.get_name(self.engine, name).pdh
        except NotFoundError:
            current = None
        if (expect is not None or create) and current != expect:
            raise ConflictError(f"name {name!r} holds {current or 'nothing'}, not {expect}")

    def get(
        self,
        key: str,
        dest: Path | None,
        *,
        force: bool = False,
        rehash: bool = False,
        progress: Progress | None = None,
    ) -> list[ExtractedFile]:
        k = parse_key(key)
        return extract(
            self.reader(k), dest, subpath=k.path, force=force, rehash=rehash, progress=progress
        )

    # -- names ---------------------------------------------------------------

    def set_name(
        self, name: str, pdh: str, *, expect: str | None, create: bool = False
    ) -> catalog.NameRecord:
        """Compare-and-swap. ``expect=None`` creates the name, or (unless ``create``)
        succeeds without a change if it already holds ``pdh``."""
        catalog.get_collection(self.engine, pdh)  # a name only points at a known collection
        try:
            return catalog.set_name(self.engine, name, pdh, expect=expect, user=self.user)
        except ConflictError:
            if expect is None and not create:
                current = catalog.get_name(self.engine, name)
                if current.pdh == pdh:
                    return current
            raise

    def get_name(self, name: str) -> catalog.NameRecord:
        return catalog.get_name(self.engine, name)

    def list_names(self, prefix: str = "") -> list[catalog.NameRecord]:
        return catalog.list_names(self.engine, prefix)

    def name_log(self, name: str) -> list[catalog.NameChange]:
        return catalog.name_log(self.engine, name)

    def accounting(self, since: float = 0.0) -> list[catalog.AccountingRow]:
        return catalog.accounting(self.engine, since)
