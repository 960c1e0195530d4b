"""What a workflow run needs of a warehouse, and that warehouse acting for the run's owner.

``RunHost`` is the embedded warehouse or a controller's catalog; a driver
submits a run's jobs through ``AsOwner``, as the user who started the run
(a controller's driver thread acts for every user).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from warehouse import catalog
from warehouse.base import PutResult
from warehouse.blocks.store import BlockStore
from warehouse.collection.reader import CollectionReader
from warehouse.jobs.jobhost import SubmitHost
from warehouse.manifest import Manifest

__all__ = ["AsOwner", "RunHost"]


class RunHost(SubmitHost, Protocol):
    """What driving a run needs of a warehouse (embedded, or a controller's catalog):
    submitting jobs, and besides recording collections and naming the outputs."""

    def save_manifest(
        self, manifest: Manifest, file_md5s: dict[str, str] | None = None
    ) -> catalog.CollectionRecord: ...

    def set_name(
        self, name: str, pdh: str, *, expect: str | None, create: bool = False
    ) -> catalog.NameRecord: ...

    def get_name(self, name: str) -> catalog.NameRecord: ...


class AsOwner:
    """The host submitting as the run's owner (a controller's driver acts for them)."""

    def __init__(self, host: RunHost, owner: str) -> None:
        self._host = host
        self.user = owner
        self.engine = host.engine

    @property
    def store(self) -> BlockStore:
        return self._host.store

    @property
    def git_roots(self) -> Sequence[str] | None:
        return self._host.git_roots

    @property
    def git_allow(self) -> Sequence[str] | None:
        return self._host.git_allow

    def put(self, paths: Sequence[Path]) -> PutResult:
        return self._host.put(paths)

    def manifest(self, key: str) -> Manifest:
        return self._host.manifest(key)

    def reader(self, key: str) -> CollectionReader:
        return self._host.reader(key)

    def resolve(self, key: str) -> str:
        return self._host.resolve(key)
