"""The embedded warehouse: a volume and a SQLite catalog under ``$WH_HOME``.

Layout: ``blocks/`` (the volume, unless ``$WH_VOLUME`` names another: a
directory or an S3 bucket), ``warehouse.db`` (the catalog), ``tmp/``
(a put's unnamed scratch files, see ``collection.scratch``). Created on
first use. An S3 volume reads through the node's disk cache
(``blocks.diskcache``, docs/s3.md).
"""

from __future__ import annotations

import errno
import getpass
import logging
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from warehouse import catalog
from warehouse.base import BlockWrites, PutResult, WarehouseBase
from warehouse.blocks.cache import DEFAULT_CACHE_BYTES, BlockCache
from warehouse.blocks.nodecache import configured_caches
from warehouse.blocks.store import LocalBlockStore
from warehouse.blocks.volume import LocalVolume
from warehouse.collection.listings import Digests
from warehouse.collection.records import (
    copy_stored_text,
    load_manifest,
    load_manifest_text,
    load_normal_text,
    load_stored_text,
    manifest_from_blocks,
    store_manifest,
    store_portable,
    store_spooled,
)
from warehouse.collection.scratch import scratch_dir
from warehouse.collection.spool import Spool
from warehouse.collection.storedtext import StoredText
from warehouse.embeddedsharing import EmbeddedSharing
from warehouse.errors import NotFoundError, UsageError, WarehouseError, os_error
from warehouse.keys import Key
from warehouse.manifest import Manifest
from warehouse.manifest.normal import normal_summary
from warehouse.private import private_dir
from warehouse.volumes.base import Volume, is_s3_spec, open_volume
from warehouse.volumes.home import home_volume, record_volume
from warehouse.volumes.store import VolumeBlockStore

if TYPE_CHECKING:
    import sqlalchemy as sa

    from warehouse.blocks.locator import Locator
    from warehouse.catalog.lite import LiteCatalog

__all__ = ["EmbeddedWarehouse", "PutResult", "default_home"]

Progress = Callable[[int], None]
_T = TypeVar("_T")


def default_home() -> Path:
    env = os.environ.get("WH_HOME")
    if env:
        return Path(env).expanduser()  # "~/wh" as a shell would read it
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local/share")
    return Path(data) / "warehouse"


# What a warehouse home holds once used; a directory holding other files and
# none of these is someone's, not a warehouse: it is not taken over (made
# private, filled with a catalog) because WH_HOME named it by mistake.
_HOME_MARKS = ("warehouse.db", "blocks", "volume")


def _refuse_foreign(home: Path) -> None:
    try:
        with os.scandir(home) as entries:
            names = {e.name for e in entries}
    except (FileNotFoundError, NotADirectoryError):
        return  # made below, or refused there as not a directory
    except OSError:
        return  # unreadable: private_dir and the catalog say why
    if names and not any(mark in names for mark in _HOME_MARKS):
        raise UsageError(
            f"{home} holds other files and no warehouse: "
            "give WH_HOME a new or empty directory (or an existing warehouse)"
        )


def _volume_store(
    home: Path, cache: BlockCache
) -> tuple[Volume, LocalBlockStore | VolumeBlockStore]:
    """The volume ``$WH_VOLUME`` names (settings: ``volume``; the home records
    it on first use), else ``blocks/`` in the home, and its block store: a
    directory's overlaps fsyncs and maps big blocks; any other volume's asks
    only the volume interface."""
    wanted = os.environ.get("WH_VOLUME", "").strip()
    if wanted and not is_s3_spec(wanted):
        wanted = str(Path(wanted).expanduser().absolute())  # the same from any directory
    spec, new = home_volume(home, wanted)
    # A bucket is checked when the home first records it, not by every
    # command: a warm read from the disk cache then sends no request at all.
    volume = open_volume(spec, check=new) if spec else LocalVolume(home / "blocks")
    if new:  # only once it opened: a bucket that is not there is not recorded
        record_volume(home, spec)
    if isinstance(volume, LocalVolume):
        # Its blocks are on a local disk already: a disk cache would copy them.
        return volume, LocalBlockStore(volume, cache)
    return volume, VolumeBlockStore(volume, cache, configured_caches())


_log = logging.getLogger("warehouse.embedded")


class EmbeddedWarehouse(WarehouseBase, EmbeddedSharing):
    def __init__(
        self,
        home: Path | None = None,
        *,
        user: str | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self.home = Path(home) if home is not None else default_home()
        _refuse_foreign(self.home)
        private_dir(self.home)
        self.user = user or os.environ.get("WH_USER") or getpass.getuser()
        self.volume: Volume
        self.store: LocalBlockStore | VolumeBlockStore
        self.volume, self.store = _volume_store(self.home, BlockCache(cache_bytes))
        self._engine: Future[sa.Engine] | None = None
        self._opened: sa.Engine | None = None
        self._open_lock = threading.Lock()
        self._lite: LiteCatalog | None = None
        self._lite_tried = False
        # Set once this process wrote the catalog (a put, a name): it then
        # folds the usage spool as it closes, a read never does.
        self.wrote_catalog = False
        if self.open_catalog_at_once:
            self._opening()

    # Loading SQLAlchemy and migrating the catalog takes a few tenths of a
    # second: a put starts it while it reads and hashes files (``_spool``);
    # a command that only reads a name or a manifest reads them through
    # sqlite3 (``_reads``) and loads no SQLAlchemy (docs/latency.md).
    open_catalog_at_once = False

    def _reads(self) -> LiteCatalog | None:
        """The catalog's hot reads without SQLAlchemy: while no engine is
        open here and the catalog file is at the newest schema; else None
        (the engine then reads, and migrates what needs it)."""
        if self._engine is not None:
            return None
        with self._open_lock:
            if not self._lite_tried:
                from warehouse.catalog.lite import LiteCatalog

                self._lite_tried = True
                self._lite = LiteCatalog.open(self.home / "warehouse.db")
            return self._lite

    def _opening(self) -> Future[sa.Engine]:
        with self._open_lock:
            if self._engine is None:
                opener = ThreadPoolExecutor(1, thread_name_prefix="wh-catalog")
                self._engine = opener.submit(self._open_catalog)
                opener.shutdown(wait=False)
            return self._engine

    def _open_catalog(self) -> sa.Engine:
        import sqlalchemy as sa

        path = self.home / "warehouse.db"
        engine = catalog.open_engine(f"sqlite:///{path}")
        try:
            catalog.upgrade(engine)
        except sa.exc.DBAPIError as e:
            engine.dispose()
            raise WarehouseError(f"cannot open the catalog {path}: {e.orig}") from e
        except BaseException:
            engine.dispose()
            raise
        return engine

    @property
    def engine(self) -> sa.Engine:
        """The catalog, once it is open (an error opening it is raised here).

        Do not fork before the catalog is open: the child would wait for a
        thread it does not have.
        """
        if self._opened is not None:  # the manager asks for it at every step
            return self._opened
        try:
            self._opened = self._opening().result()
            return self._opened
        except WarehouseError as e:
            # A fresh error each time: re-raising the stored one would grow
            # its traceback with every call in a long-running process.
            raise WarehouseError(str(e)) from e.__cause__

    def _check(self) -> None:
        # A put stops at its next block once the catalog is known to be
        # unusable, rather than store the whole tree for nothing.
        if self._engine is not None and self._engine.done():
            self.engine  # noqa: B018 - raises the error opening it

    def cache_identity(self) -> str:
        return f"home:{self.home.resolve()}"

    def close(self) -> None:
        self.store.close()  # its writes finished first: their bytes are counted
        self.record_volume_usage()
        if self._lite is not None:
            self._lite.close()
        if self._engine is not None and self._engine.exception() is None:
            self._engine.result().dispose()

    def record_volume_usage(self) -> None:
        """Leave what this process asked of its volume since the last call in
        the home's usage spool (docs/usage.md, "The spool"); nothing if it
        asked nothing. The catalog is not opened for it: a process that
        wrote its catalog (``wrote_catalog``) folds the spool in too. Best
        effort: a record that cannot be left does not fail the command that
        closes (the counts are kept)."""
        taken = self.volume.counts.take()
        if taken:
            from warehouse.catalog.volumespool import spool_taken  # no database library

            try:
                spool_taken(self.home, self.volume.name, taken)
            except OSError as e:
                self.volume.counts.give_back(taken)
                _log.warning("could not record the usage of volume %s: %s", self.volume.name, e)
        if self.wrote_catalog and self._opened is not None:
            self.fold_volume_usage()

    def fold_volume_usage(self) -> None:
        """Fold the home's usage spool into the catalog's ``volume_usage``."""
        from warehouse.catalog.volumeusage import fold_spool

        volume = self.volume
        held = getattr(volume, "stored_bytes", None)

        def walk(name: str) -> int | None:
            if name != volume.name:
                return None  # another volume's (the home's volume changed): not ours to list
            return int(held()) if callable(held) else sum(s.size for s in volume.index())

        try:
            fold_spool(self.engine, self.home, walk)
        except Exception as e:  # also a database's own errors (SQLAlchemy not imported here)
            _log.warning("could not fold the usage spool: %s", e)

    # -- collections ---------------------------------------------------------

    def _record(
        self, manifest: Manifest, file_md5s: Mapping[str, str] | None, writes: BlockWrites
    ) -> catalog.CollectionRecord:
        # Nothing dangling is recorded: every block must be stored.
        for loc in manifest.blocks():
            if not self.store.exists(loc):
                raise NotFoundError(f"block {loc.key} of the manifest is not stored")
        self.wrote_catalog = True
        catalog.record_block_writes(self.engine, self.user, writes)
        return store_manifest(self.store, self.engine, manifest, self.user, file_md5s)

    def _spool(self) -> Spool:
        self._opening()  # while the put reads and hashes (see open_catalog_at_once)
        try:
            return Spool(scratch_dir(self.home))
        except OSError as e:
            raise os_error(e, f"cannot make a put's scratch files in {self.home / 'tmp'}") from None

    def _record_spool(self, spool: Spool, writes: BlockWrites) -> catalog.CollectionRecord:
        # Every block of the data was stored by this put, or found stored
        # (by the store or the resume cache) before it: nothing dangles.
        self.wrote_catalog = True
        catalog.record_block_writes(self.engine, self.user, writes)
        return store_spooled(self.store, self.engine, spool, self.user)

    def _block_check(self) -> Callable[[Locator], bool]:
        return self.store.exists

    def _record_text_spool(self, spool: Spool) -> catalog.CollectionRecord:
        self.wrote_catalog = True
        return store_spooled(self.store, self.engine, spool, self.user, listing=False)

    def _record_text(self, text: bytes) -> catalog.CollectionRecord:
        # Normalized text (what every writer produces) is checked and stored
        # stream by stream, without the whole file table; other text is
        # parsed whole and normalized.
        self.wrote_catalog = True
        summary = normal_summary(text)
        if summary is None:
            return self.save_manifest(Manifest.parse(text))
        for loc in summary.blocks:
            if not self.store.exists(loc):
                raise NotFoundError(f"block {loc.key} of the manifest is not stored")
        return store_portable(
            self.store,
            self.engine,
            summary.pdh,
            summary.portable,
            size=summary.size,
            file_count=summary.file_count,
            user=self.user,
        )

    def manifest_text(self, key: str | Key) -> bytes | None:
        return load_manifest_text(self.store, self.engine, self.resolve(key))

    def bare_manifest(self, key: str | Key) -> Manifest:
        """The manifest alone, without the user's file digests (which only a
        check of whole files needs): through sqlite3 while no engine is open
        (a small ``wh query``, docs/latency.md)."""
        pdh = self.resolve(key)
        if (reads := self._reads()) is not None:
            return manifest_from_blocks(self.store, pdh, reads.manifest_blocks(pdh))
        return self.manifest(pdh)

    def stored_text(self, key: str | Key) -> StoredText | None:
        pdh = self.resolve(key)
        if (reads := self._reads()) is not None:
            blocks = reads.manifest_blocks(pdh)
            return self._scratch_copy(lambda d: copy_stored_text(self.store, pdh, blocks, d))
        return self._scratch_copy(lambda d: load_stored_text(self.store, self.engine, pdh, d))

    def _scratch_copy(self, load: Callable[[Path | None], _T]) -> _T:
        """``load`` a manifest into the warehouse's scratch directory, or
        into the system's when that one is full: the text held whole (as a
        read once was) needed no room there, so a full one fails no read
        that the system's has room for."""
        directory = self._text_scratch()
        try:
            return load(directory)
        except OSError as e:
            if directory is None or e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
        return load(None)

    def _text_scratch(self) -> Path | None:
        """Where a reader copies a stored manifest: the warehouse's scratch
        directory, or the system's where that cannot be made (a reader
        with no right to write the warehouse's home)."""
        try:
            path = scratch_dir(self.home)
        except OSError:
            return None
        return path if os.access(path, os.W_OK | os.X_OK) else None

    def _collection(self, pdh: str) -> tuple[Manifest, dict[str, str] | None]:
        return load_manifest(self.store, self.engine, pdh, self.user)

    def _collection_text(self, pdh: str) -> tuple[bytes | StoredText, Digests | None] | None:
        return self._scratch_copy(
            lambda d: load_normal_text(self.store, self.engine, pdh, self.user, d)
        )

    # -- names ---------------------------------------------------------------

    def set_name(
        self, name: str, pdh: str, *, expect: str | None, create: bool = False
    ) -> catalog.NameRecord:
        self.wrote_catalog = True
        return catalog.set_name(
            self.engine, name, pdh, expect=expect, create=create, user=self.user
        )

    def get_name(self, name: str) -> catalog.NameRecord:
        if (reads := self._reads()) is not None:
            return reads.get_name(name)
        return catalog.get_name(self.engine, name)

    def list_names(self, prefix: str = "") -> list[catalog.NameRecord]:
        if (reads := self._reads()) is not None:
            return reads.list_names(prefix)
        return catalog.list_names(self.engine, prefix)

    def name_log(self, name: str) -> list[catalog.NameChange]:
        return catalog.name_log(self.engine, name)

    def remove_name(self, name: str, *, expect: str) -> catalog.NameChange:
        return catalog.remove_name(self.engine, name, expect=expect, user=self.user)

    def name_writers(self, name: str) -> list[str]:
        return catalog.list_writers(self.engine, name)

    def add_name_writer(self, name: str, writer: str) -> None:
        # No user accounts here (users are the system's): the name alone is checked.
        catalog.add_writer(self.engine, name, writer, user=self.user)

    def remove_name_writer(self, name: str, writer: str) -> None:
        catalog.remove_writer(self.engine, name, writer, user=self.user)

    def accounting(self, since: float = 0.0) -> list[catalog.AccountingRow]:
        return catalog.accounting(self.engine, since)
