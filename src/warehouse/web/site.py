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
from dataclasses import dataclass, field
from pathlib import Path

import sqlalchemy as sa

from warehouse import catalog
from warehouse.blocks.store import BlockStore
from warehouse.collection.reader import CollectionReader
from warehouse.collection.records import load_manifest
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import UsageError
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
    # An admin token the keep servers accept (to read their /status).
    keep_token: str | None = None
    _loaded: OrderedDict[str, Loaded] = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # Per keep server: (time, requests answered) at the last look, for rates.
    samples: dict[str, tuple[float, int]] = field(default_factory=dict, repr=False)

    @classmethod
    def for_controller(cls, state: ControllerState) -> Site:
        return cls(state.engine, state.keep, "controller", keep_token=state.system_token)

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
        manifest, digests = load_manifest(self.store, self.engine, pdh)
        loaded = Loaded(manifest, digests, Tree(manifest))
        with self._lock:
            self._loaded[pdh] = loaded
            while len(self._loaded) > MANIFESTS_KEPT:
                self._loaded.popitem(last=False)
        return loaded

    def reader(self, pdh: str) -> CollectionReader:
        loaded = self.load(pdh)
        return CollectionReader(self.store, loaded.manifest, file_md5s=loaded.digests)

    def need_embedded(self) -> EmbeddedWarehouse:
        """The embedded warehouse, for what only it can do yet (running jobs)."""
        if self.embedded is None:
            raise UsageError("jobs run on the embedded warehouse only for now: use `wh web` there")
        return self.embedded

    def user(self, token: str) -> catalog.User | None:
        return catalog.user_for_token(self.engine, token)
