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
from warehouse.catalog.schema import collections, jobs, names, steps
from warehouse.jobs.values import JobRecord, StepRecord

__all__ = [
    "JOB_GROUPS",
    "NameRow",
    "count_names",
    "git_repositories",
    "jobs_by_id",
    "jobs_page",
    "names_for",
    "names_page",
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


def jobs_page(
    engine: sa.Engine, group: str, function: str, offset: int, limit: int
) -> tuple[list[JobRecord], int]:
    """Jobs in ``group`` (all if unknown), newest first, and how many there are."""
    where = _job_filter(group, function)
    query = sa.select(jobs).where(*where).order_by(jobs.c.id.desc()).offset(offset).limit(limit)
    with connect(engine) as conn:
        total = conn.execute(sa.select(sa.func.count()).select_from(jobs).where(*where)).scalar()
        return [JobRecord(**r._mapping) for r in conn.execute(query)], int(total or 0)


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
