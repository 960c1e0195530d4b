"""Jobs and steps in the catalog: every function takes an SQLAlchemy engine.

The manager keeps all of its state here, so a restarted manager (or another
one, later the controller's) picks up where the last one stopped. Its
changes of one loop turn are written in one transaction (``save_turn``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from warehouse.catalog.db import connect, write
from warehouse.catalog.schema import jobs, steps
from warehouse.errors import NotFoundError, UsageError
from warehouse.jobs.jobrecords import JobRecord, StepRecord
from warehouse.jobs.model import ACTIVE, FINISHED, Job, Resources, Step
from warehouse.usage.model import COLUMNS as USAGE_COLUMNS

__all__ = [
    "RESULT_COLUMNS",
    "STATE_COLUMNS",
    "JobRecord",
    "StepRecord",
    "as_inserted",
    "fail_waiting",
    "find_reusable",
    "find_reusable_many",
    "get_job",
    "insert_job",
    "insert_jobs",
    "list_jobs",
    "list_steps",
    "load_job",
    "load_jobs",
    "new_job_ids",
    "request_control",
    "save_turn",
    "steps_of",
    "take_controls",
]


def insert_job(engine: sa.Engine, values: Mapping[str, Any]) -> JobRecord:
    """A new job row; a queued job gets its step 0 in the same transaction."""
    row = {
        "created_at": time.time(),
        "control": None,
        "steps_done": 0,
        "steps_running": 0,
        "steps_queued": 0,
        "failed_attempts": 0,
        "cpu_seconds": 0.0,
        **values,
    }
    with write(engine) as conn:
        if row["state"] == "queued":
            row["steps_queued"] = 1
        job_id = conn.execute(jobs.insert().values(**row)).inserted_primary_key[0]  # type: ignore[index]
        if row["state"] == "queued":
            conn.execute(steps.insert().values(**_new_step(job_id, Step(0, 0))))
    return get_job(engine, job_id)


def insert_jobs(
    engine: sa.Engine,
    rows: Sequence[Mapping[str, Any]],
    *,
    then: Callable[[sa.Connection, list[JobRecord]], None] | None = None,
) -> list[JobRecord]:
    """Many new job rows (and the step 0 of each queued one) in one transaction.

    ``then``: called with the new jobs before that transaction commits.
    """
    if not rows:
        return []
    defaults = {
        "created_at": time.time(),
        "control": None,
        "steps_done": 0,
        "steps_running": 0,
        "steps_queued": 0,
        "failed_attempts": 0,
        "cpu_seconds": 0.0,
        "started_at": None,
        "finished_at": None,
        "output_pdh": None,
        "log_pdh": None,
        "reused_from": None,
        "error": None,
    }
    full = []
    for values in rows:
        row = {**defaults, **values}
        if row["state"] == "queued":
            row["steps_queued"] = 1
        full.append(row)
    with write(engine) as conn:
        # One executemany returning the new ids in the rows' order (every row has
        # the same columns: the defaults above fill them all).
        insert = jobs.insert().returning(jobs.c.id, sort_by_parameter_order=True)
        ids: list[int] = list(conn.execute(insert, full).scalars())
        queued = [
            _new_step(i, Step(0, 0))
            for i, r in zip(ids, full, strict=True)
            if r["state"] == "queued"
        ]
        if queued:
            conn.execute(steps.insert(), queued)
        found = {
            r.id: JobRecord(**r._mapping)
            for r in conn.execute(sa.select(jobs).where(jobs.c.id.in_(ids)))
        }
        made = [found[i] for i in ids]
        if then is not None:
            then(conn, made)
    return made


def as_inserted(record: JobRecord) -> Job:
    """A job just inserted (``insert_jobs``) as ``load_job`` would read it back:
    a queued job has its step 0, nothing else has steps."""
    return _job(record, [Step(0, 0)] if record.state == "queued" else [])


def find_reusable_many(engine: sa.Engine, keys: Iterable[str]) -> dict[str, JobRecord]:
    """For each reuse key, the newest complete job with it (keys without one are left out)."""
    wanted = sorted(set(keys))
    found: dict[str, JobRecord] = {}
    with connect(engine) as conn:
        for i in range(0, len(wanted), 500):
            query = (
                sa.select(jobs)
                .where(jobs.c.reuse_key.in_(wanted[i : i + 500]), jobs.c.state == "complete")
                .order_by(jobs.c.id)
            )
            for r in conn.execute(query):
                found[r.reuse_key] = JobRecord(**r._mapping)  # the newest wins
    return found


def _new_step(job_id: int, step: Step) -> dict[str, Any]:
    return {
        "job": job_id,
        "number": step.number,
        "level": step.level,
        "input": step.input,
        "state": step.state,
        "attempts": step.attempts,
        "failures": step.failures,
    }


# Ids and step numbers are INTEGER columns (32-bit in PostgreSQL): a larger
# one names nothing, and would make the query itself fail.
_MAX_ID = 2**31 - 1


def _fits(*numbers: int | None) -> bool:
    return all(n is None or -_MAX_ID <= n <= _MAX_ID for n in numbers)


def get_job(engine: sa.Engine, job_id: int) -> JobRecord:
    if not _fits(job_id):
        raise NotFoundError(f"no job {job_id}")
    with connect(engine) as conn:
        row = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).first()
    if row is None:
        raise NotFoundError(f"no job {job_id}")
    return JobRecord(**row._mapping)


def list_jobs(
    engine: sa.Engine,
    states: Iterable[str] | None = None,
    *,
    after: int = 0,
    limit: int | None = None,
) -> list[JobRecord]:
    """Jobs by id, those after job ``after``; at most ``limit`` (None: all)."""
    query = sa.select(jobs).where(jobs.c.id > after).order_by(jobs.c.id).limit(limit)
    if states is not None:
        query = query.where(jobs.c.state.in_(list(states)))
    with connect(engine) as conn:
        return [JobRecord(**r._mapping) for r in conn.execute(query)]


def list_steps(
    engine: sa.Engine,
    job_id: int,
    *,
    level: int | None = None,
    number: int | None = None,
    failed: bool = False,
    after: int | None = None,
    limit: int | None = None,
) -> list[StepRecord]:
    """A job's steps by number (``failed``: only those with failed attempts),
    those numbered above ``after`` (None: from the first); at most ``limit``
    (None: all)."""
    if not _fits(job_id, level, number, after):
        return []
    query = sa.select(steps).where(steps.c.job == job_id).order_by(steps.c.number).limit(limit)
    if after is not None:
        query = query.where(steps.c.number > after)
    if level is not None:
        query = query.where(steps.c.level == level)
    if number is not None:
        query = query.where(steps.c.number == number)
    if failed:
        query = query.where(steps.c.failures > 0)
    with connect(engine) as conn:
        return [StepRecord(**r._mapping) for r in conn.execute(query)]


def steps_of(engine: sa.Engine, job_ids: Sequence[int]) -> dict[int, list[StepRecord]]:
    """``list_steps`` of many jobs in one query per 500 (jobs finishing in one turn)."""
    ids = [i for i in dict.fromkeys(job_ids) if _fits(i)]
    out: dict[int, list[StepRecord]] = {i: [] for i in ids}
    with connect(engine) as conn:
        for i in range(0, len(ids), 500):
            query = sa.select(steps).where(steps.c.job.in_(ids[i : i + 500]))
            for r in conn.execute(query.order_by(steps.c.job, steps.c.number)):
                out[r.job].append(StepRecord(**r._mapping))
    return out


def find_reusable(engine: sa.Engine, reuse_key: str) -> JobRecord | None:
    """The newest complete job with this reuse key, if any."""
    query = (
        sa.select(jobs)
        .where(jobs.c.reuse_key == reuse_key, jobs.c.state == "complete")
        .order_by(jobs.c.id.desc())
        .limit(1)
    )
    with connect(engine) as conn:
        row = conn.execute(query).first()
    return None if row is None else JobRecord(**row._mapping)


def request_control(engine: sa.Engine, job_id: int, control: str) -> JobRecord:
    """Ask the manager to cancel, pause or resume a job."""
    if control not in ("cancel", "pause", "resume"):
        raise UsageError(f"unknown job control {control!r}")
    if not _fits(job_id):
        raise NotFoundError(f"no job {job_id}")
    with write(engine) as conn:
        state = conn.execute(sa.select(jobs.c.state).where(jobs.c.id == job_id)).scalar()
        if state is None:
            raise NotFoundError(f"no job {job_id}")
        if state in FINISHED:
            raise UsageError(f"job {job_id} is already {state}")
        conn.execute(jobs.update().where(jobs.c.id == job_id).values(control=control))
    return get_job(engine, job_id)


def take_controls(engine: sa.Engine, job_ids: Sequence[int]) -> list[tuple[int, str]]:
    """Pending control requests for these jobs, cleared as they are taken."""
    if not job_ids:
        return []
    query = sa.select(jobs.c.id, jobs.c.control).where(
        jobs.c.control.is_not(None), jobs.c.id.in_(list(job_ids))
    )
    with connect(engine) as conn:  # nearly always none: no write transaction for that
        if conn.execute(query.limit(1)).first() is None:
            return []
    with write(engine) as conn:
        found = [(r.id, r.control) for r in conn.execute(query)]
        if found:
            ids = [job_id for job_id, _ in found]
            conn.execute(jobs.update().where(jobs.c.id.in_(ids)).values(control=None))
    return found


def new_job_ids(engine: sa.Engine, after: int, executor: str) -> list[int]:
    """Active jobs for this executor with an id above ``after``."""
    query = sa.select(jobs.c.id).where(
        jobs.c.id > after, jobs.c.state.in_(list(ACTIVE)), jobs.c.executor == executor
    )
    with connect(engine) as conn:
        return [r.id for r in conn.execute(query.order_by(jobs.c.id))]


def fail_waiting(engine: sa.Engine, executor: str, reason: str) -> list[int]:
    """Fail every active job of ``executor`` (its steps stopped), for a manager
    that cannot make that executor: they would wait for ever. Called with the
    executor's manager lock held, so no manager runs them meanwhile."""
    now = time.time()
    with write(engine) as conn:
        ids = [
            r.id
            for r in conn.execute(
                sa.select(jobs.c.id).where(
                    jobs.c.executor == executor, jobs.c.state.in_(list(ACTIVE))
                )
            )
        ]
        if ids:
            conn.execute(
                steps.update()
                .where(steps.c.job.in_(ids), steps.c.state.in_(["queued", "running"]))
                .values(state="stopped", finished_at=now)
            )
            conn.execute(
                jobs.update()
                .where(jobs.c.id.in_(ids))
                .values(
                    state="failed",
                    error=reason,
                    finished_at=now,
                    steps_running=0,
                    steps_queued=0,
                    control=None,
                )
            )
    return ids


def load_job(engine: sa.Engine, job_id: int) -> tuple[JobRecord, Job]:
    """A job row and its steps as the state machine's values."""
    found = load_jobs(engine, [job_id])
    if not found:
        raise NotFoundError(f"no job {job_id}")
    return found[0]


def load_jobs(engine: sa.Engine, job_ids: Sequence[int]) -> list[tuple[JobRecord, Job]]:
    """``load_job`` for many jobs, two queries per 500 (a workflow's frontier
    arrives at once); jobs not found are left out."""
    ids = [i for i in dict.fromkeys(job_ids) if _fits(i)]
    rows: dict[int, JobRecord] = {}
    stepped: dict[int, list[Step]] = {}
    with connect(engine) as conn:
        for i in range(0, len(ids), 500):
            chunk = ids[i : i + 500]
            for r in conn.execute(sa.select(jobs).where(jobs.c.id.in_(chunk))):
                rows[r.id] = JobRecord(**r._mapping)
            query = sa.select(steps).where(steps.c.job.in_(chunk))
            for s in conn.execute(query.order_by(steps.c.job, steps.c.number)):
                stepped.setdefault(s.job, []).append(
                    Step(
                        s.number,
                        s.level,
                        s.input,
                        s.state,
                        s.attempts,
                        s.failures,
                        s.exit_status,
                        s.started_at,
                        s.finished_at,
                    )
                )
    return [(rows[i], _job(rows[i], stepped.get(i, []))) for i in ids if i in rows]


def _job(record: JobRecord, loaded: list[Step]) -> Job:
    return Job(
        record.id,
        Resources(record.cpus, record.memory),
        record.priority,
        record.max_attempts,
        record.state,
        loaded,
        record.error,
        record.started_at,
        record.finished_at,
        record.failed_attempts,
        user=record.submitted_by,
    )


def save_turn(
    engine: sa.Engine,
    job_rows: Mapping[int, Mapping[str, Any]],
    new_steps: Sequence[Mapping[str, Any]],
    step_states: Sequence[Mapping[str, Any]],
    step_results: Sequence[Mapping[str, Any]],
    *,
    collections: Sequence[Mapping[str, Any]] = (),
) -> None:
    """Write one loop turn in one transaction.

    ``collections``: rows of collections the turn made (outputs and logs),
    recorded unless already there, before the job rows that name them.

    ``step_states`` rows carry ``job``, ``number`` and every column of
    ``STATE_COLUMNS``; ``step_results`` rows ``job``, ``number`` and every
    column of ``RESULT_COLUMNS``. Each kind is one executemany.
    """
    with write(engine) as conn:
        if collections:
            _insert_collections(conn, collections)
        if new_steps:
            conn.execute(steps.insert(), list(new_steps))
        for rows, columns in ((step_states, STATE_COLUMNS), (step_results, RESULT_COLUMNS)):
            if rows:
                update = (
                    steps.update()
                    .where(steps.c.job == sa.bindparam("b_job"))
                    .where(steps.c.number == sa.bindparam("b_number"))
                    .values({c: sa.bindparam(c) for c in columns})
                )
                params = [
                    {"b_job": r["job"], "b_number": r["number"], **{c: r[c] for c in columns}}
                    for r in rows
                ]
                conn.execute(update, params)
        # Rows changing the same columns go in one executemany (a turn finishing
        # several jobs changes them alike): one statement, not one per job.
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for job_id, values in job_rows.items():
            groups.setdefault(tuple(sorted(values)), []).append({"b_id": job_id, **values})
        for cols, params in groups.items():
            update = (
                jobs.update()
                .where(jobs.c.id == sa.bindparam("b_id"))
                .values({c: sa.bindparam(c) for c in cols})
            )
            conn.execute(update, params)


def _insert_collections(conn: sa.Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    from warehouse.catalog.schema import collections as table

    unique = list({r["pdh"]: r for r in rows}.values())
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        conn.execute(pg_insert(table).on_conflict_do_nothing(index_elements=["pdh"]), unique)
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        conn.execute(sqlite_insert(table).on_conflict_do_nothing(index_elements=["pdh"]), unique)


STATE_COLUMNS = ("state", "attempts", "failures", "exit_status", "started_at", "finished_at")
RESULT_COLUMNS = ("host", "output", "intermediate", "log", "log_tail", "counters", *USAGE_COLUMNS)
