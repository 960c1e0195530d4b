"""The mark phase: read every root manifest and collect the hashes it lists.

A collection's manifest text is stored as blocks (``collections.manifest_blocks``);
those blocks are marked too. Manifests are scanned for locator tokens
(``scan``), never parsed into objects. A root that cannot be read stops the
run: not knowing a manifest's blocks means not knowing what is garbage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import sqlalchemy as sa

from warehouse.blocks.locator import EMPTY_MD5, Locator
from warehouse.catalog.db import connect
from warehouse.catalog.schema import collections
from warehouse.errors import WarehouseError
from warehouse.gc.scan import locator_keys, update_md5s

__all__ = ["GcAborted", "MarkResult", "ReadBlock", "mark"]

ReadBlock = Callable[[Locator], bytes]
Progress = Callable[[int], None]


class GcAborted(WarehouseError):
    """A guard stopped the run before anything was trashed or pulled."""


@dataclass
class MarkResult:
    marked: set[str] = field(default_factory=set)
    roots: int = 0
    # pdh -> the hashes its manifest lists (kept only when asked: fsck).
    members: dict[str, set[str]] = field(default_factory=dict)
    root_pdhs: set[str] = field(default_factory=set)  # the roots (set by the caller)


def _rows(engine: sa.Engine, pdhs: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    with connect(engine) as conn:
        for i in range(0, len(pdhs), 500):
            q = sa.select(collections.c.pdh, collections.c.manifest_blocks).where(
                collections.c.pdh.in_(pdhs[i : i + 500])
            )
            found.update((p, b) for p, b in conn.execute(q))
    return found


def mark(
    engine: sa.Engine,
    read: ReadBlock,
    pdhs: Iterable[str],
    fragments: Iterable[bytes] = (),
    *,
    members: bool = False,
    unreadable: list[str] | None = None,
    progress: Progress | None = None,
) -> MarkResult:
    """Mark the blocks of every collection in ``pdhs`` and of the ``fragments``.

    Raises ``GcAborted`` when a root manifest cannot be read, unless
    ``unreadable`` is given (fsck): then its PDH is added there instead.
    With ``members``, each root's hashes (manifest blocks included) are kept.
    """
    result = MarkResult()
    wanted = sorted(p for p in set(pdhs) if not p.startswith(EMPTY_MD5))
    rows = _rows(engine, wanted)
    for pdh in wanted:
        # A collection not in the catalog may still be stored under its own PDH.
        blocks = rows.get(pdh, pdh)
        keys = locator_keys(blocks)
        own = {k.split("+", 1)[0] for k in keys}
        result.marked |= own
        try:
            text = b"".join(read(Locator.parse(k)) for k in keys)
        except WarehouseError as e:
            if unreadable is None:
                raise GcAborted(f"cannot read the manifest of root collection {pdh}: {e}") from e
            unreadable.append(pdh)
            text = b""
        if members:
            result.members[pdh] = update_md5s(own, text)
            result.marked |= result.members[pdh]
        else:
            update_md5s(result.marked, text)
        result.roots += 1
        if progress is not None:
            progress(1)
    for fragment in fragments:
        update_md5s(result.marked, fragment)
    result.marked.discard(EMPTY_MD5)
    return result
