"""GC, fsck and balance on the embedded warehouse: one volume (a local
directory or an S3 bucket).

The decisions are the same as for keep servers (``plan``); the volume is
"server" ``local``. Trash goes through ``Volume.trash(if_mtime_ns=…)``
so a block written again since the index was read is left alone, and each
run removes trash past its lifetime.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import sqlalchemy as sa

from warehouse.blocks.locator import Locator
from warehouse.errors import CorruptDataError, NotFoundError
from warehouse.gc.collected import record_collected
from warehouse.gc.mark import GcAborted, MarkResult, mark
from warehouse.gc.plan import Copy, plan_sweep
from warehouse.gc.report import GcReport
from warehouse.gc.roots import Roots, find_roots
from warehouse.gc.settings import GcSettings, load_settings
from warehouse.volumes.base import Volume

__all__ = ["local_balance", "local_fsck", "local_gc", "require_catalog", "require_marked"]

Progress = Callable[[int], None]
LOCAL = "local"


def require_catalog(roots: Roots) -> None:
    if roots.collections == 0:
        raise GcAborted("the catalog holds no collections: refusing to collect anything")


def require_marked(result: MarkResult) -> None:
    if not result.marked:
        raise GcAborted("no block is referenced by any root: refusing to collect anything")


def _roots(engine: sa.Engine, s: GcSettings, now: float) -> Roots:
    return find_roots(engine, now, s.history_retention, s.job_retention, s.signature_ttl)


def _reader(volume: Volume) -> Callable[[Locator], bytes]:
    return lambda loc: volume.get(loc.md5)


def local_gc(
    engine: sa.Engine,
    volume: Volume,
    *,
    dry_run: bool = False,
    now: float | None = None,
    progress: Progress | None = None,
) -> GcReport:
    """Trash unreferenced blocks older than the TTL; remove trash past its lifetime."""
    now = time.time() if now is None else now
    s = load_settings(engine)
    report = GcReport("gc", dry_run=dry_run, servers=1)
    try:
        copies = [Copy(b.md5, b.size, b.mtime_ns) for b in volume.index()]
    except OSError as e:
        raise GcAborted(f"cannot read the index of {volume.name}: {e}") from e
    # Roots are read after the index: a block named meanwhile is marked.
    roots = _roots(engine, s, now)
    require_catalog(roots)
    result = mark(engine, _reader(volume), roots.pdhs, roots.fragments, progress=progress)
    require_marked(result)
    plan = plan_sweep(result.marked, {LOCAL: copies}, now, s.signature_ttl)
    report.roots, report.marked, report.copies = result.roots, len(result.marked), len(copies)
    report.kept, report.young = plan.kept, plan.young
    doomed = plan.trash.get(LOCAL, [])
    if dry_run:
        report.trashed = len(doomed)
        report.actions = [f"trash {c.key} on {LOCAL}" for c in doomed]
        return report
    # The same volume, with the catalog's trash lifetime.
    target = copy.copy(volume)
    target.trash_lifetime = s.trash_lifetime
    for c in doomed:
        if target.trash(c.md5, if_mtime_ns=c.mtime_ns, now=now):
            report.trashed += 1
            report.actions.append(f"trash {c.key} on {LOCAL}")
        else:
            report.kept += 1  # written again since the index was read
    report.emptied = target.empty_trash(now)
    report.collected = record_collected(engine, roots.pdhs, now - s.signature_ttl, now)
    return report


def local_fsck(engine: sa.Engine, volume: Volume, *, progress: Progress | None = None) -> GcReport:
    """Read and verify every block of the volume; report missing and corrupt blocks
    of the roots and the collections they belong to."""
    now = time.time()
    s = load_settings(engine)
    report = GcReport("fsck", servers=1)
    roots = _roots(engine, s, now)
    result = mark(
        engine,
        _reader(volume),
        roots.pdhs,
        roots.fragments,
        members=True,
        unreadable=report.unreadable,
    )
    report.roots, report.marked = result.roots, len(result.marked)
    present: set[str] = set()
    for b in volume.index():
        report.copies += 1
        try:
            data = volume.get(b.md5)
        except NotFoundError:
            continue  # trashed while we looked
        except (CorruptDataError, OSError):
            # An unreadable copy (EIO, a directory in its place) is damage to
            # report, as keepd's 503 is, not a reason to stop checking.
            report.corrupt.append(f"{b.md5} on {LOCAL}")
        else:
            present.add(b.md5)
            if len(data) != b.size:
                report.corrupt.append(f"{b.md5} on {LOCAL}")
        report.checked += 1
        if progress is not None:
            progress(b.size)
    corrupt = {c.split()[0] for c in report.corrupt}
    report.missing = sorted(result.marked - present - corrupt)
    report.kept = len(present & result.marked)
    report.attach_collections(result.members)
    # A corrupt copy has been moved aside by the read that found it: the block
    # is missing now, and one volume has no other copy to pull.
    report.repairs = [
        f"{md5}: no good copy is left; put the same data again to restore it"
        for md5 in sorted(report.problems())
    ]
    return report


def local_balance(engine: sa.Engine, volume: Volume, *, dry_run: bool = False) -> GcReport:
    """Nothing to balance: the embedded warehouse keeps one copy on one volume."""
    return GcReport(
        "balance",
        dry_run=dry_run,
        servers=1,
        message="the embedded warehouse has one volume: there is nothing to balance",
    )
