"""A query or table step's input files, as DuckDB reads them (``steps``).

A file that is one whole block of a local store is read where it lies, held
open, after its MD5 is checked over the same open file (every such block at
once, a share per core); a many-block Parquet file of a local store through
the block filesystem (``blockfs``), each block checked when DuckDB first
touches it, the column chunks of the columns a query reads checked
together; any other file is copied into the step's scratch directory
through the verifying reader. The state is the step's (one per process).
"""

from __future__ import annotations

import json
import mmap
import os
import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warehouse.blocks.store import BlockStore, LocalBlockStore
from warehouse.collection.reader import CollectionReader
from warehouse.manifest import FileEntry
from warehouse.native.md5 import md5_many

if TYPE_CHECKING:
    from warehouse.query.blockfs import BlockFiles

__all__ = [
    "check_blocks",
    "check_blocks_later",
    "columns_read",
    "copied_bytes",
    "fetch_files",
    "held_fds",
    "in_place",
    "lazy_failed",
    "lazy_files",
    "name_columns",
    "share_out",
    "step_cores",
    "verify_open",
]


def step_cores() -> int:
    return max(1, len(os.sched_getaffinity(0)))


# Block files held open while DuckDB reads them through /proc/self/fd: the
# bytes read are those of the inode whose MD5 was checked.
held_fds: list[int] = []
copied_bytes = [0]  # bytes this step copied to scratch rather than read in place
in_place: dict[str, str | None] = {}  # block MD5 -> where DuckDB reads it (None: copy)
lazy_files: list[BlockFiles] = []  # the step's many-block files, once one is read
# Table -> whether the query names each of its columns (which column chunks
# of a partition to check together), where the query's params list them.
columns_read: dict[str, list[bool]] = {}


def block_files(store: LocalBlockStore) -> BlockFiles:
    if not lazy_files:
        from warehouse.query.blockfs import BlockFiles

        lazy_files.append(BlockFiles(store.volume))
    return lazy_files[0]


def lazy_path(store: BlockStore, entry: FileEntry) -> str | None:
    """Where DuckDB reads a many-block Parquet file of a local store, each
    block checked as it is first touched; None for any other file."""
    if not isinstance(store, LocalBlockStore) or not entry.path.endswith(".parquet"):
        return None
    if len(entry.pieces) < 2:
        return None
    from warehouse.query.blockfs import lazy_layout

    layout = lazy_layout(entry)
    if layout is None:
        return None
    return block_files(store).add(entry.path, layout, columns_read.get(entry.path.split("/", 1)[0]))


def lazy_failed() -> None:
    """Raise the first failed check of a block DuckDB read, if any."""
    if lazy_files and lazy_files[0].error is not None:
        raise lazy_files[0].error


def one_block(store: BlockStore, entry: FileEntry) -> str | None:
    """The MD5 of the block a file of a local store is, whole; None otherwise."""
    if not isinstance(store, LocalBlockStore) or len(entry.pieces) != 1:
        return None
    piece = entry.pieces[0]
    if piece.offset != 0 or piece.length != piece.locator.size or not piece.length:
        return None
    return piece.locator.md5


def open_block(store: LocalBlockStore, md5: str, size: int) -> int | None:
    """A descriptor of the block file (held for the step), or None if it is
    not here whole (the file is then copied: the reader says why)."""
    try:
        fd = os.open(store.volume.path_for(md5), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        whole = os.fstat(fd).st_size == size
    except OSError:
        whole = False
    if not whole:
        os.close(fd)
        return None
    held_fds.append(fd)
    return fd


def verify_open(blocks: Sequence[tuple[int, str, int]]) -> list[bool]:
    """Whether each open block (descriptor, MD5, size) hashes to its MD5,
    over the very inode DuckDB reads; all in one call of ``md5_many``."""
    maps: list[mmap.mmap | None] = []
    try:
        for fd, _, size in blocks:
            try:
                maps.append(mmap.mmap(fd, size, prot=mmap.PROT_READ))
            except OSError:
                maps.append(None)
        sums = iter(md5_many([m for m in maps if m is not None]))
        return [
            m is not None and next(sums).hex() == md5
            for m, (_, md5, _) in zip(maps, blocks, strict=True)
        ]
    finally:
        for m in maps:
            if m is not None:
                m.close()


def share_out(blocks: Sequence[tuple[int, str, int]], n: int) -> list[list[tuple[int, str, int]]]:
    """``blocks`` dealt into at most ``n`` shares of about equal bytes."""
    shares: list[list[tuple[int, str, int]]] = [[] for _ in range(min(n, len(blocks)))]
    loads = [0] * len(shares)
    for block in sorted(blocks, key=lambda b: -b[2]):
        k = loads.index(min(loads))
        shares[k].append(block)
        loads[k] += block[2]
    return shares


def whole_blocks(store: BlockStore, entries: Iterable[FileEntry]) -> list[tuple[int, str, int]]:
    """The whole blocks of ``entries`` not checked yet, opened (descriptor,
    MD5, size); ``in_place`` says ``None`` for any not here whole (copied)."""
    todo: dict[str, int] = {}
    for entry in entries:
        md5 = one_block(store, entry)
        if md5 is not None and md5 not in in_place:
            todo[md5] = entry.size
    if not todo:
        return []
    assert isinstance(store, LocalBlockStore)
    opened = []
    for md5, size in todo.items():
        fd = open_block(store, md5, size)
        in_place[md5] = None if fd is None else f"/proc/self/fd/{fd}"
        if fd is not None:
            opened.append((fd, md5, size))
    return opened


def check_blocks_later(store: BlockStore, entries: Iterable[FileEntry]) -> Callable[[], list[str]]:
    """Open the whole blocks of ``entries`` for DuckDB now and check them on
    threads meanwhile; the function returned waits for the checks and gives
    the MD5s that failed (those are then copied, like any other file)."""
    opened = whole_blocks(store, entries)
    if not opened:
        return list
    shares = share_out(opened, step_cores())
    pool = ThreadPoolExecutor(len(shares), thread_name_prefix="wh-md5")
    checks = [(share, pool.submit(verify_open, share)) for share in shares]
    pool.shutdown(wait=False)

    def failed() -> list[str]:
        bad = [
            md5
            for share, check in checks
            for (_, md5, _), ok in zip(share, check.result(), strict=True)
            if not ok
        ]
        for md5 in bad:
            in_place[md5] = None
        return bad

    return failed


def check_blocks(store: BlockStore, entries: Iterable[FileEntry]) -> None:
    """Check every whole block of ``entries`` not checked yet, all at once: a
    share of them per core, each share in one ``md5_many`` call (no GIL held);
    one that fails is copied instead (the reader reports the corrupt copy and
    moves it aside)."""
    opened = whole_blocks(store, entries)
    if not opened:
        return
    shares = share_out(opened, step_cores())
    with ThreadPoolExecutor(len(shares)) as pool:
        for share, oks in zip(shares, pool.map(verify_open, shares), strict=True):
            for (_, md5, _), ok in zip(share, oks, strict=True):
                if not ok:
                    in_place[md5] = None


def fetch_files(
    reader: CollectionReader, entries: Iterable[FileEntry], into: Path
) -> tuple[list[str], int]:
    """Paths DuckDB reads the files at (in place or copied), and their bytes."""
    entries = list(entries)
    check_blocks(reader.store, entries)
    paths, total = [], 0
    for n, entry in enumerate(entries):
        total += entry.size
        md5 = one_block(reader.store, entry)
        found = None if md5 is None else in_place.get(md5)
        if found is None and md5 is None:
            found = lazy_path(reader.store, entry)
        if found is not None:
            paths.append(found)
            continue
        into.mkdir(parents=True, exist_ok=True)
        target = into / f"{n:05d}-{entry.path.rsplit('/', 1)[-1]}"
        with open(target, "wb") as f:
            for _, chunk in reader.iter_chunks([entry]):
                f.write(chunk)
        copied_bytes[0] += entry.size
        paths.append(str(target))
    return paths, total


def name_columns(plan: dict[str, Any], columns: dict[str, Any]) -> None:
    """Which columns of each table the query reads (``columns_read``): as the plan
    lists them; for a plan without the list (made before it was added, or
    over SQL the planner could not resolve), a guess from the words of the
    plan. Either way it decides only which blocks are checked together."""
    words: set[str] | None = None
    for name, cols in columns.items():
        if not cols:
            continue
        listed = plan.get("tables", {}).get(name, {}).get("columns")
        if isinstance(listed, list):
            read = {str(c).casefold() for c in listed}
        else:
            if words is None:
                # Any word of the plan may name a column: checks taken along
                # that DuckDB then does not need (or not taken along).
                text = json.dumps(plan, ensure_ascii=False).casefold()
                words = set(re.findall(r"\w+", text))
            read = words
        columns_read[name] = [str(c).casefold() in read for c, _ in cols]
