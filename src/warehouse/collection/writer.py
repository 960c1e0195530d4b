"""Pack a tree of files into blocks and a normalized manifest.

One stream per directory; files are concatenated into 64 MiB blocks, which
are hashed and stored on a thread pool (hashlib and file writes release the
GIL, so this uses every core). Memory stays bounded: a fixed number of block
buffers circulate between the reading thread and the workers, whatever the
size of the tree. The tree is walked a directory at a time; with a spool,
each directory's stream and its files' MD5s are written out once its blocks
are stored, so nothing of a file is held to the end of the put.

The parts: ``readahead`` walks the tree and opens small files ahead,
``packing`` fills and stores the blocks, ``emitting`` writes each
directory's stream out; this module runs them.
"""

from __future__ import annotations

from collections.abc import (
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from pathlib import Path
from typing import TYPE_CHECKING

from warehouse.blocks import MAX_BLOCK_SIZE
from warehouse.blocks.store import BlockStore, StoredBlock
from warehouse.collection.digests import digest_table
from warehouse.collection.emitting import Emitter, Kept, Packed, Sink
from warehouse.collection.filecache import CachedFile, FileCache
from warehouse.collection.packing import (
    FileChangedError,
    Packer,
    Progress,
    default_workers,
    pack_dir,
)
from warehouse.collection.readahead import ReadAhead, Todo
from warehouse.collection.scan import DirNode, LazyTree
from warehouse.collection.scratch import BlockLog, ScratchFile, SpilledHits
from warehouse.manifest import Manifest

if TYPE_CHECKING:
    from warehouse.collection.spool import Spool


__all__ = [
    "CachedFile",
    "FileCache",
    "FileChangedError",
    "WriteResult",
    "default_workers",
    "write_tree",
]


class WriteResult:
    """What a put stored.

    The manifest and each file's MD5 are held where ``write_tree`` was
    asked for them (no spool); a put through a spool has them in the spool
    and then in the catalog, and ``loader`` reads them back when asked.
    """

    def __init__(
        self,
        manifest: Manifest | None = None,
        # Every block the data needed, in order.
        blocks: BlockLog | Sequence[StoredBlock] = (),
        file_count: int = 0,
        bytes_read: int = 0,
        file_md5s: Mapping[str, str] | None = None,  # path -> MD5 of the bytes read
        # Files that changed while read, stored as read (only with allow_changing).
        changed: tuple[str, ...] = (),
        *,
        pdh: str | None = None,
        size: int | None = None,
    ) -> None:
        self._manifest = manifest
        self._file_md5s = file_md5s
        self.blocks = blocks
        self.file_count = file_count
        self.bytes_read = bytes_read
        self.changed = changed
        self._pdh = pdh
        self._size = size
        self.loader: Callable[[], tuple[Manifest, Mapping[str, str] | None]] | None = None

    def _load(self) -> None:
        if self.loader is None:
            raise RuntimeError("the manifest of this put was not kept")
        self._manifest, self._file_md5s = self.loader()
        self.loader = None

    @property
    def manifest(self) -> Manifest:
        if self._manifest is None:
            self._load()
        assert self._manifest is not None
        return self._manifest

    @property
    def file_md5s(self) -> Mapping[str, str]:
        if self._manifest is None:
            self._load()
        return self._file_md5s or {}

    @property
    def pdh(self) -> str:
        return self._pdh if self._pdh is not None else self.manifest.pdh

    @property
    def size(self) -> int:
        """Bytes of the files."""
        return self._size if self._size is not None else self.manifest.size

    @property
    def blocks_new(self) -> int:
        if isinstance(self.blocks, BlockLog):
            return self.blocks.blocks_new
        return sum(b.new for b in self.blocks)

    @property
    def bytes_new(self) -> int:
        if isinstance(self.blocks, BlockLog):
            return self.blocks.bytes_new
        return sum(b.locator.size for b in self.blocks if b.new)

    def block_writes(self) -> Iterable[tuple[str, int, bool]]:
        """(md5, size, new) of every block, in order: one accounting row each."""
        if isinstance(self.blocks, BlockLog):
            return self.blocks.rows()
        return [(b.locator.md5, b.locator.size, b.new) for b in self.blocks]


def write_tree(
    store: BlockStore,
    paths: Sequence[Path] | DirNode,
    *,
    workers: int | None = None,
    progress: Progress | None = None,
    block_size: int = MAX_BLOCK_SIZE,
    check: Callable[[], None] = lambda: None,
    allow_changing: bool = False,
    spool: Spool | None = None,
    cache: FileCache | None = None,
) -> WriteResult:
    """Store the files under ``paths`` and return the normalized manifest.

    ``check`` is called before each block is stored; what it raises stops the put.
    A file whose size or mtime changes while it is read raises
    ``FileChangedError``, unless ``allow_changing``: then what was read is
    stored and the file is listed in ``changed``.

    With a ``spool``, each directory's stream and digests are written to it
    as soon as its blocks are stored, and the result holds neither the
    manifest nor the digests (the caller records them from the spool):
    what the put holds does not grow with the file count. ``cache``: the
    files it answers for are not read; a put that fails closes it (what it
    learned is not saved). A put that fails closes its scratch files before
    it raises.
    """
    root = paths if isinstance(paths, DirNode) else LazyTree(paths)
    packer = Packer(store, workers or default_workers(), block_size, check)
    kept: Kept | None = None
    sink: Sink
    if spool is None:
        sink = kept = Kept()
    else:
        sink = spool
    emitter = Emitter(sink, cache, BlockLog(None if spool is None else spool.directory))

    # A lazy tree's every walk reads the tree anew: its nodes are this put's.
    walked = isinstance(root, LazyTree)

    def todos() -> Iterator[Todo]:
        for node in root.walk():
            hits = cache.hits(node) if cache is not None and node.files else None
            if not hits:
                files = node.files
            elif isinstance(hits, SpilledHits):
                files = node.files.without(name for name, _ in hits)
            else:
                files = node.files.only(hits.__contains__, keep=False)
            yield Todo(node, files, hits, bool(node.rel) and node.is_empty, walked)

    changed: list[str] = []
    total = 0
    todo: Todo | None = None
    made: list[ScratchFile] = []  # by the directory being packed
    reads: ReadAhead | None = None
    try:
        try:
            reads = ReadAhead(todos())
            while (todo := reads.node()) is not None:
                packer.tasks = []
                before = len(changed)
                made = []
                if todo.files:
                    blocks, segments, size, md5s = pack_dir(
                        todo.node.rel,
                        todo.files,
                        packer,
                        reads,
                        progress,
                        allow_changing,
                        changed,
                        made,
                    )
                    total += size
                elif todo.node.files or todo.marker:
                    blocks, segments, md5s = [], [], digest_table(0)
                else:
                    continue  # a directory of directories: no stream of its own
                emitter.add(Packed(todo, blocks, segments, md5s, packer.tasks, changed[before:]))
            emitter.finish()
            packer.finish()
        finally:
            if reads is not None:
                reads.close()
            packer.close()
        store.flush()
        if packer.error is not None:
            raise packer.error
    except BaseException:
        # The error's traceback holds what is open: closed now, not when it
        # is collected; the workers, which write to them, are done.
        for scratch in made:
            scratch.close()
        if todo is not None:
            todo.close()
        emitter.close()
        if cache is not None:
            cache.close()
        raise
    if kept is None:
        assert spool is not None
        return WriteResult(
            None,
            emitter.blocks,
            spool.file_count,
            total,
            None,
            tuple(changed),
            pdh=spool.pdh,
            size=spool.size,
        )
    manifest = Manifest(tuple(kept.streams))
    # Normalized stream by stream as written: formatting it again would build
    # every file's entry to find it unchanged.
    manifest.__dict__["_normalized"] = manifest
    return WriteResult(
        manifest, emitter.blocks, kept.file_count, total, kept.digests, tuple(changed)
    )
