"""Catalog reads the pages need that the library does not offer, one page at a time.

SQLAlchemy Core over the catalog's tables: names joined with their
collections' sizes, the names pointing at a collection, jobs by state and
steps of one job by page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from warehouse.catalog.db import by_code_point, connect
from warehouse.catalog.schema import (
    collections,
    jobs,
    names,
    steps,
    workflow_nodes,
    workflow_runs,
)
from warehouse.jobs.jobrecords import JobRecord, StepRecord
from warehouse.workflows.runrecords import RunRecord

__all__ = [
    "JOB_GROUPS",
    "RUN_GROUPS",
    "NameRow",
    "count_names",
    "git_repositories",
    "jobs_by_id",
    "jobs_making",
    "jobs_page",
    "names_for",
    "names_page",
    "node_counts",
    "page_number",
    "runs_page",
    "step_counts",
    "steps_page",
]

JOB_GROUPS: dict[str, tuple[str, ...]] = {
    "running": ("running", "paused"),
    "queued": ("queued",),
    "finished": ("complete", "failed", "cancelled"),
}
STEP_STATES = ("queued", "running", "done", "failed", "stopped")


@dataclass(frozen=True, slots=True)
class NameRow:
    name: str
    pdh: str
    version: int
    updated_at: float
    updated_by: str
    size: int | None
    file_count: int | None


def _prefixed(query: sa.Select[Any], prefix: str) -> sa.Select[Any]:
    if prefix:
        # Not LIKE: SQLite's LIKE ignores case, PostgreSQL's does not.
        return query.where(sa.func.substr(names.c.name, 1, len(prefix)) == prefix)
    return query


def count_names(engine: sa.Engine, prefix: str = "") -> int:
    query = _prefixed(sa.select(sa.func.count()).select_from(names), prefix)
    with connect(engine) as conn:
        return int(conn.execute(query).scalar() or 0)


def names_page(engine: sa.Engine, prefix: str, offset: int, limit: int) -> list[NameRow]:
    n, c = names.c, collections.c
    query = (
        sa.select(n.name, n.pdh, n.version, n.updated_at, n.updated_by, c.size, c.file_count)
        .select_from(names.outerjoin(collections, n.pdh == c.pdh))
        .order_by(by_code_point(engine, n.name))
        .offset(offset)
        .limit(limit)
    )
    with connect(engine) as conn:
        return [NameRow(*r) for r in conn.execute(_prefixed(query, prefix))]


def names_for(engine: sa.Engine, pdh: str, limit: int = 50) -> list[str]:
    """Names pointing at ``pdh`` now."""
    query = (
        sa.select(names.c.name)
        .where(names.c.pdh == pdh)
        .order_by(by_code_point(engine, names.c.name))
        .limit(limit)
    )
    with connect(engine) as conn:
        return [r.name for r in conn.execute(query)]


def _job_filter(group: str, function: str) -> list[sa.ColumnElement[bool]]:
    where: list[sa.ColumnElement[bool]] = []
    if group in JOB_GROUPS:
        where.append(jobs.c.state.in_(JOB_GROUPS[group]))
    if function:
        where.append(sa.func.substr(jobs.c.function, 1, len(function)) == function)
    return where


def page_number(asked: int, total: int, per_page: int) -> int:
    """``asked`` within the pages there are (a page past the last shows the last)."""
    return min(max(asked, 1), max(1, -(-total // per_page)))


def jobs_page(
    engine: sa.Engine,
    group: str,
    function: str,
    page: int,
    per_page: int,
    also: Sequence[sa.ColumnElement[bool]] = (),
) -> tuple[list[JobRecord], int, int]:
    """Page ``page`` (clamped) of the jobs in ``group`` (all if unknown) that
    match ``also`` too, newest first; how many there are; and the page's number."""
    where = [*_job_filter(group, function), *also]
    rows, total, number = _newest_first(engine, jobs, where, page, per_page)
    return [JobRecord(**r._mapping) for r in rows], total, number


def _newest_first(
    engine: sa.Engine, table: sa.Table, where: Sequence[Any], page: int, per_page: int
) -> tuple[list[sa.Row[Any]], int, int]:
    """Page ``page`` (clamped) of ``table``'s rows matching ``where``, highest
    id first; how many match; and the page's number."""
    with connect(engine) as conn:
        count = sa.select(sa.func.count()).select_from(table).where(*where)
        total = int(conn.execute(count).scalar() or 0)
        number = page_number(page, total, per_page)
        query = (
            sa.select(table)
            .where(*where)
            .order_by(table.c.id.desc())
            .offset((number - 1) * per_page)
            .limit(per_page)
        )
        return list(conn.execute(query)), total, number


def jobs_by_id(engine: sa.Engine, ids: Sequence[int]) -> list[JobRecord]:
    with connect(engine) as conn:
        rows = conn.execute(sa.select(jobs).where(jobs.c.id.in_(list(ids))))
        return [JobRecord(**r._mapping) for r in rows]


def step_counts(engine: sa.Engine, job_id: int) -> dict[str, int]:
    """Steps of a job by state (every state present, zero if none)."""
    query = (
        sa.select(steps.c.state, sa.func.count())
        .where(steps.c.job == job_id)
        .group_by(steps.c.state)
    )
    counts = dict.fromkeys(STEP_STATES, 0)
    with connect(engine) as conn:
        counts.update({state: int(n) for state, n in conn.execute(query)})
    return counts


def done_durations(engine: sa.Engine, job_id: int, limit: int = 1000) -> list[float]:
    """Run times in seconds of the job's last ``limit`` finished steps (for the ETA)."""
    query = (
        sa.select(steps.c.finished_at - steps.c.started_at)
        .where(steps.c.job == job_id, steps.c.state == "done")
        .where(steps.c.started_at.is_not(None), steps.c.finished_at.is_not(None))
        .order_by(steps.c.number.desc())
        .limit(limit)
    )
    with connect(engine) as conn:
        return [max(float(d), 0.0) for (d,) in conn.execute(query)]


def failed_step(engine: sa.Engine, job_id: int) -> StepRecord | None:
    """The job's first failed step, if any (its log tail goes on the job page)."""
    query = (
        sa.select(steps)
        .where(steps.c.job == job_id, steps.c.state == "failed")
        .order_by(steps.c.number)
        .limit(1)
    )
    with connect(engine) as conn:
        row = conn.execute(query).first()
    return StepRecord(**row._mapping) if row else None


def steps_page(
    engine: sa.Engine, job_id: int, state: str, offset: int, limit: int
) -> list[StepRecord]:
    query = sa.select(steps).where(steps.c.job == job_id)
    if state:
        query = query.where(steps.c.state == state)
    query = query.order_by(steps.c.number).offset(offset).limit(limit)
    with connect(engine) as conn:
        return [StepRecord(**r._mapping) for r in conn.execute(query)]


def git_repositories(engine: sa.Engine, limit: int = 50) -> list[str]:
    """Repositories of earlier ``git:`` jobs, newest first (offered again on the form)."""
    query = (
        sa.select(jobs.c.function)
        .where(sa.func.substr(jobs.c.function, 1, 4) == "git:")
        .order_by(jobs.c.id.desc())
        .limit(500)
    )
    seen: dict[str, None] = {}
    with connect(engine) as conn:
        for (spec,) in conn.execute(query):
            repo = str(spec).removeprefix("git:").rpartition("@")[0]
            if repo:
                seen.setdefault(repo, None)
    return list(seen)[:limit]


def jobs_making(engine: sa.Engine, pdh: str, limit: int = 20) -> list[JobRecord]:
    """Complete jobs that ran (not answered from reuse) and output ``pdh``, oldest first."""
    query = (
        sa.select(jobs)
        .where(jobs.c.output_pdh == pdh, jobs.c.state == "complete", jobs.c.reused_from.is_(None))
        .order_by(jobs.c.id)
        .limit(limit)
    )
    with connect(engine) as conn:
        return [JobRecord(**r._mapping) for r in conn.execute(query)]


RUN_GROUPS: dict[str, tuple[str, ...]] = {
    "active": ("queued", "running"),
    "finished": ("complete", "failed", "cancelled"),
}


def runs_page(
    engine: sa.Engine,
    group: str,
    page: int,
    per_page: int,
    also: Sequence[sa.ColumnElement[bool]] = (),
) -> tuple[list[RunRecord], int, int]:
    """Page ``page`` (clamped) of the workflow runs in ``group`` (all if
    unknown) that match ``also`` too, newest first; how many there are; and
    the page's number."""
    where: list[sa.ColumnElement[bool]] = [*also]
    if group in RUN_GROUPS:
        where.append(workflow_runs.c.state.in_(RUN_GROUPS[group]))
    rows, total, number = _newest_first(engine, workflow_runs, where, page, per_page)
    return [RunRecord(**r._mapping) for r in rows], total, number


def node_counts(engine: sa.Engine, run_ids: Sequence[int]) -> dict[int, dict[str, int]]:
    """Per run: its nodes by state, and ``total`` and ``reused``."""
    wn = workflow_nodes.c
    query = (
        sa.select(wn.run_id, wn.state, wn.reused, sa.func.count())
        .where(wn.run_id.in_(list(run_ids)))
        .group_by(wn.run_id, wn.state, wn.reused)
    )
    out: dict[int, dict[str, int]] = {r: {"total": 0, "reused": 0} for r in run_ids}
    with connect(engine) as conn:
        for run_id, state, reused, n in conn.execute(query):
            counts = out[run_id]
            counts[state] = counts.get(state, 0) + int(n)
            counts["total"] += int(n)
            if reused:
                counts["reused"] += int(n)
    return out
