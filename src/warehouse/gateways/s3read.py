"""A GetObject's body: a file's bytes ``first..last``, every block verified
by the block client, sent from the event loop as views of the blocks
(docs/s3-gateway.md, "Large objects").

The blocks are fetched on worker threads, one hop per block; the pieces of
a block are sent with no thread hop and no copy each (a 2 GB GET was 2,048
hops and copies of 1 MiB). A read of several big blocks read whole (a large
object, or a large range of one) is a one-pass read (``CollectionReader``):
past the RAM cache, and where the node's disk cache holds the blocks they
are checked several at once in one native call and mapped when sent, as
``wh get`` reads them. A body of at most ``SMALL_BODY`` is read at once
on the request's worker (``small_body``), its shared block kept in the
gateway's own RAM cache for the next GET of one of its files.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Generator
from concurrent.futures import Future, ThreadPoolExecutor

import anyio.to_thread

from warehouse.blocks.cache import BlockCache
from warehouse.blocks.store import MAPPED_MIN, BlockStore
from warehouse.collection.reader import CollectionReader
from warehouse.manifest import FileEntry, FilePiece, Manifest

__all__ = ["AHEAD", "SHARED_BLOCKS_BYTES", "SMALL_BODY", "object_body", "small_body"]

# Blocks a small read fetches ahead of the one it sends: each may be 64 MiB held.
AHEAD = 2
# Blocks shared by small files kept for the next GET of one of their files.
SHARED_BLOCKS_BYTES = 128 << 20
# A body this small is read whole and sent as one piece (``small_body``).
SMALL_BODY = 1 << 20
# Bytes handed to the server at a time out of a block (a view, not a copy).
_SEND = 4 << 20
# Big blocks read whole from which a read is a one-pass read.
_ONE_PASS_BLOCKS = 2
_pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="s3-read-ahead")


def _span(entry: FileEntry, first: int, last: int) -> list[FilePiece]:
    """The pieces of bytes ``first..last`` (inclusive) of a file."""
    wanted: list[FilePiece] = []
    pos = 0
    for piece in entry.pieces:
        end = pos + piece.length
        if end > first and pos <= last:
            lo = max(first, pos) - pos
            hi = min(last + 1, end) - pos
            wanted.append(FilePiece(piece.locator, piece.offset + lo, hi - lo))
        pos = end
        if pos > last:
            break
    return wanted


def _whole(piece: FilePiece) -> bool:
    return piece.offset == 0 and piece.length == piece.locator.size


def _one_pass(
    store: BlockStore, pdh: str, path: str, pieces: list[FilePiece]
) -> Generator[memoryview, None, None]:
    entry = FileEntry(path, sum(p.length for p in pieces), tuple(pieces))
    # The reader needs no more of the collection than this file.
    reader = CollectionReader(store, Manifest.from_files([entry]), one_pass=True, pdh=pdh)
    for _, view in reader.iter_chunks([entry]):
        yield view


def _block_by_block(
    store: BlockStore, pieces: list[FilePiece]
) -> Generator[memoryview, None, None]:
    ahead: deque[Future[bytes | memoryview]] = deque()
    try:
        for i, piece in enumerate(pieces):
            while len(ahead) < AHEAD + 1 and i + len(ahead) < len(pieces):
                p = pieces[i + len(ahead)]
                # A block read whole is this file's alone, read once: not
                # kept in the RAM cache, where shared blocks of small files are.
                ahead.append(_pool.submit(store.get, p.locator, cache=not _whole(p)))
            view = memoryview(ahead.popleft().result())
            yield view[piece.offset : piece.offset + piece.length]
    finally:
        for fut in ahead:
            fut.cancel()


def small_body(
    store: BlockStore, shared: BlockCache, entry: FileEntry, first: int, last: int
) -> bytes | None:
    """Bytes ``first..last`` of ``entry`` read at once, if they are at most
    ``SMALL_BODY``; else None (``object_body`` streams them). Most of a
    small GET's cost was streaming: a task to watch for the client leaving,
    and a thread hop to fetch each block. A block shared by small files is
    kept in ``shared`` (verified when it went in): the controller's client
    holds none in RAM, and reading one from the disk cache again, checked
    again, for each of its files cost more than the rest of the GET."""
    if last - first + 1 > SMALL_BODY:
        return None
    parts = []
    for piece in _span(entry, first, last):
        locator = piece.locator
        whole = _whole(piece)
        data = None if whole else shared.get(locator.key)
        if data is None:
            got = store.get(locator, cache=not whole)
            data = got if isinstance(got, bytes) else bytes(got)
            if not whole:
                shared.put(locator.key, data)
        block = memoryview(data)
        parts.append(block[piece.offset : piece.offset + piece.length])
    return parts[0].tobytes() if len(parts) == 1 else b"".join(parts)


async def object_body(
    store: BlockStore, pdh: str, entry: FileEntry, first: int, last: int
) -> AsyncIterator[memoryview]:
    """Bytes ``first..last`` (inclusive) of ``entry``, a file of collection ``pdh``."""
    pieces = _span(entry, first, last)
    big = sum(1 for p in pieces if _whole(p) and p.locator.size >= MAPPED_MIN)
    one_pass = big >= _ONE_PASS_BLOCKS
    blocks = (
        _one_pass(store, pdh, entry.path, pieces)
        if one_pass
        else _block_by_block(store, pieces)
    )
    given = 0
    try:
        # One view a piece: no hop more to learn that they are all given.
        for given in range(1, len(pieces) + 1):  # noqa: B007 - read in finally
            view = await anyio.to_thread.run_sync(next, blocks, None)
            if view is None:
                return
            for at in range(0, len(view), _SEND):
                yield view[at : at + _SEND]
    finally:
        if given == len(pieces) and not one_pass:
            blocks.close()  # nothing under way: closed here, no thread woken
        else:
            # Closing waits for the fetches under way (a client gone
            # mid-body, a one-pass read's pool): on a worker, not the event loop.
            _pool.submit(blocks.close)
