"""GC, balance and fsck over keep servers: the controller's side.

Each run reads every index first, then the roots and the mark, then decides
(``plan``) and sends one trash and one pull list to every server (an empty
list clears an old one), then waits for the servers to work through them.

A server whose index cannot be read (down, refusing, or silent for the
admin's timeout, ``keep_timeout``) is skipped, and the run only grows more
careful: not knowing what that server holds, gc trashes nothing anywhere and
balance trashes nothing (it still pulls short blocks onto the servers that
answered). The report names the server in ``unchecked`` (docs/gc.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import sqlalchemy as sa

from warehouse.gc.collected import record_collected
from warehouse.gc.keep import KeepAdmin
from warehouse.gc.local import require_catalog, require_marked
from warehouse.gc.mark import GcAborted, MarkResult, ReadBlock, mark
from warehouse.gc.plan import BalancePlan, Copy, holders, plan_balance, plan_sweep
from warehouse.gc.report import GcReport
from warehouse.gc.roots import find_roots
from warehouse.gc.settings import load_settings

__all__ = ["cluster_balance", "cluster_fsck", "cluster_gc"]

WAIT = 600.0  # seconds to wait for the servers to finish their lists


def _mark(
    engine: sa.Engine,
    read: ReadBlock,
    ttl: float,
    now: float,
    members: bool = False,
    unreadable: list[str] | None = None,
) -> MarkResult:
    s = load_settings(engine)
    roots = find_roots(engine, now, s.history_retention, s.job_retention, ttl)
    require_catalog(roots)
    result = mark(engine, read, roots.pdhs, roots.fragments, members=members, unreadable=unreadable)
    result.root_pdhs = roots.pdhs
    return result


def _begin(
    kind: str, engine: sa.Engine, admin: KeepAdmin, read: ReadBlock, ttl: float, dry_run: bool
) -> tuple[float, dict[str, list[Copy]], MarkResult, GcReport]:
    """Indexes first, then the mark: a block named meanwhile is marked or not listed.
    The indexes of the servers that answered; those that did not are in ``unchecked``."""
    now = time.time()
    indexes, down = admin.indexes_found()
    if not indexes:
        raise next(iter(down.values()))  # nothing to work on at all
    result = _mark(engine, read, ttl, now)
    require_marked(result)
    report = GcReport(kind, dry_run=dry_run, servers=len(admin.services), roots=result.roots)
    report.marked, report.copies = len(result.marked), sum(len(v) for v in indexes.values())
    report.unchecked = [str(down[s.id]) for s in admin.services if s.id in down]
    return now, indexes, result, report


def _skipped(report: GcReport, what: str) -> None:
    report.message = (
        f"{len(report.unchecked)} of {report.servers} keep servers did not answer "
        f"(unchecked below): {what}"
    )


def _finish(admin: KeepAdmin, report: GcReport, wait: bool, answered: Sequence[str]) -> GcReport:
    if wait and not admin.wait_idle(WAIT, answered):
        report.message = f"the keep servers had not finished their lists after {WAIT:.0f} s"
    return report


def cluster_gc(
    engine: sa.Engine,
    admin: KeepAdmin,
    read: ReadBlock,
    *,
    ttl: float,
    dry_run: bool = False,
    wait: bool = True,
) -> GcReport:
    now, indexes, result, report = _begin("gc", engine, admin, read, ttl, dry_run)
    plan = plan_sweep(result.marked, indexes, now, ttl)
    report.kept, report.young = plan.kept, plan.young
    if report.unchecked:
        # A copy there may be a young one of a block that looks old here, and
        # a trash list cleared or sent there now could not be: trash nothing.
        _skipped(report, f"gc trashed nothing (it would have trashed {plan.trashed})")
        return report
    report.trashed = plan.trashed
    report.actions = [
        f"trash {c.key} on {admin.by_id[sid].url}" for sid, cs in plan.trash.items() for c in cs
    ]
    if dry_run:
        return report
    for sid in indexes:
        admin.send_trash(sid, plan.trash.get(sid, []))
    report.collected = record_collected(engine, result.root_pdhs, now - ttl, now)
    return _finish(admin, report, wait, list(indexes))


def cluster_balance(
    engine: sa.Engine,
    admin: KeepAdmin,
    read: ReadBlock,
    *,
    ttl: float,
    wanted: int,
    dry_run: bool = False,
    wait: bool = True,
) -> GcReport:
    now, indexes, result, report = _begin("balance", engine, admin, read, ttl, dry_run)
    # Every server keeps its place in the probe order and counts towards
    # ``wanted``; those that did not answer get no pulls.
    away = set(admin.by_id) - set(indexes)
    plan = plan_balance(result.marked, indexes, admin.services, wanted, now, ttl, away=away)
    if away:
        # Copies there are not counted: a block may look short, never long;
        # still, extra copies are trimmed only with every server's view.
        plan.kept += plan.trashed
        plan.trash = {}
        _skipped(report, "balance pulled onto the others and trashed nothing")
    report.kept, report.pulled, report.trashed = plan.kept, plan.pulled, plan.trashed
    report.missing, report.under_replicated = plan.missing, plan.under
    report.actions = [
        f"pull {e.key} to {admin.by_id[sid].url} from {' '.join(e.sources)}"
        for sid, es in plan.pull.items()
        for e in es
    ] + [f"trash {c.key} on {admin.by_id[sid].url}" for sid, cs in plan.trash.items() for c in cs]
    if dry_run:
        return report
    for sid in indexes:
        admin.send_pull(sid, plan.pull.get(sid, []))
        admin.send_trash(sid, plan.trash.get(sid, []))
    return _finish(admin, report, wait, list(indexes))


def cluster_fsck(
    engine: sa.Engine, admin: KeepAdmin, read: ReadBlock, *, ttl: float, wanted: int
) -> GcReport:
    """Verify every copy on every server that answers. A server that does not
    (down, hung past the admin's timeout, refusing the token) is given up on,
    named in ``unchecked``, and its copies count as not there; the others are
    still checked (docs/gc.md)."""
    now = time.time()
    indexes, down = admin.indexes_found()
    report = GcReport("fsck", servers=len(admin.services))
    result = _mark(engine, read, ttl, now, members=True, unreadable=report.unreadable)
    report.roots, report.marked = result.roots, len(result.marked)
    work: Sequence[tuple[str, Copy]] = [(sid, c) for sid, cs in indexes.items() for c in cs]
    lock = threading.Lock()

    def verify(sid: str, copy: Copy) -> bool | GcAborted | None:
        if sid in down:
            return down[sid]  # given up on: its other copies are not read
        try:
            return admin.verify(sid, copy)
        except GcAborted as e:
            with lock:
                down.setdefault(sid, e)
            return e

    with ThreadPoolExecutor(8) as pool:
        verdicts = list(pool.map(lambda w: verify(*w), work))
    good: dict[str, list[Copy]] = {sid: [] for sid in indexes}
    for (sid, c), ok in zip(work, verdicts, strict=True):
        report.copies += 1
        if ok is None or isinstance(ok, GcAborted):
            continue
        report.checked += 1
        if ok:
            good[sid].append(c)
        else:
            report.corrupt.append(f"{c.md5} on {admin.by_id[sid].url}")
    report.unchecked = [str(down[s.id]) for s in admin.services if s.id in down]
    have = holders(good)
    wanted = max(1, min(wanted, len(admin.services)))
    for md5 in sorted(result.marked):
        n = len(have.get(md5, {}))
        if n == 0:
            report.missing.append(md5)
        elif n < wanted:
            report.under_replicated.append(md5)
        else:
            report.kept += 1
    report.attach_collections(result.members)
    if down:
        # Balance skips a server it cannot read, and then trims no copies.
        report.repairs = [
            f"wh balance pulls onto the other servers and trashes nothing while keep "
            f"server {admin.by_id[sid].url} does not answer; once it does, run wh fsck "
            f"again (or `wh keep retire {sid}` if it is gone)"
            for sid in sorted(down)
        ]
        return report
    # Corrupt copies were moved aside by the servers as they were read, so the
    # good copies are what balance will see: the same plan says what it will do.
    plan = plan_balance(result.marked, good, admin.services, wanted, now, ttl)
    report.repairs = repair_lines(report, plan, {s.id: s.url for s in admin.services})
    return report


def repair_lines(report: GcReport, plan: BalancePlan, urls: dict[str, str]) -> list[str]:
    """For each problem block, what ``wh balance`` will do (or that it cannot)."""
    pulls = {e.key.split("+")[0]: (urls[sid], e) for sid, es in plan.pull.items() for e in es}
    lines = []
    for md5 in sorted(report.problems()):
        if md5 in pulls:
            to, e = pulls[md5]
            lines.append(f"balance will pull {e.key} to {to} from {' '.join(e.sources)}")
        elif md5 in report.missing:
            lines.append(f"{md5}: no good copy is left; put the same data again to restore it")
        else:
            lines.append(f"{md5}: enough good copies remain; balance has nothing to do")
    return lines
