"""CWL runs in the catalog: what their runner writes, embedded or through a
controller's API (docs/cwl.md, "The run").

A CWL run is carried out by its runner (``warehouse.cwl``: cwltool walks the
workflow in that process), not by a workflow driver, so no other process can
take it over. The runner keeps a heartbeat on the run; once its process is
gone (same host) or its heartbeat is ``STALE_AFTER`` old, ``end_lost`` ends the
run ``failed`` and cancels the jobs it was waiting on, as nothing would read
them any more. The same functions serve the embedded runner and the
controller's ``/api/v1/cwl-runs``, which makes every write as the caller.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from warehouse.catalog.db import connect, write
from warehouse.catalog.schema import workflow_nodes, workflow_runs
from warehouse.errors import WarehouseError
from warehouse.jobs import jobstore
from warehouse.jobs.jobrecords import JobRecord
from warehouse.manifest import Manifest
from warehouse.workflows import runstore
from warehouse.workflows.driver import STALE_AFTER, driver_dead
from warehouse.workflows.naming import Names, point_name
from warehouse.workflows.plan import node_state_of_job
from warehouse.workflows.runrecords import CWL_DRIVER, RUN_ACTIVE, RunRecord
from warehouse.workflows.spec import output_name

__all__ = [
    "BEAT_EVERY",
    "Lost",
    "beat",
    "copy_nodes",
    "end_lost",
    "finish",
    "is_cwl_run",
    "part_held",
    "put_node",
    "put_nodes",
    "served_by",
    "start",
]

BEAT_EVERY = 2.0  # seconds between a runner's heartbeats (STALE_AFTER is 5 of them)


def is_cwl_run(run: RunRecord) -> bool:
    return (run.driver or "").startswith(CWL_DRIVER)


def start(
    engine: sa.Engine,
    owner: str,
    *,
    workflow: str,
    file_pdh: str,
    inputs: Mapping[str, Any],
    name_outputs: str | None,
    runner: str,
    run_key: str | None = None,
) -> RunRecord:
    """Record a running CWL run with no node yet; ``runner`` is its ``host:pid``;
    ``run_key``: what the same run again will look for (``served_by``)."""
    values = json.dumps(inputs, sort_keys=True, default=str)
    if run_key is None:
        key = json.dumps(["cwl", file_pdh, values, name_outputs], sort_keys=True)
        run_key = hashlib.sha256(key.encode()).hexdigest()
    now = time.time()
    return runstore.insert_run(
        engine,
        {
            "workflow": workflow[:255],
            "file_pdh": file_pdh,
            "inputs": values,
            "pins": "{}",
            "state": "running",
            "owner": owner,
            "name_outputs": name_outputs,
            "run_key": run_key,
            "started_at": now,
            "driver": (CWL_DRIVER + runner)[:255],
            "heartbeat_at": now,
        },
        [],
    )


def put_node(
    engine: sa.Engine,
    run_id: int,
    node: str,
    function: str,
    depends_on: Sequence[str],
    job: JobRecord,
) -> None:
    """Node ``node`` follows job ``job`` (added at the end if new); its state,
    input and output are the job's own, as the catalog has them. Renews the
    run's heartbeat."""
    put_nodes(engine, run_id, [(node, function, depends_on, job)])


def put_nodes(
    engine: sa.Engine,
    run_id: int,
    nodes: Sequence[tuple[str, str, Sequence[str], JobRecord]],
) -> None:
    """``put_node`` for each of ``nodes`` ((node, function, depends_on, job)),
    in order, in one transaction."""
    if not nodes:
        return
    now = time.time()
    with write(engine) as conn:
        for node, function, depends_on, job in nodes:
            _put_node(conn, run_id, now, node, function, depends_on, job)
        conn.execute(
            workflow_runs.update().where(workflow_runs.c.id == run_id).values(heartbeat_at=now)
        )


def _put_node(
    conn: sa.Connection,
    run_id: int,
    now: float,
    node: str,
    function: str,
    depends_on: Sequence[str],
    job: JobRecord,
) -> None:
    state = node_state_of_job(job.state)
    values: dict[str, Any] = {
        "job_id": job.id,
        "state": state,
        "reused": job.reused_from is not None,
        "input_pdh": job.input_pdh,
        "output_pdh": job.output_pdh,
        "error": job.error,
    }
    if state in ("complete", "failed", "cancelled"):
        values["finished_at"] = job.finished_at or now
    here = (workflow_nodes.c.run_id == run_id, workflow_nodes.c.node == node)
    known = conn.execute(sa.select(workflow_nodes.c.position).where(*here)).first()
    if known is None:
        count = sa.select(sa.func.count()).where(workflow_nodes.c.run_id == run_id)
        position = int(conn.execute(count).scalar() or 0)
        row = {
            "node": node,
            "function": function,
            "depends_on": sorted(set(depends_on) - {node}),
            "started_at": job.started_at or now,
            **values,
        }
        conn.execute(workflow_nodes.insert(), [runstore.node_row(run_id, position, row)])
    else:
        conn.execute(workflow_nodes.update().where(*here).values(**values))


def beat(engine: sa.Engine, run_id: int) -> RunRecord:
    """The runner lives: its heartbeat renewed while the run is active; the run
    as it stands (``control`` says whether ``wh workflow cancel`` asked)."""
    with write(engine) as conn:
        conn.execute(
            workflow_runs.update()
            .where(workflow_runs.c.id == run_id, workflow_runs.c.state.in_(list(RUN_ACTIVE)))
            .values(heartbeat_at=time.time())
        )
    return runstore.get_run(engine, run_id)


def finish(
    host: Names,
    engine: sa.Engine,
    run: RunRecord,
    state: str,
    outputs: Mapping[str, str],
    error: str | None,
    output_object: str | None = None,
    output_files: str | None = None,
) -> str | None:
    """End the run: ``outputs`` (output name -> PDH) recorded and, with a prefix,
    named as ``host``'s user; ``output_object``, a collection holding the
    output object, kept for ``served_by``; ``output_files``, the collection
    of the output files it names, kept with the run. The error naming them,
    or None. A run already ended (by ``end_lost``, its runner thought gone)
    is left as it is."""
    values: dict[str, Any] = {
        "state": state,
        "finished_at": time.time(),
        "control": None,
        "error": error,
    }
    if state == "complete":
        values["outputs"] = json.dumps(dict(outputs), sort_keys=True)
        values["output_object"] = output_object
        values["output_files"] = output_files
        if run.name_outputs:
            try:
                for o, pdh in sorted(outputs.items()):
                    point_name(host, output_name(run.name_outputs, o), pdh)
            except WarehouseError as e:
                values.update(state="failed", error=f"naming the outputs: {e}")
    with write(engine) as conn:
        conn.execute(
            workflow_runs.update()
            .where(workflow_runs.c.id == run.id, workflow_runs.c.state.in_(list(RUN_ACTIVE)))
            .values(**values)
        )
    return str(values["error"]) if values["state"] == "failed" else None


def served_by(engine: sa.Engine, run_key: str, owner: str, *, before: int) -> RunRecord | None:
    """The newest complete CWL run of ``owner`` with ``run_key`` and an output
    object, older than run ``before``: the same run, finished (docs/cwl.md)."""
    query = (
        sa.select(workflow_runs)
        .where(
            workflow_runs.c.run_key == run_key,
            workflow_runs.c.owner == owner,
            workflow_runs.c.state == "complete",
            workflow_runs.c.output_object.is_not(None),
            workflow_runs.c.id < before,
        )
        .order_by(workflow_runs.c.id.desc())
        .limit(1)
    )
    with connect(engine) as conn:
        row = conn.execute(query).first()
    run = None if row is None else RunRecord(**row._mapping)
    return run if run is not None and is_cwl_run(run) else None


def copy_nodes(engine: sa.Engine, source: int, run_id: int) -> int:
    """Run ``run_id`` (with no node yet) gets run ``source``'s nodes, each
    reused: the same jobs answer it. How many."""
    now = time.time()
    rows = [
        {
            "node": n.node,
            "function": n.function,
            "depends_on": n.dependencies,
            "job_id": n.job_id,
            "state": n.state,
            "reused": True,
            "input_pdh": n.input_pdh,
            "output_pdh": n.output_pdh,
            "started_at": now,
            "finished_at": now,
            "error": n.error,
        }
        for n in runstore.list_nodes(engine, source)
    ]
    if rows:
        runstore.add_nodes(engine, run_id, rows, first_position=0)
    return len(rows)


def part_held(combined: Manifest, directory: str, part: Manifest) -> bool:
    """Whether what ``combined`` holds at ``directory`` (a file, or the files
    under it) is made of ``part``'s blocks: a combination recorded through the
    API must be one, or lineage would say what is not so."""
    inside = directory.strip("/")
    files = [f for p, f in combined.files().items() if p == inside or p.startswith(inside + "/")]
    if not files and inside not in combined.empty_directories():
        return False
    theirs = {loc.without_hints() for loc in part.blocks()}
    return all(piece.locator.without_hints() in theirs for f in files for piece in f.pieces)


@dataclass(frozen=True)
class Lost:
    """A CWL run ended because its runner was gone; ``jobs``: the active jobs
    it was waiting on (their cancel asked), by id and executor."""

    run: RunRecord
    jobs: list[tuple[int, str]]


def end_lost(
    engine: sa.Engine, *, stale_after: float = STALE_AFTER, pids: bool = True
) -> list[Lost]:
    """End every active CWL run whose runner is gone (its process, on this host,
    or its heartbeat, ``stale_after`` old): ``failed``, its active nodes
    ``cancelled`` and their jobs' cancel asked (compare-and-swap on the
    heartbeat: a runner that just beat keeps its run). ``pids``: whether the
    runner's ``host:pid`` may be trusted (a controller's runs name a client's
    own word for it: only their heartbeat counts)."""
    now = time.time()
    lost = []
    for run in runstore.list_runs(engine, states=RUN_ACTIVE):
        if not is_cwl_run(run):
            continue
        runner = (run.driver or "")[len(CWL_DRIVER) :]
        silent = run.heartbeat_at is None or run.heartbeat_at < now - stale_after
        if not (silent or (pids and driver_dead(runner))):
            continue
        ended = _end(engine, run, runner, now)
        if ended is not None:
            lost.append(ended)
    return lost


def _end(engine: sa.Engine, run: RunRecord, runner: str, now: float) -> Lost | None:
    heartbeat = (
        workflow_runs.c.heartbeat_at.is_(None)
        if run.heartbeat_at is None
        else workflow_runs.c.heartbeat_at == run.heartbeat_at
    )
    why = f"its runner ({runner}) stopped before the run ended"
    with write(engine) as conn:
        done = conn.execute(
            workflow_runs.update()
            .where(
                workflow_runs.c.id == run.id,
                workflow_runs.c.state.in_(list(RUN_ACTIVE)),
                heartbeat,
            )
            .values(state="failed", finished_at=now, control=None, error=why)
        )
        if done.rowcount != 1:
            return None  # it beat meanwhile, or another ended it
        active = workflow_nodes.c.state.in_(["waiting", "queued", "running"])
        jobs = [
            int(r.job_id)
            for r in conn.execute(
                sa.select(workflow_nodes.c.job_id).where(
                    workflow_nodes.c.run_id == run.id, active, workflow_nodes.c.job_id.is_not(None)
                )
            )
        ]
        conn.execute(
            workflow_nodes.update()
            .where(workflow_nodes.c.run_id == run.id, active)
            .values(state="cancelled", finished_at=now)
        )
    cancelled = []
    for job_id in jobs:
        with contextlib.suppress(WarehouseError):  # finished meanwhile
            job = jobstore.request_control(engine, job_id, "cancel")
            cancelled.append((job_id, job.executor))
    return Lost(runstore.get_run(engine, run.id), cancelled)
