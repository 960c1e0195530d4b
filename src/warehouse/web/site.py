"""What the pages read from: the catalog, a block store and, embedded, the warehouse.

A ``Site`` is made once per app, either over the controller's state (``wh
serve``) or over an embedded warehouse (``wh web``). A collection's outline
(its directories, from one pass over the stored manifest text; nothing per
file) is made once and kept among the last used, within a byte budget (a PDH
names immutable content). A page, a download or a folder's archive then
reads only the streams it needs from the stored text.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import sqlalchemy as sa

from warehouse import catalog
from warehouse.blocks import Locator
from warehouse.blocks.store import BlockStore
from warehouse.blocks.volume import LocalVolume
from warehouse.collection.reader import CollectionReader
from warehouse.collection.records import load_manifest_text, manifest_from_blocks
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import ForbiddenError, NotFoundError, UsageError
from warehouse.jobs.controllerhost import CatalogWarehouse
from warehouse.jobs.jobrecords import JobRecord
from warehouse.jobs.jobstore import get_job, request_control
from warehouse.jobs.runmanager import ensure_manager
from warehouse.jobs.submission import JobRequest
from warehouse.jobs.submission import submit as submit_job
from warehouse.manifest import Manifest
from warehouse.server.controller.state import ControllerState
from warehouse.web.tree import DIRECTORY_BYTES, Listing, Outline, listing

__all__ = ["OUTLINE_BUDGET", "Outlined", "Site"]

# Bytes of outlines kept: their directories and, when it fits, the manifest
# text (a million files' is 12 MB), so that a page slices its stream out of
# it; a text that does not fit is read again, only its blocks holding the
# stream shown.
OUTLINE_BUDGET = 64 << 20


@dataclass(frozen=True)
class Outlined:
    """A collection's outline and where its normalized manifest text is."""

    outline: Outline
    # The stored text's blocks with the offset each starts at (none for text
    # stored some other way), and the normalized text if it is held.
    blocks: tuple[tuple[int, Locator], ...]
    text: bytes | None
    normalized_here: bool = False  # stored some other way: normalized and held

    @property
    def cost(self) -> int:
        held = 0 if self.text is None else len(self.text)
        return held + DIRECTORY_BYTES * self.outline.directories


@dataclass
class Site:
    engine: sa.Engine
    _store: Callable[[], BlockStore]
    kind: str  # "controller" or "embedded"
    embedded: EmbeddedWarehouse | None = None
    controller: ControllerState | None = None
    # An admin token the keep servers accept (to read their /status).
    keep_token: str | None = None
    _outlined: OrderedDict[str, Outlined] = field(default_factory=OrderedDict, repr=False)
    _outlined_bytes: int = field(default=0, repr=False)
    _making: dict[str, threading.Lock] = field(default_factory=dict, repr=False)
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
        """The embedded warehouse's local volume (none for a controller or an S3 volume)."""
        if self.embedded is None or not isinstance(self.embedded.volume, LocalVolume):
            return []
        return [self.embedded.volume.root]

    def outlined(self, pdh: str) -> Outlined:
        """A collection's outline, made once and kept among the last used.

        Requests for one collection that come while its outline is being
        made wait for it, instead of each making one (and holding its text).
        """
        with self._lock:
            found = self._kept(pdh)
            if found is not None:
                return found
            making = self._making.setdefault(pdh, threading.Lock())
        try:
            with making:
                with self._lock:
                    found = self._kept(pdh)  # made while this one waited
                if found is not None:
                    return found
                made = self._outline(pdh)
                with self._lock:
                    self._keep(pdh, made)
                return made
        finally:
            with self._lock:
                self._making.pop(pdh, None)

    def _kept(self, pdh: str) -> Outlined | None:
        found = self._outlined.get(pdh)
        if found is not None:
            self._outlined.move_to_end(pdh)
        return found

    def _keep(self, pdh: str, made: Outlined) -> None:
        if made.cost > OUTLINE_BUDGET or pdh in self._outlined:
            return
        self._outlined[pdh] = made
        self._outlined_bytes += made.cost
        while self._outlined_bytes > OUTLINE_BUDGET:
            _, dropped = self._outlined.popitem(last=False)
            self._outlined_bytes -= dropped.cost

    def _outline(self, pdh: str) -> Outlined:
        text = load_manifest_text(self.store, self.engine, pdh)
        if text is not None:
            blocks: list[tuple[int, Locator]] = []
            offset = 0
            for s in catalog.get_collection(self.engine, pdh).manifest_blocks.split():
                locator = Locator.parse(s)
                blocks.append((offset, locator))
                offset += locator.size
            outline = Outline(text)
            held = len(text) + DIRECTORY_BYTES * outline.directories <= OUTLINE_BUDGET
            return Outlined(outline, tuple(blocks), text if held else None)
        # Stored some other way (not normalized): parsed whole, normalized and held.
        record = catalog.get_collection(self.engine, pdh)
        manifest = manifest_from_blocks(self.store, pdh, record.manifest_blocks)
        normal = manifest.normalized().portable_text().encode()
        return Outlined(Outline(normal), (), normal, normalized_here=True)

    def _read(self, outlined: Outlined, span: tuple[int, int]) -> bytes:
        """Bytes ``span`` of the normalized text: only the blocks holding them."""
        first, end = span
        if outlined.text is not None:
            return outlined.text[first:end]
        pieces: list[bytes] = []
        for offset, locator in outlined.blocks:
            if offset < end and offset + locator.size > first:
                data = self.store.get(locator)  # verified (or cached verified)
                pieces.append(bytes(data[max(first - offset, 0) : end - offset]))
        return b"".join(pieces)

    def listing(self, pdh: str, path: str) -> tuple[Outline, Listing]:
        """Directory ``path`` of a collection: its outline and its entries."""
        outlined = self.outlined(pdh)
        outline = outlined.outline
        span = outline.stream_span(path) if outline.is_dir(path) else None
        stream = None if span is None else self._read(outlined, span)
        return outline, listing(outline, path, stream)

    def manifest_text(self, pdh: str) -> bytes:
        """The collection's manifest text, as stored (its MD5 is the PDH's)."""
        outlined = self.outlined(pdh)
        if outlined.normalized_here:  # stored some other way: formatted as parsed
            record = catalog.get_collection(self.engine, pdh)
            return manifest_from_blocks(self.store, pdh, record.manifest_blocks).format().encode()
        return self._read(outlined, (0, outlined.outline.text_bytes))

    def file_reader(self, pdh: str, path: str) -> CollectionReader:
        """A reader of the one stream that holds file ``path``."""
        path = path.strip("/")
        outlined = self.outlined(pdh)
        span = outlined.outline.stream_span(path.rpartition("/")[0])
        reader = None if span is None else self._part(outlined, span)
        if reader is None or path not in reader.files:
            raise NotFoundError(f"no file {path!r} in collection {pdh}")
        return reader

    def folder_reader(self, pdh: str, folder: str) -> CollectionReader:
        """A reader of the streams of ``folder`` and below ("": all of them),
        over their text, read a stream at a time (``iter_streams``): an
        archive of the whole of a million files makes no table of them."""
        folder = folder.strip("/")
        outlined = self.outlined(pdh)
        span = outlined.outline.tree_span(folder) if outlined.outline.is_dir(folder) else None
        if span is None:
            if folder:
                raise NotFoundError(f"no folder {folder!r} in collection {pdh}")
            return CollectionReader(self.store, Manifest(()))
        text = self._read(outlined, (span[0], span[1] + 1))
        return CollectionReader(self.store, None, normal_text=text, pdh=pdh)

    def _part(self, outlined: Outlined, span: tuple[int, int]) -> CollectionReader:
        # The streams' own lines: paths stay the collection's.
        text = self._read(outlined, (span[0], span[1] + 1))
        return CollectionReader(self.store, Manifest.parse(text))

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
        host = CatalogWarehouse(
            state.engine, state.keep, user.name, state.config.git_roots, state.config.git_allow
        )
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
