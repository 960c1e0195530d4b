"""The usage the catalog holds per step, summed per job in SQL (``wh usage``).

One query, grouped by job: a catalog of millions of steps is summed by the
database, not carried into Python. Summing jobs and pricing are
``warehouse.usage``'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from warehouse.catalog.db import connect
from warehouse.catalog.schema import jobs, steps, workflow_nodes, workflow_runs
from warehouse.usage.model import BLOCK_COLUMNS, Usage
from warehouse.usage.select import JobUsage, Selection

__all__ = ["block_sums", "job_usage", "run_usage"]


def block_sums() -> list[sa.ColumnElement[int]]:
    """The sums of the steps' block columns, in ``BLOCK_COLUMNS`` order."""
    return [sa.func.coalesce(sa.func.sum(steps.c[c]), 0) for c in BLOCK_COLUMNS]


def job_usage(engine: sa.Engine, selection: Selection) -> list[JobUsage]:
    """Per job (by id) the usage of its measured steps that ``selection``
    takes; jobs with none measured are left out."""
    s = steps.c
    query = (
        sa.select(
            jobs.c.id,
            jobs.c.submitted_by,
            jobs.c.state,
            jobs.c.cpus,
            sa.func.count(s.wall_seconds),
            sa.func.coalesce(sa.func.sum(s.attempts), 0),
            sa.func.coalesce(sa.func.sum(s.cpu_seconds), 0.0),
            sa.func.coalesce(sa.func.sum(s.wall_seconds), 0.0),
            sa.func.coalesce(sa.func.max(s.peak_memory), 0),
            sa.func.coalesce(sa.func.sum(s.read_bytes), 0),
            sa.func.coalesce(sa.func.sum(s.written_bytes), 0),
            sa.func.coalesce(sa.func.sum(s.input_bytes), 0),
            *block_sums(),
        )
        .join(jobs, jobs.c.id == s.job)
        .where(s.wall_seconds.is_not(None))
        .group_by(jobs.c.id, jobs.c.submitted_by, jobs.c.state, jobs.c.cpus)
        .order_by(jobs.c.id)
    )
    if selection.job is not None:
        query = query.where(jobs.c.id == selection.job)
    if selection.workflow is not None:
        # The jobs the run ran: a job it reused counts for the run that ran it.
        in_run = sa.select(workflow_nodes.c.job_id).where(
            workflow_nodes.c.run_id == selection.workflow, workflow_nodes.c.reused.is_(False)
        )
        query = query.where(jobs.c.id.in_(in_run))
    if selection.user is not None:
        query = query.where(jobs.c.submitted_by == selection.user)
    if selection.since is not None:
        query = query.where(s.finished_at >= selection.since)
    out = []
    with connect(engine) as conn:
        for row in conn.execute(query):
            job, user, state, cpus, n, attempts, cpu, wall, peak, read, written, given = row[:12]
            usage = Usage(
                steps=int(n),
                attempts=int(attempts),
                cpu_seconds=float(cpu),
                wall_seconds=float(wall),
                reserved_seconds=float(wall) * cpus,
                peak_memory=int(peak),
                read_bytes=int(read),
                written_bytes=int(written),
                input_bytes=int(given),
                **{c: int(v) for c, v in zip(BLOCK_COLUMNS, row[12:], strict=True)},
            )
            out.append(JobUsage(job, user, state, cpus, usage))
    return out


def run_usage(engine: sa.Engine, run_ids: Sequence[int]) -> dict[int, Usage]:
    """Per workflow run of ``run_ids``, the usage of the measured steps of
    the jobs it ran (not those it reused); a run with none is left out."""
    s, wn = steps.c, workflow_nodes.c
    held = s.wall_seconds * jobs.c.cpus
    query = (
        sa.select(
            wn.run_id,
            sa.func.count(s.wall_seconds),
            sa.func.coalesce(sa.func.sum(s.attempts), 0),
            sa.func.coalesce(sa.func.sum(s.cpu_seconds), 0.0),
            sa.func.coalesce(sa.func.sum(s.wall_seconds), 0.0),
            sa.func.coalesce(sa.func.sum(held), 0.0),
            sa.func.coalesce(sa.func.max(s.peak_memory), 0),
            sa.func.coalesce(sa.func.sum(s.read_bytes), 0),
            sa.func.coalesce(sa.func.sum(s.written_bytes), 0),
            sa.func.coalesce(sa.func.sum(s.input_bytes), 0),
            *block_sums(),
        )
        .join(jobs, jobs.c.id == s.job)
        .join(workflow_nodes, wn.job_id == jobs.c.id)
        .where(
            wn.run_id.in_(list(run_ids)),
            wn.reused.is_(False),
            s.wall_seconds.is_not(None),
        )
        .group_by(wn.run_id)
    )
    out = {}
    with connect(engine) as conn:
        for row in conn.execute(query):
            run, n, attempts, cpu, wall, reserved, peak, read, written, given = row[:10]
            out[int(run)] = Usage(
                int(n),
                int(attempts),
                float(cpu),
                float(wall),
                float(reserved),
                int(peak),
                int(read),
                int(written),
                int(given),
                **{c: int(v) for c, v in zip(BLOCK_COLUMNS, row[10:], strict=True)},
            )
    return out


def user_runs(
    engine: sa.Engine, owner: str | None, since: float | None, limit: int
) -> list[tuple[int, str, str, str, float]]:
    """The newest ``limit`` workflow runs (of ``owner`` if given, created
    at or after ``since`` if given): (id, workflow, owner, state, created_at)."""
    r = workflow_runs.c
    query = sa.select(r.id, r.workflow, r.owner, r.state, r.created_at)
    if owner is not None:
        query = query.where(r.owner == owner)
    if since is not None:
        query = query.where(r.created_at >= since)
    query = query.order_by(r.id.desc()).limit(limit)
    with connect(engine) as conn:
        return [
            (int(i), str(w), str(o), str(st), float(c)) for i, w, o, st, c in conn.execute(query)
        ]
