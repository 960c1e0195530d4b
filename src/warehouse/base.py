"""What the embedded and the remote warehouse do the same way.

Subclasses say where blocks go (``store``), how a collection is recorded
(``_record``), how a name is read and swapped and how a collection's manifest
is loaded; storing a tree, naming it and getting files out is the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Self

from warehouse import catalog
from warehouse.errors import ConflictError, NotFoundError, UsageError, WarehouseError
from warehouse.keys import Key, split_key

if TYPE_CHECKING:
    # The reader, the block store and the manifest's model load where they
    # are used: `wh ls NAME` and `wh name ls` through a controller need none
    # of them (docs/latency.md).
    from warehouse.blocks.locator import Locator
    from warehouse.blocks.store import BlockStore
    from warehouse.collection.extract import ExtractedFile
    from warehouse.collection.listings import Digests
    from warehouse.collection.reader import CollectionReader
    from warehouse.collection.scan import DirNode, Filter
    from warehouse.collection.spool import Spool
    from warehouse.collection.storedtext import StoredText
    from warehouse.collection.writer import WriteResult
    from warehouse.manifest import Manifest
    from warehouse.putcache import CacheStats, PutCache

__all__ = ["BlockWrites", "NameConflictAfterPut", "PutResult", "WarehouseBase"]

Progress = Callable[[int], None]
# (md5, size, new) per block written, in order; may be iterated more than once.
BlockWrites = Iterable[tuple[str, int, bool]]


class NameConflictAfterPut(ConflictError):
    """The data is stored and recorded, but the name moved meanwhile: ``pdh``
    is what was stored, so the caller can name it."""

    def __init__(self, message: str, pdh: str, result: WriteResult) -> None:
        super().__init__(message)
        self.pdh = pdh
        self.result = result


@dataclass(frozen=True)
class PutResult:
    write: WriteResult
    name: catalog.NameRecord | None
    copies: int = 1  # the fewest copies any block of the collection got
    cached: CacheStats | None = None  # what the resume cache answered for

    @property
    def pdh(self) -> str:
        return self.write.pdh


class WarehouseBase:
    store: BlockStore

    # -- what each kind of warehouse provides --------------------------------

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _record(
        self, manifest: Manifest, file_md5s: Mapping[str, str] | None, writes: BlockWrites
    ) -> catalog.CollectionRecord:
        raise NotImplementedError

    def _collection(self, pdh: str) -> tuple[Manifest, dict[str, str] | None]:
        raise NotImplementedError

    def _collection_text(self, pdh: str) -> tuple[bytes | StoredText, Digests | None] | None:
        """Like ``_collection``, the manifest as its stored normalized text
        (read stream by stream), or None where that is not at hand."""
        return None

    def _copies(self) -> int:
        return 1

    def cache_identity(self) -> str:
        """Which store this is, for the resume cache of ``put`` (warehouse.putcache)."""
        raise NotImplementedError

    def _check(self) -> None:
        """Raise if what a put stores could not be recorded (checked per block)."""

    # Blocks hashed and stored at once by put, and fetched ahead by readers;
    # None: the defaults (one writer per core, three blocks ahead).
    writers: int | None = None
    readahead: int | None = None
    # Where a git: function's repository on this machine may be read; None:
    # anywhere (a user's own machine), a controller's hosts list its roots.
    git_roots: Sequence[str] | None = None
    # Schemes and hosts a git: function may be fetched from, with a clean
    # environment (gitcmd.check_remote); None: any, with the user's own.
    git_allow: Sequence[str] | None = None

    def get_name(self, name: str) -> catalog.NameRecord:
        raise NotImplementedError

    def set_name(
        self, name: str, pdh: str, *, expect: str | None, create: bool = False
    ) -> catalog.NameRecord:
        raise NotImplementedError

    # -- shared ----------------------------------------------------------------

    def save_manifest(
        self, manifest: Manifest, file_md5s: dict[str, str] | None = None
    ) -> catalog.CollectionRecord:
        """Record a collection whose blocks are stored. ``file_md5s`` (every
        file's MD5 as read when stored) is kept for the listing of ``get``."""
        return self._record(manifest, file_md5s, ())

    def key(self, key: str | Key) -> Key:
        """``key`` split at the name it starts with: a name may hold "/", so
        ``lab/run42/sub/f`` is the name ``lab/run42`` and the path ``sub/f``
        when ``lab/run42`` is a name this warehouse shows its user
        (docs/formats.md, "Keys")."""
        return key if isinstance(key, Key) else self._split(key)[0]

    def _split(self, text: str) -> tuple[Key, catalog.NameRecord | None]:
        """``key(text)``, and the record of its name when one was read."""
        found: dict[str, catalog.NameRecord] = {}

        def is_name(name: str) -> bool:
            record = self._shown_name(name)
            if record is not None:
                found[name] = record
            return record is not None

        k = split_key(text, is_name)
        return k, found.get(k.head)

    def _shown_name(self, name: str) -> catalog.NameRecord | None:
        """The name ``name`` if there is one its user may read, else None."""
        try:
            return self.get_name(catalog.check_name(name))
        except (NotFoundError, UsageError):
            return None

    def resolve(self, key: str | Key) -> str:
        """The PDH a key or name stands for now."""
        k, record = (key, None) if isinstance(key, Key) else self._split(key)
        if k.is_pdh:
            return k.head
        return (record or self.get_name(catalog.check_name(k.head))).pdh

    def manifest(self, key: str | Key) -> Manifest:
        return self._collection(self.resolve(key))[0]

    def reader(self, key: str | Key, *, one_pass: bool = False) -> CollectionReader:
        """A reader of the collection; ``one_pass``: it reads each block once
        (as a get does), so the blocks are not kept in the RAM cache."""
        from warehouse.collection.reader import DEFAULT_READAHEAD, CollectionReader

        pdh = self.resolve(key)
        readahead = DEFAULT_READAHEAD if self.readahead is None else self.readahead
        # A one-pass reader (a get) goes through the files once, in order: the
        # text is enough, and a million files' table is never built.
        if one_pass and (stored := self._collection_text(pdh)) is not None:
            text, digests = stored
            return CollectionReader(
                self.store,
                None,
                normal_text=text,
                file_md5s=digests,
                one_pass=True,
                readahead=readahead,
                pdh=pdh,
            )
        manifest, digests = self._collection(pdh)
        return CollectionReader(
            self.store, manifest, file_md5s=digests, one_pass=one_pass, readahead=readahead
        )

    def scan(self, paths: Sequence[Path], keep: Filter | None = None) -> DirNode:
        """The tree a put of ``paths`` stores, read as the put walks it."""
        from warehouse.collection.scan import LazyTree

        return LazyTree(paths, keep)

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
    ) -> PutResult:
        """Store a tree; optionally point ``name`` at it (``expect``: its current PDH).

        The name is checked before anything is read. ``replace``: move the
        name from whatever it held when the put started (compare-and-swap
        against that). A conflict found only after the data is stored raises
        ``NameConflictAfterPut`` carrying the stored PDH.
        ``allow_changing``: store a file that changed while it was read as
        read, instead of failing (see ``write_tree``).
        ``cache``: files it vouches for are not read again (warehouse.putcache).
        """
        # Here, not at the top: a command that only reads (`wh ls`, `wh name
        # ls`) does not load the writer (docs/latency.md).
        from warehouse.collection.scan import DirNode
        from warehouse.collection.writer import write_tree

        if replace and (expect is not None or create):
            raise UsageError("replace cannot be combined with expect or create")
        if isinstance(paths, str | PathLike):
            # One path, not a sequence of one-letter paths.
            paths = [Path(paths)]
        tree = paths if isinstance(paths, DirNode) else self.scan([Path(p) for p in paths])
        if name is not None:
            current = self._precheck_name(name, expect, create)
            if replace:
                expect, create = current, current is None
            elif expect is None and not create and current is not None:
                self._same_shape_or_conflict(name, current, tree)

        session = None
        if cache is not None:
            from warehouse.putcache import CacheSession

            session = CacheSession(cache, self.store)
        spool = self._spool()
        try:
            result = write_tree(
                self.store,
                tree,
                progress=progress,
                workers=self.writers,
                check=self._check,
                allow_changing=allow_changing,
                spool=spool,
                cache=session,
            )
            cached = None if session is None else session.finish()
            # Read back from the put's scratch file past a few thousand blocks.
            writes = result.block_writes()
            if spool is None:
                self._record(result.manifest, result.file_md5s, writes)
            else:
                self._record_spool(spool, writes)
                pdh = result.pdh
                result.loader = lambda: self._collection(pdh)
        finally:
            if spool is not None:
                spool.close()
        record = None
        if name is not None:
            try:
                record = self.set_name(name, result.pdh, expect=expect, create=create)
            except ConflictError as e:
                raise NameConflictAfterPut(
                    f"{e}; the data is stored as {result.pdh}", result.pdh, result
                ) from None
        return PutResult(result, record, self._copies(), cached)

    def _same_shape_or_conflict(self, name: str, current: str, tree: DirNode) -> None:
        """Without --expect, a name that exists may only already hold this very
        data. Its files' paths and sizes are known before reading: if they
        differ from the tree's, the PDH will too, so fail now."""
        try:
            held = {p: f.size for p, f in self.manifest(current).files().items()}
        except WarehouseError:
            return  # cannot tell now: the compare-and-swap after the write decides
        mine = {
            f"{d.rel}/{n}" if d.rel else n: size for d in tree.survey() for n, _, size in d.files
        }
        if held != mine:
            raise ConflictError(
                f"name {name!r} holds {current}, other data than these files: "
                f"give --expect {current} or --replace to move it"
            )

    def _spool(self) -> Spool | None:
        """Where a put writes its manifest text and listing as it goes; None:
        this kind of warehouse records a manifest held whole (``_record``)."""
        return None

    def _record_spool(self, spool: Spool, writes: BlockWrites) -> catalog.CollectionRecord:
        """Record the collection a put wrote to ``spool`` (see ``_spool``)."""
        raise NotImplementedError

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
            self._precheck_name(name, expect, create)
        record = self.save_manifest(manifest)
        if name is not None:
            self.set_name(name, record.pdh, expect=expect, create=create)
        return record

    def put_manifest_text(
        self,
        text: bytes,
        *,
        name: str | None = None,
        expect: str | None = None,
        create: bool = False,
    ) -> catalog.CollectionRecord:
        """``put_manifest`` of manifest text (checked strictly, ManifestError naming
        the line and token at fault)."""
        if name is not None:
            self._precheck_name(name, expect, create)
        record = self._record_text(text)
        if name is not None:
            self.set_name(name, record.pdh, expect=expect, create=create)
        return record

    def put_manifest_file(
        self,
        f: BinaryIO,
        limit: int,
        *,
        name: str | None = None,
        expect: str | None = None,
        create: bool = False,
    ) -> catalog.CollectionRecord:
        """``put_manifest_text`` of the text read from ``f`` (at most ``limit``
        bytes). Text in normalized form (what ``wh manifest`` writes) is read
        and checked a line at a time into a put's spool and recorded from
        there, as a put records its own: it is never held whole. Other text
        is read whole and normalized, as ``put_manifest_text`` does."""
        if name is not None:
            self._precheck_name(name, expect, create)
        record = self._record_file(f, limit)
        if name is not None:
            self.set_name(name, record.pdh, expect=expect, create=create)
        return record

    def _record_file(self, f: BinaryIO, limit: int) -> catalog.CollectionRecord:
        spool = self._spool()
        if spool is None:
            # In chunks: one read of the limit would reserve all of it.
            text = bytearray()
            while chunk := f.read(min(1 << 24, limit - len(text) + 1)):
                text += chunk
                if len(text) > limit:
                    raise UsageError(f"manifest is over {limit} bytes")
            return self._record_text(bytes(text))
        from warehouse.collection.records import spool_normal_text

        try:
            whole = spool_normal_text(spool, f, limit, self._block_check())
            if whole is not None:
                spool.close()  # its scratch files are not needed any more
                return self._record_text(whole)
            return self._record_text_spool(spool)
        finally:
            spool.close()

    def _block_check(self) -> Callable[[Locator], bool] | None:
        """Whether a block of manifest text put is stored; None: not asked
        here (a controller checks each block's signature instead)."""
        return None

    def _record_text_spool(self, spool: Spool) -> catalog.CollectionRecord:
        """Record the collection of manifest text copied to ``spool``
        (normalized, every block stored): no listing, no block writes."""
        raise NotImplementedError

    def _record_text(self, text: bytes) -> catalog.CollectionRecord:
        """Record a collection from its manifest text; each kind of warehouse
        may do it without building the whole manifest."""
        from warehouse.manifest import Manifest

        return self.save_manifest(Manifest.parse(text))

    def manifest_text(self, key: str | Key) -> bytes | None:
        """The collection's stored manifest text (portable, normalized), verified
        against its PDH; None where it is not at hand that way (then use
        ``manifest``)."""
        return None

    def stored_text(self, key: str | Key) -> bytes | StoredText | None:
        """Like ``manifest_text``, but possibly in a scratch file (read it a
        line at a time; the caller closes it), not held."""
        return self.manifest_text(key)

    def _precheck_name(self, name: str, expect: str | None, create: bool) -> str | None:
        """What the name holds now; ConflictError if that already fails the swap.

        Fails before reading a terabyte when the name is known to conflict;
        the compare-and-swap after the write is what decides.
        """
        catalog.check_name(name)
        try:
            current: str | None = self.get_name(name).pdh
        except NotFoundError:
            current = None
        if (expect is not None or create) and current != expect:
            raise ConflictError(catalog.conflict_message(name, current, expect))
        return current

    def get(
        self,
        key: str,
        dest: Path | None,
        *,
        force: bool = False,
        rehash: bool = False,
        progress: Progress | None = None,
    ) -> list[ExtractedFile]:
        from warehouse.collection.extract import extract

        k = self.key(key)
        with self.reader(k, one_pass=True) as reader:
            return extract(
                reader, dest, subpath=k.path, force=force, rehash=rehash, progress=progress
            )
