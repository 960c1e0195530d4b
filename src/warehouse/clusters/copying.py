"""``wh copy``: a collection's blocks that another cluster lacks, then its record there.

Each block is read from wherever the source holds it, checked against its
MD5 before it is sent (a corrupt source copy is never copied), and stored on
the destination's keep servers. Blocks the destination client already stored
(its signature cache, confirmed by HEAD) are not sent again, so an interrupted
copy resumes; a collection the destination already records is not copied at
all. The destination records the collection under the same PDH.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from warehouse.blocks import Locator
from warehouse.blocks.store import BlockStore
from warehouse.catalog import check_name
from warehouse.errors import ConflictError, CorruptDataError, NotFoundError, UsageError
from warehouse.interface import Warehouse
from warehouse.manifest import Manifest
from warehouse.remote.keepclient import KeepClient
from warehouse.remote.warehouse import RemoteWarehouse

__all__ = ["CopyResult", "copy_collection", "plan_blocks"]

# Blocks in flight at once: each is read and sent whole (up to 64 MiB).
IN_FLIGHT = 4


@dataclass
class CopyResult:
    pdh: str
    cluster: str
    blocks: int = 0  # distinct non-empty blocks of the collection
    bytes: int = 0
    copied_blocks: int = 0
    copied_bytes: int = 0
    already: bool = False  # the destination recorded the collection before
    name: str | None = None

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def plan_blocks(manifest: Manifest) -> list[Locator]:
    """The distinct non-empty blocks of ``manifest``, in first-use order."""
    seen: dict[str, Locator] = {}
    for loc in manifest.blocks():
        if not loc.is_empty and loc.key not in seen:
            seen[loc.key] = loc
    return list(seen.values())


def _read_verified(store: BlockStore, loc: Locator) -> bytes:
    data = bytes(store.get(loc))
    # The keep client checks every block it reads; another store is checked here.
    if not isinstance(store, KeepClient) and (
        len(data) != loc.size or hashlib.md5(data).hexdigest() != loc.md5
    ):
        raise CorruptDataError(f"block {loc.key}: the source's copy is corrupt; not copied")
    return data


def _check_name(dest: RemoteWarehouse, name: str, pdh: str, before: bool) -> str | None:
    """The PDH ``name`` holds on the destination now (None: free), or a conflict."""
    try:
        held = dest.get_name(name).pdh
    except NotFoundError:
        return None
    if held != pdh:
        done = "nothing was copied" if before else "the collection was copied, not named"
        raise ConflictError(
            f"name {name!r} on cluster {dest.cluster} holds {held}, not {pdh}: {done} "
            "(move it with `wh name set` there, or choose another --name)"
        )
    return held


def _holds_whole(dest: RemoteWarehouse, pdh: str) -> bool:
    """Whether the destination records the collection and can read its manifest.

    A collection the destination's GC collected is still recorded there, but
    its blocks are gone: it is copied again (recording it again brings it back).
    """
    try:
        return dest.holds(pdh)
    except CorruptDataError:  # a block of its manifest is missing or corrupt there
        return False


def copy_collection(
    source: Warehouse,
    dest: RemoteWarehouse,
    key: str,
    *,
    name: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> CopyResult:
    """Copy the collection ``key`` names on ``source`` to ``dest``; see the module."""
    parsed = source.key(key)
    if parsed.path:
        raise UsageError(f"{key!r}: wh copy copies whole collections, not a path inside one")
    if name is not None:
        check_name(name)
    pdh = source.resolve(parsed)
    manifest = source.manifest(pdh)
    blocks = plan_blocks(manifest)
    result = CopyResult(pdh, dest.cluster, len(blocks), sum(b.size for b in blocks), name=name)
    if name is not None:
        _check_name(dest, name, pdh, before=True)
    if _holds_whole(dest, pdh):
        result.already = True
        if progress is not None:
            progress(result.bytes)
    else:
        writes: list[tuple[str, int, bool]] = []
        signed = dict(_copy_blocks(source.store, dest, blocks, result, writes, progress))
        streams = tuple(
            dataclasses.replace(
                s,
                locators=tuple(
                    loc.without_hints() if loc.is_empty else signed[loc.key] for loc in s.locators
                ),
            )
            for s in manifest.streams
        )
        record = dest._record(Manifest(streams), None, writes)
        if record.pdh != pdh:  # the same blocks and names: a bug if ever seen
            raise CorruptDataError(f"cluster {dest.cluster} recorded {record.pdh}, not {pdh}")
    if name is not None and _check_name(dest, name, pdh, before=False) is None:
        dest.set_name(name, pdh, expect=None, create=True)
    return result


def _copy_blocks(
    store: BlockStore,
    dest: RemoteWarehouse,
    blocks: list[Locator],
    result: CopyResult,
    writes: list[tuple[str, int, bool]],
    progress: Callable[[int], None] | None,
) -> Iterator[tuple[str, Locator]]:
    """(key, locator signed on the destination) for each block; sends what it lacks
    and adds each block sent to ``writes`` (md5, size, new) for the accounting."""

    def one(loc: Locator) -> tuple[Locator, Locator, bool | None]:
        held = dest.store.held(loc)
        if held is not None:
            return loc, held, None
        data = _read_verified(store, loc)
        stored = dest.store.put(data, md5=loc.md5)
        return loc, stored.locator, stored.new

    pending: set[Future[tuple[Locator, Locator, bool | None]]] = set()
    todo = iter(blocks)
    with ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="wh-copy") as pool:
        try:
            while True:
                while len(pending) < IN_FLIGHT and (loc := next(todo, None)) is not None:
                    pending.add(pool.submit(one, loc))
                if not pending:
                    return
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in done:
                    loc, signed, new = f.result()
                    if new is not None:
                        result.copied_blocks += 1
                        result.copied_bytes += loc.size
                        writes.append((loc.md5, loc.size, new))
                    if progress is not None:
                        progress(loc.size)
                    yield loc.key, signed
        finally:
            for f in pending:
                f.cancel()
