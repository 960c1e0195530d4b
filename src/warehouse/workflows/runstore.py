"""Workflow runs, nodes and combined collections in the catalog.

Every function takes an SQLAlchemy engine. A run's driver keeps all of its
state here, so another driver (the same command again, or a restarted
controller) can take the run over where the last one stopped.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from warehouse.catalog.db import connect, duplicate_key, insert_ignoring_duplicates, write
from warehouse.catalog.schema import collection_parts, workflow_nodes, workflow_runs
from warehouse.errors import NotFoundError, UsageError
from warehouse.workflows.runrecords import (
    CWL_DRIVER,
    RUN_FINISHED,
    CollectionPart,
    NodeRecord,
    RunRecord,
    RunWithNodes,
)

__all__ = [
    "add_nodes",
    "claim_run",
    "combined_of",
    "find_resumable",
    "get_run",
    "get_run_with_nodes",
    "has_parts",
    "heartbeat",
    "insert_run",
    "job_states",
    "list_nodes",
    "list_runs",
    "node_row",
    "parts_of",
    "record_parts",
    "request_cancel",
    "run_changes",
    "run_view",
    "runs_of_job",
    "stamp",
    "update_nodes",
    "update_run",
    "versionless",
    "write_nodes",
    "write_parts",
]


def insert_run(
    engine: sa.Engine,
    values: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]],
) -> RunRecord:
    """A new run and all of its nodes, in one transaction.

    ``nodes`` rows carry ``node``, ``function`` and ``depends_on`` (a list);
    the rest defaults to a waiting node.
    """
    row = {"created_at": time.time(), "control": None, **values}
    with write(engine) as conn:
        run_id = conn.execute(workflow_runs.insert().values(**row)).inserted_primary_key[0]  # type: ignore[index]
        if nodes:
            conn.execute(
                workflow_nodes.insert(), [node_row(run_id, i, n) for i, n in enumerate(nodes)]
            )
    return get_run(engine, run_id)


def add_nodes(
    engine: sa.Engine, run_id: int, nodes: Sequence[Mapping[str, Any]], *, first_position: int
) -> None:
    """Nodes added to a run as it goes (a CWL run learns its invocations only then)."""
    with write(engine) as conn:
        version = stamp(conn, run_id)
        conn.execute(
            workflow_nodes.insert(),
            [
                {**node_row(run_id, first_position + i, n), "version": version}
                for i, n in enumerate(nodes)
            ],
        )


def node_row(run_id: int, position: int, node: Mapping[str, Any]) -> dict[str, Any]:
    """A node's row: waiting unless ``node`` (with ``node``, ``function``,
    ``depends_on`` a list) says otherwise."""
    return {
        "run_id": run_id,
        "position": position,
        "job_id": None,
        "state": "waiting",
        "reused": False,
        "input_pdh": None,
        "output_pdh": None,
        "started_at": None,
        "finished_at": None,
        "error": None,
        **node,
        "depends_on": json.dumps(list(node["depends_on"])),
    }


# Run ids are INTEGER columns (32-bit in PostgreSQL): a larger one names no run,
# and would make the query itself fail.
_MAX_ID = 2**31 - 1


def _no_run(run_id: int) -> bool:
    return not -_MAX_ID <= run_id <= _MAX_ID


def get_run(engine: sa.Engine, run_id: int) -> RunRecord:
    if _no_run(run_id):
        raise NotFoundError(f"no workflow run {run_id}")
    with connect(engine) as conn:
        row = conn.execute(sa.select(workflow_runs).where(workflow_runs.c.id == run_id)).first()
    if row is None:
        raise NotFoundError(f"no workflow run {run_id}")
    return RunRecord(**row._mapping)


def list_runs(
    engine: sa.Engine,
    *,
    states: Iterable[str] | None = None,
    owner: str | None = None,
    limit: int | None = None,
) -> list[RunRecord]:
    """Runs, newest first."""
    query = sa.select(workflow_runs).order_by(workflow_runs.c.id.desc())
    if states is not None:
        query = query.where(workflow_runs.c.state.in_(list(states)))
    if owner is not None:
        query = query.where(workflow_runs.c.owner == owner)
    if limit is not None:
        query = query.limit(limit)
    with connect(engine) as conn:
        return [RunRecord(**r._mapping) for r in conn.execute(query)]


def list_nodes(engine: sa.Engine, run_id: int) -> list[NodeRecord]:
    """A run's nodes in the order the file lists its jobs."""
    if _no_run(run_id):
        return []
    query = (
        sa.select(workflow_nodes)
        .where(workflow_nodes.c.run_id == run_id)
        .order_by(workflow_nodes.c.position)
    )
    with connect(engine) as conn:
        return [NodeRecord(**r._mapping) for r in conn.execute(query)]


def get_run_with_nodes(engine: sa.Engine, run_id: int) -> RunWithNodes:
    """A run with every node (for ``wh workflow show`` and the run page)."""
    return RunWithNodes(get_run(engine, run_id), list_nodes(engine, run_id))


def update_run(engine: sa.Engine, run_id: int, values: Mapping[str, Any]) -> None:
    with write(engine) as conn:
        conn.execute(
            workflow_runs.update()
            .where(workflow_runs.c.id == run_id)
            .values(**values, version=workflow_runs.c.version + 1)
        )


def stamp(conn: sa.Connection, run_id: int) -> int:
    """Raise the run's version in the caller's transaction; the new one, which
    the nodes changed with it carry (``run_changes`` answers by it)."""
    conn.execute(
        workflow_runs.update()
        .where(workflow_runs.c.id == run_id)
        .values(version=workflow_runs.c.version + 1)
    )
    query = sa.select(workflow_runs.c.version).where(workflow_runs.c.id == run_id)
    return int(conn.execute(query).scalar() or 0)


def update_nodes(
    engine: sa.Engine,
    run_id: int,
    nodes: Mapping[str, Mapping[str, Any]],
    run_values: Mapping[str, Any] | None = None,
) -> None:
    """Several nodes' changes (and the run's) in one transaction."""
    if not nodes and not run_values:
        return
    with write(engine) as conn:
        write_nodes(conn, run_id, nodes, run_values)


def write_nodes(
    conn: sa.Connection,
    run_id: int,
    nodes: Mapping[str, Mapping[str, Any]],
    run_values: Mapping[str, Any] | None = None,
) -> None:
    """``update_nodes`` inside the caller's transaction."""
    changed = {name: values for name, values in nodes.items() if values}
    # A heartbeat alone is no change a reader of the run sees: no new version.
    if changed or set(run_values or ()) - {"heartbeat_at"}:
        version = stamp(conn, run_id)
        changed = {name: {**values, "version": version} for name, values in changed.items()}
    # Nodes changing the same columns go in one executemany (a turn of a big
    # DAG changes dozens of nodes alike).
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for name, values in changed.items():
        cols = tuple(sorted(values))
        groups.setdefault(cols, []).append({"b_node": name, **values})
    for cols, rows in groups.items():
        update = (
            workflow_nodes.update()
            .where(
                workflow_nodes.c.run_id == run_id,
                workflow_nodes.c.node == sa.bindparam("b_node"),
            )
            .values({c: sa.bindparam(c) for c in cols})
        )
        conn.execute(update, rows)
    if run_values:
        conn.execute(
            workflow_runs.update().where(workflow_runs.c.id == run_id).values(**run_values)
        )


def find_resumable(engine: sa.Engine, run_key: str, owner: str) -> RunRecord | None:
    """The newest unfinished run of this key and owner, if any."""
    query = (
        sa.select(workflow_runs)
        .where(
            workflow_runs.c.run_key == run_key,
            workflow_runs.c.owner == owner,
            workflow_runs.c.state.not_in(list(RUN_FINISHED)),
        )
        .order_by(workflow_runs.c.id.desc())
        .limit(1)
    )
    with connect(engine) as conn:
        row = conn.execute(query).first()
    return None if row is None else RunRecord(**row._mapping)


def claim_run(
    engine: sa.Engine, run_id: int, driver: str, *, stale_after: float, now: float | None = None
) -> bool:
    """Become the run's driver if it has none or its driver fell silent (compare-and-swap)."""
    now = time.time() if now is None else now
    with write(engine) as conn:
        result = conn.execute(
            workflow_runs.update()
            .where(
                workflow_runs.c.id == run_id,
                workflow_runs.c.state.not_in(list(RUN_FINISHED)),
                sa.or_(
                    workflow_runs.c.driver.is_(None),
                    workflow_runs.c.driver == driver,
                    workflow_runs.c.heartbeat_at.is_(None),
                    workflow_runs.c.heartbeat_at < now - stale_after,
                ),
            )
            .values(driver=driver, heartbeat_at=now)
        )
    return bool(result.rowcount == 1)


def heartbeat(engine: sa.Engine, run_id: int, driver: str) -> bool:
    """Renew the driver's claim; False if another driver took the run over."""
    with write(engine) as conn:
        result = conn.execute(
            workflow_runs.update()
            .where(workflow_runs.c.id == run_id, workflow_runs.c.driver == driver)
            .values(heartbeat_at=time.time())
        )
    return bool(result.rowcount == 1)


def request_cancel(engine: sa.Engine, run_id: int) -> RunRecord:
    """Ask the run's driver to cancel it (its running jobs are cancelled too)."""
    if _no_run(run_id):
        raise NotFoundError(f"no workflow run {run_id}")
    with write(engine) as conn:
        state = conn.execute(
            sa.select(workflow_runs.c.state).where(workflow_runs.c.id == run_id)
        ).scalar()
        if state is None:
            raise NotFoundError(f"no workflow run {run_id}")
        if state in RUN_FINISHED:
            raise UsageError(f"workflow run {run_id} is already {state}")
        conn.execute(
            workflow_runs.update()
            .where(workflow_runs.c.id == run_id)
            .values(control="cancel", version=workflow_runs.c.version + 1)
        )
    return get_run(engine, run_id)


def runs_of_job(engine: sa.Engine, job_id: int) -> list[NodeRecord]:
    """The workflow nodes that a job ran or was reused for."""
    query = sa.select(workflow_nodes).where(workflow_nodes.c.job_id == job_id)
    with connect(engine) as conn:
        return [NodeRecord(**r._mapping) for r in conn.execute(query)]


def record_parts(engine: sa.Engine, pdh: str, parts: Sequence[tuple[str, str]]) -> None:
    """Record combined collection ``pdh`` as ``parts`` ((dir, part PDH), in order).

    Recording the same combination twice is harmless (same PDH, same parts).
    """
    rows = [
        {"pdh": pdh, "position": i, "dir": d, "part_pdh": part} for i, (d, part) in enumerate(parts)
    ]
    try:
        with write(engine) as conn:
            known = conn.execute(
                sa.select(sa.func.count()).where(collection_parts.c.pdh == pdh)
            ).scalar()
            if not known and rows:
                conn.execute(collection_parts.insert(), rows)
    except sa.exc.IntegrityError as e:
        if not duplicate_key(e):
            raise


def write_parts(conn: sa.Connection, pdh: str, parts: Sequence[tuple[str, str]]) -> None:
    """``record_parts`` inside the caller's transaction (the same combination
    recorded meanwhile by another writer stands)."""
    rows = [
        {"pdh": pdh, "position": i, "dir": d, "part_pdh": part} for i, (d, part) in enumerate(parts)
    ]
    insert_ignoring_duplicates(conn, collection_parts, rows, ["pdh", "position"])


def has_parts(engine: sa.Engine, pdh: str) -> bool:
    """Whether ``pdh`` was recorded as a combined collection."""
    query = sa.select(collection_parts.c.pdh).where(collection_parts.c.pdh == pdh).limit(1)
    with connect(engine) as conn:
        return conn.execute(query).first() is not None


def parts_of(engine: sa.Engine, pdh: str) -> list[CollectionPart]:
    """The parts of a combined collection (empty if it is not one)."""
    query = (
        sa.select(collection_parts)
        .where(collection_parts.c.pdh == pdh)
        .order_by(collection_parts.c.position)
    )
    with connect(engine) as conn:
        return [CollectionPart(**r._mapping) for r in conn.execute(query)]


def combined_of(engine: sa.Engine, part_pdh: str) -> list[CollectionPart]:
    """Every combined collection that has ``part_pdh`` as a part."""
    query = sa.select(collection_parts).where(collection_parts.c.part_pdh == part_pdh)
    with connect(engine) as conn:
        return [CollectionPart(**r._mapping) for r in conn.execute(query)]


def job_states(engine: sa.Engine, job_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """What a run follows of its jobs, for many jobs in one query."""
    from warehouse.catalog.schema import jobs

    cols = (
        jobs.c.id,
        jobs.c.state,
        jobs.c.output_pdh,
        jobs.c.reused_from,
        jobs.c.started_at,
        jobs.c.finished_at,
        jobs.c.error,
        jobs.c.steps_done,
    )
    found: dict[int, dict[str, Any]] = {}
    ids = list(job_ids)
    with connect(engine) as conn:
        for i in range(0, len(ids), 500):
            query = sa.select(*cols).where(jobs.c.id.in_(ids[i : i + 500]))
            for row in conn.execute(query):
                found[row.id] = dict(row._mapping)
    return found


def run_view(engine: sa.Engine, run_id: int) -> dict[str, Any]:
    """A run with its nodes as plain values, each node with its job's ``steps_done``."""
    return _with_steps(engine, get_run_with_nodes(engine, run_id).as_dict())


def run_changes(engine: sa.Engine, run_id: int, since: int) -> dict[str, Any]:
    """``run_view`` with only the nodes changed after version ``since`` (every
    node once the run has finished: a follower's last answer is whole; every
    node of a CWL run, whose runner's writes raise no version yet), and
    ``since`` itself."""
    if _no_run(run_id):
        raise NotFoundError(f"no workflow run {run_id}")
    with connect(engine) as conn:
        # The run first: a change committed between the two reads is answered
        # again next time (its nodes' version is above the run's read here),
        # never missed.
        row = conn.execute(sa.select(workflow_runs).where(workflow_runs.c.id == run_id)).first()
        if row is None:
            raise NotFoundError(f"no workflow run {run_id}")
        run = RunRecord(**row._mapping)
        if run.state in RUN_FINISHED or versionless(run):
            nodes = None
        else:
            query = (
                sa.select(workflow_nodes)
                .where(workflow_nodes.c.run_id == run_id, workflow_nodes.c.version > since)
                .order_by(workflow_nodes.c.position)
            )
            nodes = [NodeRecord(**r._mapping) for r in conn.execute(query)]
    if nodes is None:
        return {**run_view(engine, run_id), "since": since}
    view = RunWithNodes(run, nodes).as_dict()
    return {**_with_steps(engine, view), "since": since}


def versionless(run: RunRecord) -> bool:
    """A CWL run: its runner's writes (``cwlruns``) do not raise its version."""
    return (run.driver or "").startswith(CWL_DRIVER)


def _with_steps(engine: sa.Engine, view: dict[str, Any]) -> dict[str, Any]:
    """Each node of ``view`` with its job's ``steps_done`` (0 without a job)."""
    ids = [n["job_id"] for n in view["nodes"] if n["job_id"] is not None]
    states = job_states(engine, ids) if ids else {}
    for node in view["nodes"]:
        row = states.get(node["job_id"]) if node["job_id"] is not None else None
        node["steps_done"] = row["steps_done"] if row else 0
    return view
