"""What the pages read from: the catalog, a block store and, embedded, the warehouse.

A ``Site`` is made once per app, either over the controller's state (``wh
serve``) or over an embedded warehouse (``wh web``). Manifests are parsed
once and kept (a PDH names immutable content), so paging through a
collection of many files does not parse it again for every page.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import sqlalchemy as sa

from warehouse import catalog
from warehouse.blocks.store import BlockStore
from warehouse.collection.reader import CollectionReader
from warehouse.collection.records import load_manifest
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import ForbiddenError, UsageError
from warehouse.jobs.hosted import CatalogWarehouse
from warehouse.jobs.records import get_job, request_control
from warehouse.jobs.service import ensure_manager
from warehouse.jobs.submission import JobRequest
from warehouse.jobs.submission import submit as submit_job
from warehouse.jobs.values import JobRecord
from warehouse.manifest import Manifest
from warehouse.server.controller.state import ControllerState
from warehouse.web.tree import Tree

__all__ = ["Loaded", "Site"]

MANIFESTS_KEPT = 8


@dataclass(frozen=True)
class Loaded:
    """A parsed collection: its manifest, recorded digests and directory tree."""

    manifest: Manifest
    digests: dict[str, str] | None
    tree: Tree


@dataclass
class Site:
    engine: sa.Engine
    _store: Callable[[], BlockStore]
    kind: str  # "controller" or "embedded"
    embedded: EmbeddedWarehouse | None = None
    controller: ControllerState | None = None
    # An admin token the keep servers accept (to read their /status).
    keep_token: str | None = None
    _loaded: OrderedDict[str, Loaded] = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def for_controller(cls, state: ControllerState) -> Site:
        return cls(
            state.engine, state.keep, "controller", keep_token=state.system_token, controller=state
        )

    @classmethod
    def for_embedded(cls, wh: EmbeddedWarehouse) -> Site:
        return cls(wh.engine, lambda: wh.store, "embedded", embedded=wh)

    @property
    def store(self) -> BlockStore:
        return self._store()

    def volume_paths(self) -> list[Path]:
        """The embedded warehouse's local volume (none for a controller)."""
        return [] if self.embedded is None else [self.embedded.volume.root]

    def load(self, pdh: str) -> Loaded:
        """A collection parsed once and kept among the last few used."""
        with self._lock:
            found = self._loaded.get(pdh)
            if found is not None:
                self._loaded.move_to_end(pdh)
                return found
        # Kept for every visitor alike: so no user's own listing.
        manifest, digests = load_manifest(self.store, self.engine, pdh, None)
        loaded = Loaded(manifest, digests, Tree(manifest))
        with self._lock:
            self._loaded[pdh] = loaded
            while len(self._loaded) > MANIFESTS_KEPT:
                self._loaded.popitem(last=False)
        return loaded

    def reader(self, pdh: str) -> CollectionReader:
        loaded = self.load(pdh)
        return CollectionReader(self.store, loaded.manifest, file_md5s=loaded.digests)

    @property
    def runs_jobs(self) -> bool:
        if self.embedded is not None:
            return True
        return self.controller is not None and self.controller.job_manager is not None

    def submit(self, request: JobRequest, user: catalog.User) -> JobRecord:
        """Submit a job where this site's jobs run: the embedded warehouse's
        manager, or the controller's (DESIGN §5.4)."""
        if self.embedded is not None:
            if user.name != self.embedded.user and not user.admin:
                raise ForbiddenError("only the warehouse's own user or an admin may submit")
            record = submit_job(self.embedded, request)
            if record.state == "queued":
                ensure_manager(self.embedded.home, record.executor)
            return record
        state = self.controller
        if state is None or state.job_manager is None:
            raise UsageError("this controller runs no job manager")
        host = CatalogWarehouse(state.engine, state.keep, user.name)
        return submit_job(host, replace(request, executor=state.job_manager.executor_name))

    def control(self, job_id: int, action: str, user: catalog.User) -> JobRecord:
        """Ask the job's manager to cancel, pause or resume it."""
        record = get_job(self.engine, job_id)
        if not user.admin and user.name != record.submitted_by:
            raise ForbiddenError(f"job {job_id} was submitted by {record.submitted_by}")
        record = request_control(self.engine, job_id, action)
        if self.embedded is not None:
            ensure_manager(self.embedded.home, record.executor)  # a manager applies it
        return record

    def user(self, token: str) -> catalog.User | None:
        return catalog.user_for_token(self.engine, token)
