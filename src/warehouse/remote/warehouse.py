"""The remote warehouse: the same operations as the embedded one, over HTTP.

Blocks go straight to the keep servers (``KeepClient``); manifests, names
and accounting go through the controller, which only accepts blocks signed
for the caller.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from warehouse import catalog
from warehouse.blocks.cache import BlockCache
from warehouse.collection.extract import ExtractedFile, extract
from warehouse.collection.reader import CollectionReader
from warehouse.collection.scan import DirNode, scan_paths
from warehouse.collection.writer import write_tree
from warehouse.embedded import DEFAULT_CACHE_BYTES, PutResult
from warehouse.errors import ConflictError, NotFoundError, UsageError
from warehouse.keys import Key, parse_key
from warehouse.manifest import Manifest
from warehouse.remote.api import ApiClient
from warehouse.remote.keepclient import KeepClient
from warehouse.remote.probe import Service
from warehouse.remote.signatures import SignatureCache, default_cache_dir

__all__ = ["RemoteWarehouse"]

Progress = Callable[[int], None]


class RemoteWarehouse:
    def __init__(
        self,
        url: str,
        token: str,
        *,
        replication: int | None = None,
        min_copies: int | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        if not token:
            raise UsageError("WH_URL is set but WH_TOKEN is not: a token is needed")
        self.url = url
        self.api = ApiClient(url, token)
        me = self.api.get("/users/current")
        self.user: str = me["name"]
        services = [Service(s["id"], s["url"]) for s in self.api.get("/keep_services")]
        if replication is None:
            # The default never asks for more copies than there are servers;
            # an explicit request does, and fails if it cannot be met.
            replication = min(int(os.environ.get("WH_REPLICATION", "2")), max(len(services), 1))
        self.store = KeepClient(
            services,
            token,
            replication=replication,
            min_copies=min_copies,
            cache=BlockCache(cache_bytes),
            known=SignatureCache(default_cache_dir(), url, token),
        )

    def close(self) -> None:
        self.store.close()
        self.api.close()

    def __enter__(self) -> RemoteWarehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- collections ---------------------------------------------------------

    def _record(
        self,
        manifest: Manifest,
        file_md5s: dict[str, str] | None = None,
        writes: Sequence[tuple[str, int, bool]] = (),
    ) -> catalog.CollectionRecord:
        out = self.api.post(
            "/collections",
            {
                "manifest_text": manifest.format(),
                "file_md5s": file_md5s,
                "block_writes": [{"md5": m, "size": s, "new": n} for m, s, n in writes],
            },
        )
        return catalog.CollectionRecord(
            out["pdh"], "", out["size"], out["file_count"], time.time(), self.user
        )

    def save_manifest(
        self, manifest: Manifest, file_md5s: dict[str, str] | None = None
    ) -> catalog.CollectionRecord:
        return self._record(manifest, file_md5s)

    def resolve(self, key: str | Key) -> str:
        k = parse_key(key) if isinstance(key, str) else key
        if k.is_pdh:
            return k.head
        return str(self.api.get(f"/names/{catalog.check_name(k.head)}")["pdh"])

    def _collection(self, key: str | Key) -> tuple[Manifest, dict[str, str] | None]:
        out = self.api.get(f"/collections/{self.resolve(key)}")
        return Manifest.parse(out["manifest_text"]), out.get("file_md5s")

    def manifest(self, key: str | Key) -> Manifest:
        return self._collection(key)[0]

    def reader(self, key: str | Key) -> CollectionReader:
        manifest, digests = self._collection(key)
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
        if name is not None:
            catalog.check_name(name)
            self._precheck_name(name, expect, create)
        result = write_tree(self.store, paths, progress=progress)
        writes = [(b.locator.md5, b.locator.size, b.new) for b in result.blocks]
        self._record(result.manifest, result.file_md5s, writes)
        record = (
            None if name is None else self.set_name(name, result.pdh, expect=expect, create=create)
        )
        copies = self.store.stats.min_copies_seen
        return PutResult(result, record, self.store.replication if copies is None else copies)

    def put_manifest(
        self,
        manifest: Manifest,
        *,
        name: str | None = None,
        expect: str | None = None,
        create: bool = False,
    ) -> catalog.CollectionRecord:
        if name is not None:
            catalog.check_name(name)
            self._precheck_name(name, expect, create)
        record = self._record(manifest)
        if name is not None:
            self.set_name(name, record.pdh, expect=expect, create=create)
        return record

    def _precheck_name(self, name: str, expect: str | None, create: bool) -> None:
        try:
            current: str | None = self.get_name(name).pdh
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
        out = self.api.put(f"/names/{name}", {"pdh": pdh, "expect": expect, "create": create})
        return catalog.NameRecord(**out)

    def get_name(self, name: str) -> catalog.NameRecord:
        return catalog.NameRecord(**self.api.get(f"/names/{catalog.check_name(name)}"))

    def list_names(self, prefix: str = "") -> list[catalog.NameRecord]:
        return [catalog.NameRecord(**r) for r in self.api.get("/names", prefix=prefix)]

    def name_log(self, name: str) -> list[catalog.NameChange]:
        return [catalog.NameChange(**c) for c in self.api.get(f"/names/{name}/log")]

    def accounting(self, since: float = 0.0) -> list[catalog.AccountingRow]:
        return [catalog.AccountingRow(**r) for r in self.api.get("/accounting", since=since)]
