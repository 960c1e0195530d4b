"""Watches and runs in the catalog: every function takes an SQLAlchemy engine."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

import sqlalchemy as sa

from warehouse.catalog.db import connect, duplicate_key, write
from warehouse.catalog.schema import jobs, regol_runs, regol_watches
from warehouse.errors import ConflictError, NotFoundError
from warehouse.jobs.jobrecords import JobRecord
from warehouse.regol.model import FINISHED, Commit, Outcome, changes
from warehouse.regol.values import RunRecord, WatchRecord

__all__ = [
    "active_job_states",
    "add_run",
    "add_watch",
    "get_watch",
    "history",
    "list_watches",
    "refresh",
    "set_active",
    "unfinished_jobs",
]

_MAX_ID = 2**31 - 1


def _watch(row: sa.Row[tuple[object, ...]]) -> WatchRecord:
    return WatchRecord(**row._mapping)


def _run(row: sa.Row[tuple[object, ...]]) -> RunRecord:
    return RunRecord(**row._mapping)


def add_watch(
    engine: sa.Engine,
    *,
    job: int,
    function: str,
    repository: str,
    path: str,
    branch: str,
    label: str,
    owner: str,
) -> WatchRecord:
    values = {
        "job": job,
        "function": function,
        "repository": repository,
        "path": path,
        "branch": branch,
        "label": label,
        "owner": owner,
        "created_at": time.time(),
        "active": True,
    }
    with write(engine) as conn:
        watch_id = conn.execute(regol_watches.insert().values(**values)).inserted_primary_key[0]  # type: ignore[index]
    return get_watch(engine, watch_id)


def _no_watch(watch_id: int) -> bool:
    # Ids are 32-bit in the catalog: PostgreSQL would refuse a larger one.
    return not 0 < watch_id <= _MAX_ID


def get_watch(engine: sa.Engine, watch_id: int) -> WatchRecord:
    if _no_watch(watch_id):
        raise NotFoundError(f"no watch {watch_id}")
    with connect(engine) as conn:
        row = conn.execute(sa.select(regol_watches).where(regol_watches.c.id == watch_id)).first()
    if row is None:
        raise NotFoundError(f"no watch {watch_id}")
    return _watch(row)


def list_watches(
    engine: sa.Engine, *, active_only: bool = False, after: int = 0, limit: int | None = None
) -> list[WatchRecord]:
    """Watches by id, those after watch ``after``; at most ``limit`` (None: all)."""
    query = (
        sa.select(regol_watches)
        .where(regol_watches.c.id > after)
        .order_by(regol_watches.c.id)
        .limit(limit)
    )
    if active_only:
        query = query.where(regol_watches.c.active.is_(True))
    with connect(engine) as conn:
        return [_watch(r) for r in conn.execute(query)]


def set_active(engine: sa.Engine, watch_id: int, active: bool) -> WatchRecord:
    if _no_watch(watch_id):
        raise NotFoundError(f"no watch {watch_id}")
    with write(engine) as conn:
        done = conn.execute(
            regol_watches.update().where(regol_watches.c.id == watch_id).values(active=active)
        )
    if done.rowcount == 0:
        raise NotFoundError(f"no watch {watch_id}")
    return get_watch(engine, watch_id)


def _timing(conn: sa.Connection, job: JobRecord) -> tuple[float | None, float | None]:
    """Run time and CPU seconds of the job that really ran (a reused job did not)."""
    ran = job
    if job.reused_from is not None:
        row = conn.execute(sa.select(jobs).where(jobs.c.id == job.reused_from)).first()
        if row is not None:
            ran = JobRecord(**row._mapping)
    if ran.started_at is None or ran.finished_at is None:
        return None, None
    return ran.finished_at - ran.started_at, ran.cpu_seconds


def add_run(engine: sa.Engine, watch: int, commit: Commit, job: JobRecord) -> RunRecord:
    """Record the run of ``commit`` made by ``job`` (replacing a failed one)."""
    values = {
        "watch": watch,
        "commit": commit.sha,
        "commit_time": commit.time,
        "subject": commit.subject,
        "generation": commit.generation,
        "job": job.id,
        "state": job.state,
        "output_pdh": job.output_pdh,
        "run_time": None,
        "cpu_seconds": None,
        "equals_previous": None,
        "reused": job.reused_from is not None,
        "created_at": time.time(),
    }
    key = (regol_runs.c.watch == watch) & (regol_runs.c.commit == commit.sha)
    try:
        with write(engine) as conn:
            old = conn.execute(sa.select(regol_runs.c.state).where(key)).scalar()
            if old is None:
                conn.execute(regol_runs.insert().values(**values))
            elif old in FINISHED and old != "complete":
                conn.execute(regol_runs.update().where(key).values(**values))
            else:
                raise ConflictError(f"commit {commit.sha[:12]} already has a run")
    except sa.exc.IntegrityError as e:
        if duplicate_key(e):  # another process recorded it first
            raise ConflictError(f"commit {commit.sha[:12]} already has a run") from e
        raise
    refresh(engine, watch)
    with connect(engine) as conn:
        return _run(conn.execute(sa.select(regol_runs).where(key)).one())


def _updates(conn: sa.Connection, watch: int) -> dict[int, dict[str, object]]:
    """What the runs of ``watch`` lack: states of finished jobs, and which
    outputs equal the previous commit's (run id -> new values)."""
    query = (
        sa.select(regol_runs)
        .where(regol_runs.c.watch == watch)
        .order_by(regol_runs.c.generation, regol_runs.c.id)
    )
    rows = [_run(r) for r in conn.execute(query)]
    updates: dict[int, dict[str, object]] = {}
    current = {r.id: (r.state, r.output_pdh) for r in rows}
    # A run whose state is not final, or final without its timing yet.
    pending = [r for r in rows if r.state not in FINISHED or r.run_time is None]
    if pending:
        found = conn.execute(sa.select(jobs).where(jobs.c.id.in_([r.job for r in pending])))
        by_id = {j.id: JobRecord(**j._mapping) for j in found}
        for r in pending:
            job = by_id.get(r.job)
            if job is None:
                continue
            run_time, cpu = _timing(conn, job) if job.state in FINISHED else (None, None)
            values: dict[str, object] = {
                "state": job.state,
                "output_pdh": job.output_pdh,
                "run_time": run_time,
                "cpu_seconds": cpu,
                "reused": job.reused_from is not None,
            }
            if any(getattr(r, k) != v for k, v in values.items()):
                updates[r.id] = values
                current[r.id] = (job.state, job.output_pdh)
    outcomes = [Outcome(*current[r.id]) for r in rows]
    for r, equal in zip(rows, changes(outcomes), strict=True):
        if r.equals_previous != equal:
            updates.setdefault(r.id, {})["equals_previous"] = equal
    return updates


def refresh(engine: sa.Engine, watch: int) -> None:
    """Copy the states of unfinished runs from their jobs and recompute which
    outputs equal the previous commit's. Reading only, unless something
    changed (a page view takes no write lock); then the same again in one
    write transaction, so two refreshes at once agree."""
    with connect(engine) as conn:
        if not _updates(conn, watch):
            return
    with write(engine) as conn:
        for run_id, values in _updates(conn, watch).items():
            conn.execute(regol_runs.update().where(regol_runs.c.id == run_id).values(**values))


def history(
    engine: sa.Engine, watch: int, *, after: int = 0, limit: int | None = None
) -> list[RunRecord]:
    """A watch's runs in commit order (refreshed from their jobs first): those
    after the run ``after`` (0: from the first), at most ``limit`` (None: all).
    A run is never deleted, so its place in that order can be looked up."""
    get_watch(engine, watch)
    refresh(engine, watch)
    runs = regol_runs.c
    query = sa.select(regol_runs).where(runs.watch == watch).order_by(runs.generation, runs.id)
    with connect(engine) as conn:
        if after:
            place = sa.select(runs.generation).where(runs.watch == watch, runs.id == after)
            generation = conn.execute(place).scalar()
            if generation is None:
                raise NotFoundError(f"watch {watch} has no run {after}")
            query = query.where(
                sa.or_(
                    runs.generation > generation,
                    sa.and_(runs.generation == generation, runs.id > after),
                )
            )
        return [_run(r) for r in conn.execute(query.limit(limit))]


def active_job_states(engine: sa.Engine) -> Sequence[str]:
    """The states of every job not finished (for ``model.may_start``)."""
    query = sa.select(jobs.c.state).where(jobs.c.state.not_in(list(FINISHED)))
    with connect(engine) as conn:
        return [r.state for r in conn.execute(query)]


def unfinished_jobs(engine: sa.Engine, job_ids: Iterable[int]) -> int:
    """How many of these jobs have not finished yet."""
    query = (
        sa.select(sa.func.count())
        .select_from(jobs)
        .where(jobs.c.id.in_(list(job_ids)), jobs.c.state.not_in(list(FINISHED)))
    )
    with connect(engine) as conn:
        return int(conn.execute(query).scalar() or 0)
