"""The usage the catalog holds per step, summed per job in SQL (``wh usage``).

One query, grouped by job: a catalog of millions of steps is summed by the
database, not carried into Python. Summing jobs and pricing are
``warehouse.usage``'s.
"""

from __future__ import annotations

import sqlalchemy as sa

from warehouse.catalog.db import connect
from warehouse.catalog.schema import jobs, steps, workflow_nodes
from warehouse.usage.model import Usage
from warehouse.usage.select import JobUsage, Selection

__all__ = ["job_usage"]


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
        )
        .join(jobs, jobs.c.id == s.job)
        .where(s.wall_seconds.is_not(None))
        .group_by(jobs.c.id, jobs.c.submitted_by, jobs.c.state, jobs.c.cpus)
        .order_by(jobs.c.id)
    )
    if selection.job is not None:
        query = query.where(jobs.c.id == selection.job)
    if selection.workflow is not None:
        in_run = sa.select(workflow_nodes.c.job_id).where(
            workflow_nodes.c.run_id == selection.workflow
        )
        query = query.where(jobs.c.id.in_(in_run))
    if selection.user is not None:
        query = query.where(jobs.c.submitted_by == selection.user)
    if selection.since is not None:
        query = query.where(s.finished_at >= selection.since)
    out = []
    with connect(engine) as conn:
        for job, user, state, cpus, n, attempts, cpu, wall, peak, read, written in conn.execute(
            query
        ):
            usage = Usage(
                steps=int(n),
                attempts=int(attempts),
                cpu_seconds=float(cpu),
                wall_seconds=float(wall),
                reserved_seconds=float(wall) * cpus,
                peak_memory=int(peak),
                read_bytes=int(read),
                written_bytes=int(written),
            )
            out.append(JobUsage(job, user, state, cpus, usage))
    return out
