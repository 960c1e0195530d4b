"""What the job manager and ``submit`` need from a warehouse: a small Protocol.

The embedded warehouse provides it through ``EmbeddedHost`` (steps get
``WH_HOME``); the controller through ``warehouse.jobs.controllerhost.ControllerHost``
(steps get ``WH_URL`` and a token for the job). Both keep every job and step
in the catalog behind ``engine`` (``warehouse.jobs.jobstore``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import sqlalchemy as sa

from warehouse import catalog
from warehouse.base import PutResult
from warehouse.blocks.store import BlockStore
from warehouse.collection.reader import CollectionReader
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs.assemble import check_fragment
from warehouse.jobs.jobrecords import JobRecord
from warehouse.manifest import Manifest

__all__ = ["EmbeddedHost", "JobHost", "SubmitHost", "as_host"]


class SubmitHost(Protocol):
    """What submitting a job needs: pin the function, resolve the input, find reuse."""

    @property
    def engine(self) -> sa.Engine: ...

    @property
    def user(self) -> str: ...

    @property
    def store(self) -> BlockStore: ...

    @property
    def git_roots(self) -> Sequence[str] | None: ...

    @property
    def git_allow(self) -> Sequence[str] | None: ...

    def put(self, paths: Sequence[Path]) -> PutResult: ...

    def manifest(self, key: str) -> Manifest: ...

    def reader(self, key: str) -> CollectionReader: ...

    def resolve(self, key: str) -> str: ...


@runtime_checkable
class JobHost(SubmitHost, Protocol):
    """What the manager needs besides: where steps find the warehouse, and checks."""

    @property
    def work_dir(self) -> Path:
        """Where function versions are unpacked and steps get scratch space."""
        ...

    def save_manifest(
        self, manifest: Manifest, file_md5s: dict[str, str] | None = None
    ) -> catalog.CollectionRecord: ...

    def step_location(self, record: JobRecord) -> dict[str, str]:
        """The variables telling the job's steps where the warehouse is."""
        ...

    def check_fragment(self, job: int, text: str) -> str:
        """A fragment a step of ``job`` reported, checked and formatted (raises if bad)."""
        ...

    def release(self, job: int) -> None:
        """The manager is done with ``job`` (drop what ``step_location`` made)."""
        ...


class EmbeddedHost:
    """The embedded warehouse as a job host: steps share ``$WH_HOME``."""

    def __init__(self, wh: EmbeddedWarehouse) -> None:
        self.wh = wh
        self.engine: sa.Engine = wh.engine
        self.user: str = wh.user
        self.work_dir: Path = wh.home.resolve() / "jobs"

    @property
    def store(self) -> BlockStore:
        return self.wh.store

    @property
    def git_roots(self) -> Sequence[str] | None:
        return self.wh.git_roots

    @property
    def git_allow(self) -> Sequence[str] | None:
        return self.wh.git_allow

    def put(self, paths: Sequence[Path]) -> PutResult:
        return self.wh.put(paths)

    def manifest(self, key: str) -> Manifest:
        return self.wh.manifest(key)

    def reader(self, key: str) -> CollectionReader:
        return self.wh.reader(key)

    def resolve(self, key: str) -> str:
        return self.wh.resolve(key)

    def save_manifest(
        self, manifest: Manifest, file_md5s: dict[str, str] | None = None
    ) -> catalog.CollectionRecord:
        return self.wh.save_manifest(manifest, file_md5s)

    def step_location(self, record: JobRecord) -> dict[str, str]:
        return {"WH_HOME": str(self.wh.home.resolve())}

    def check_fragment(self, job: int, text: str) -> str:
        return check_fragment(self.wh.store, text)

    def release(self, job: int) -> None:
        pass


def as_host(wh: JobHost | EmbeddedWarehouse) -> JobHost:
    return EmbeddedHost(wh) if isinstance(wh, EmbeddedWarehouse) else wh
