"""Carrying a workflow run out: drive it turn by turn.

A run is started (or found again) by ``runstart.start_run``. ``Driver.turn``
reads its jobs' states in one query, asks ``plan.decide`` what to do,
submits what is ready through normal reuse, and writes every node change
(and its heartbeat) in one transaction.

One driver at a time holds a run (``driver`` and ``heartbeat_at`` with
compare-and-swap); another takes it over once the heartbeat is older than
``STALE_AFTER`` (the process that drove it was killed).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa

from warehouse.catalog.records import add_collection_in
from warehouse.catalog.values import CollectionRecord
from warehouse.collection.records import load_manifests
from warehouse.errors import ConflictError, NotFoundError, WarehouseError
from warehouse.faults import fault_point
from warehouse.jobs import jobstore
from warehouse.jobs.assemble import collection_row
from warehouse.jobs.functions import FunctionVersion
from warehouse.jobs.jobhost import SubmitHost
from warehouse.jobs.jobrecords import JobRecord
from warehouse.jobs.submission import JobRequest, submit_many
from warehouse.manifest import Manifest
from warehouse.workflows import runstore
from warehouse.workflows.combine import combine
from warehouse.workflows.naming import point_name
from warehouse.workflows.plan import (
    ACTIVE_NODE,
    NodeState,
    decide,
    job_input,
    job_params,
    may_move,
    node_state_of_job,
    readers_of,
)
from warehouse.workflows.runhost import AsOwner, RunHost
from warehouse.workflows.runrecords import RUN_FINISHED
from warehouse.workflows.runstart import load_workflow
from warehouse.workflows.spec import output_name

__all__ = [
    "PROGRESS_EVERY",
    "STALE_AFTER",
    "Driver",
    "driver_dead",
    "driver_id",
]

STALE_AFTER = 10.0  # seconds without a heartbeat before another driver may take a run over
_HEARTBEAT = 2.0
# A node following its job (running, complete...) is written at most this often
# (or with the next write of the run): the job's row says it already, so a
# driver taking the run over finds it again. Anything else is written at once.
PROGRESS_EVERY = 0.25


def driver_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def driver_dead(driver: str | None) -> bool:
    """Whether ``driver`` is a process of this host that no longer runs."""
    if not driver:
        return True
    host, _, pid = driver.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # only its heartbeat can tell
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return int(pid) != os.getpid() and _zombie(int(pid))


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return False


class Driver:
    """Drives one run: call ``turn`` until it returns True (the run finished)."""

    def __init__(
        self,
        host: RunHost,
        run_id: int,
        *,
        executor: str = "local",
        driver: str | None = None,
        stale_after: float = STALE_AFTER,
        progress_every: float = PROGRESS_EVERY,
        heartbeat_every: float = _HEARTBEAT,
        keep_new_jobs: bool = False,
    ) -> None:
        self.host = host
        self.engine = host.engine
        self.run_id = run_id
        self.executor = executor
        self.driver = driver or driver_id()
        self.stale_after = stale_after
        self.progress_every = progress_every
        self.heartbeat_every = heartbeat_every
        run = runstore.get_run(self.engine, run_id)
        self.run = run
        self.wf = load_workflow(host, run)
        self.inputs = run.input_values
        self.pins = {
            spec: FunctionVersion(p[3] if len(p) > 3 else spec, p[0], p[1], p[2])
            for spec, p in json.loads(run.pins).items()
        }
        self.nodes = {n.node: n for n in runstore.list_nodes(self.engine, run_id)}
        self.owner = run.owner
        self._last_beat = 0.0
        self.submitted = 0  # jobs this driver submitted (reused or not)
        self.steps_done: dict[str, int] = {}  # by node, as last seen
        ids = {n.job_id: n.node for n in self.nodes.values() if n.job_id is not None}
        if ids:  # a resumed run: what its jobs did so far
            for job_id, row in runstore.job_states(self.engine, list(ids)).items():
                self.steps_done[ids[job_id]] = row["steps_done"]
        self.last_changes: dict[str, dict[str, Any]] = {}  # what the last turn changed
        self._manifests: dict[str, Manifest] = {}  # by PDH, read once
        self.finished = run.state in RUN_FINISHED
        # This turn's node changes, and those already written with submitted jobs' rows.
        self._changes: dict[str, dict[str, Any]] = {}
        self._written: dict[str, dict[str, Any]] = {}
        # Nodes' changes that only follow their jobs, kept for a later write.
        self._pending: dict[str, dict[str, Any]] = {}
        self._followed: set[str] = set()
        self._last_write = 0.0
        self.writes = 0  # writes of the run's nodes or state so far (a follower looks then)
        # With ``keep_new_jobs``: queued jobs submitted since the caller last took
        # them (a manager in this process takes them up at once instead of
        # finding them in the catalog).
        self.keep_new_jobs = keep_new_jobs
        self._readers: dict[str, list[str]] | None = None  # by node, once ``follow`` needs it
        self.new_jobs: list[JobRecord] = []
        # Combined inputs made and not yet recorded, by PDH: their collection row,
        # the blocks of its manifest text, and their parts.
        self._unrecorded: dict[str, tuple[dict[str, Any], list[bytes], list[tuple[str, str]]]] = {}

    def claim(self) -> bool:
        """Become the run's driver: it has none, or its driver died or fell silent."""
        if self.finished:
            return True
        run = runstore.get_run(self.engine, self.run_id)
        stale_after = -1.0 if driver_dead(run.driver) else self.stale_after
        return runstore.claim_run(self.engine, self.run_id, self.driver, stale_after=stale_after)

    # -- one turn -------------------------------------------------------------

    def turn(self) -> bool:
        """Follow the jobs, submit what is ready, write it down; True once finished."""
        if self.finished:
            return True
        now = time.time()
        run = runstore.get_run(self.engine, self.run_id)
        if run.driver != self.driver:
            raise ConflictError(f"workflow run {self.run_id} is now driven by {run.driver}")
        changes: dict[str, dict[str, Any]] = {}
        self._changes = changes
        run_values: dict[str, Any] = {}
        if run.state == "queued":
            run_values.update(state="running", started_at=run.started_at or now)
        if run.control == "cancel":
            return self._cancel(now)
        self._followed = self._follow_jobs(changes)
        submitted_any = True
        while submitted_any:  # reused jobs complete at once: their readers may go now
            decision = decide(self.wf, self._states(changes))
            for name in decision.skip:
                changes.setdefault(name, {}).update(state="skipped", finished_at=now)
            submitted_any = bool(decision.submit)
            for name, values in self._submit_ready(decision.submit, changes).items():
                changes.setdefault(name, {}).update(values)
        if decision.run_state != "running":
            run_values.update(self._finish(decision.run_state, changes, now))
        unwritten = self._unwritten()
        urgent = any(
            n not in self._followed and self._written.get(n) != v for n, v in changes.items()
        )
        self._written.clear()
        if (
            run_values
            or urgent
            or (unwritten and now - self._last_write >= self.progress_every)
            or now - self._last_beat >= self.heartbeat_every
        ):
            run_values["heartbeat_at"] = now
            self._last_beat = self._last_write = now
            runstore.update_nodes(self.engine, self.run_id, unwritten, run_values)
            self.writes += 1
            self._pending = {}
        else:
            self._pending = unwritten
        self._apply(changes)
        self.last_changes = changes
        self.finished = decision.run_state != "running"
        return self.finished

    def follow(self, rows: Sequence[Mapping[str, Any]]) -> bool:
        """Take in finished jobs' rows from a manager in this process that has just
        written them (``jobs.manager.Landed``), reading nothing; True if a turn is
        due now: a node may be submitted or skipped, or the run may end.

        The nodes' changes are kept for the next write, like any followed progress
        (their jobs' rows say it already)."""
        if self.finished:
            return True
        by_job = {n.job_id: n.node for n in self.nodes.values() if n.job_id is not None}
        changes: dict[str, dict[str, Any]] = {}
        for row in rows:
            name = by_job.get(row["id"])
            if name is None or self.nodes[name].state not in ("queued", "running"):
                continue
            manifest = row.get("output_manifest")
            if manifest is not None and row["output_pdh"]:
                self._manifests.setdefault(row["output_pdh"], manifest)  # not read again
            self._follow_row(name, row, changes)
        if not changes:
            return False
        for name, values in changes.items():
            self._pending.setdefault(name, {}).update(values)
        self._apply(changes)
        self.last_changes = changes
        if self._readers is None:
            self._readers = readers_of(self.wf)
        states = {name: node.state for name, node in self.nodes.items()}
        return may_move(self.wf, states, changes, self._readers)

    def _unwritten(self) -> dict[str, dict[str, Any]]:
        """Node changes not yet in the catalog: earlier turns' kept ones, then this turn's."""
        out = {n: dict(v) for n, v in self._pending.items()}
        for name, values in self._changes.items():
            if values and self._written.get(name) != values:
                out.setdefault(name, {}).update(values)
        return out

    def _states(self, changes: Mapping[str, Mapping[str, Any]]) -> dict[str, NodeState]:
        out = {}
        for name, node in self.nodes.items():
            c = changes.get(name, {})
            out[name] = NodeState(c.get("state", node.state), c.get("output_pdh", node.output_pdh))
        return out

    def _apply(self, changes: Mapping[str, Mapping[str, Any]]) -> None:
        from dataclasses import replace

        for name, values in changes.items():
            self.nodes[name] = replace(self.nodes[name], **values)

    def _follow_jobs(self, changes: dict[str, dict[str, Any]]) -> set[str]:
        """Nodes whose jobs changed state since the last turn: their names."""
        following = {
            n.job_id: n.node
            for n in self.nodes.values()
            if n.job_id is not None and n.state in ("queued", "running")
        }
        if not following:
            return set()
        for job_id, row in runstore.job_states(self.engine, list(following)).items():
            self._follow_row(following[job_id], row, changes)
        return set(changes)

    def _follow_row(
        self, name: str, row: Mapping[str, Any], changes: dict[str, dict[str, Any]]
    ) -> None:
        """A followed node's changes from its job's row (none if its state is the same)."""
        self.steps_done[name] = row["steps_done"]
        state = node_state_of_job(row["state"])
        if state == self.nodes[name].state:
            return
        values: dict[str, Any] = {"state": state, "started_at": row["started_at"]}
        if state in ("complete", "failed", "cancelled"):
            values.update(
                output_pdh=row["output_pdh"],
                finished_at=row["finished_at"] or time.time(),
                error=row["error"],
            )
        changes[name] = values

    def _outputs(self, changes: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
        out = {}
        for name, node in self.nodes.items():
            pdh = changes.get(name, {}).get("output_pdh", node.output_pdh)
            if pdh:
                out[name] = pdh
        return out

    def _submit_ready(
        self, names: list[str], changes: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, dict[str, Any]]:
        """Submit these nodes' jobs in one transaction; each node's changes."""
        outputs = self._outputs(changes)
        now = time.time()
        result: dict[str, dict[str, Any]] = {}
        batch: list[tuple[str, JobRequest, FunctionVersion]] = []
        for name in names:
            job = self.wf.jobs[name]
            try:
                key = job_input(job, self.inputs, outputs)
                if isinstance(key, list):
                    key = self._combined(key)
                version = self.pins[job.function]
                request = JobRequest(
                    version.spec,
                    key,
                    job_params(job, self.inputs, outputs),
                    priority=job.priority,
                    cpus=job.cpus,
                    memory=job.memory,
                    max_attempts=job.max_attempts,
                    executor=self.executor,
                )
            except WarehouseError as e:
                result[name] = {
                    "state": "failed",
                    "error": f"not submitted: {e}",
                    "finished_at": now,
                }
                continue
            batch.append((name, request, version))
        if not batch:
            return result
        host = AsOwner(self.host, self.owner)
        try:
            self._submit(host, batch, outputs, result, now)
        except WarehouseError:
            # One of them is bad: submit each alone to find which.
            for one in batch:
                try:
                    self._submit(host, [one], outputs, result, now)
                except WarehouseError as e:
                    result[one[0]] = {
                        "state": "failed",
                        "error": f"not submitted: {e}",
                        "finished_at": now,
                    }
        return result

    def _submit(
        self,
        host: SubmitHost,
        batch: list[tuple[str, JobRequest, FunctionVersion]],
        outputs: Mapping[str, str],
        result: dict[str, dict[str, Any]],
        now: float,
    ) -> None:
        """Submit ``batch`` and record each node's job in the same transaction, so a
        driver killed in between leaves neither (never jobs no node knows of)."""

        # Combined inputs of these jobs not yet recorded: their manifests' blocks
        # stored first (durable before the rows naming them), the rows with the jobs.
        combined = {
            r.input: self._unrecorded[r.input] for _, r, _ in batch if r.input in self._unrecorded
        }
        if combined:
            for _, blocks, _ in combined.values():
                for block in blocks:
                    self.host.store.put(block)
            self.host.store.flush()

        def record(conn: sa.Connection, made: list[JobRecord]) -> None:
            for row, _, parts in combined.values():
                add_collection_in(conn, CollectionRecord(**row))
                runstore.write_parts(conn, row["pdh"], parts)
            fault_point("workflow-submitted")  # the jobs' rows written, not yet kept
            changes = {
                name: _submitted(job, now) for (name, _, _), job in zip(batch, made, strict=True)
            }
            # The changes so far (jobs that finished) go along: one commit.
            earlier = self._unwritten()
            runstore.write_nodes(conn, self.run_id, {**earlier, **changes})
            kept.update({n: dict(v) for n, v in self._changes.items() if v})
            kept.update({n: dict(v) for n, v in changes.items()})

        kept: dict[str, dict[str, Any]] = {}  # what ``record`` wrote, once committed
        # Combined inputs were just made and outputs just recorded: not read again.
        known = set(self._manifests) | set(outputs.values())
        made = submit_many(
            host,
            [(r, v) for _, r, v in batch],
            known=known,
            manifests=self._manifests,
            then=record,
            made_of={pdh: [p for _, p in parts] for pdh, (_, _, parts) in combined.items()},
        )
        for pdh in combined:
            del self._unrecorded[pdh]
        self._written.update(kept)
        if kept:
            self.writes += 1
            self._pending = {}  # written with them
        if self.keep_new_jobs:
            self.new_jobs.extend(j for j in made if j.state == "queued")
        for (name, _, _), job in zip(batch, made, strict=True):
            self.submitted += 1
            self.steps_done[name] = job.steps_done
            result[name] = _submitted(job, now)

    def _manifest(self, pdh: str) -> Manifest:
        found = self._manifests.get(pdh)
        if found is None:
            found = self._manifests[pdh] = self.host.manifest(pdh)
        return found

    def _combined(self, parts: list[tuple[str, str]]) -> str:
        pdhs = [(d, self.host.resolve(k)) for d, k in parts]
        unread = [p for _, p in pdhs if p not in self._manifests]
        if unread:  # one query for them all (a fan-in reads dozens)
            self._manifests.update(load_manifests(self.host.store, self.engine, unread))
        manifest = combine([(d, self._manifest(p)) for d, p in pdhs])
        if manifest.pdh not in self._manifests:
            # Made by an earlier run (a re-run): recorded and readable, so no write.
            if not (
                runstore.has_parts(self.engine, manifest.pdh)
                and load_manifests(self.host.store, self.engine, [manifest.pdh])
            ):
                # Nothing dangling is recorded (as save_manifest checks).
                store = self.host.store
                for loc in manifest.blocks():
                    if not loc.is_empty and not store.exists(loc.without_hints()):
                        raise NotFoundError(f"block {loc.key} of the manifest is not stored")
                # Recorded with the jobs reading it, in their transaction (one commit).
                row, blocks = collection_row(manifest, self.host.user)
                self._unrecorded[manifest.pdh] = (row, blocks, pdhs)
            self._manifests[manifest.pdh] = manifest
        return manifest.pdh

    def _finish(
        self, state: str, changes: Mapping[str, Mapping[str, Any]], now: float
    ) -> dict[str, Any]:
        values: dict[str, Any] = {"state": state, "finished_at": now, "control": None}
        outputs = self._outputs(changes)
        if state == "complete":
            named = {o: outputs[ref.name] for o, ref in self.wf.outputs.items()}
            values["outputs"] = json.dumps(named, sort_keys=True)
            prefix = self.run.name_outputs
            if prefix:
                try:
                    for o, pdh in named.items():
                        point_name(self.host, output_name(prefix, o), pdh)
                except WarehouseError as e:
                    values.update(state="failed", error=f"naming the outputs: {e}")
        else:
            failed = [
                n
                for n, node in self.nodes.items()
                if changes.get(n, {}).get("state", node.state) == "failed"
            ]
            if failed:
                which = "job " if len(failed) == 1 else "jobs "
                values["error"] = which + ", ".join(failed) + " failed"
        return values

    def _cancel(self, now: float) -> bool:
        changes: dict[str, dict[str, Any]] = self._unwritten()
        for name, node in self.nodes.items():
            if node.state not in ACTIVE_NODE:
                continue
            if node.job_id is not None:
                with contextlib.suppress(WarehouseError):  # finished meanwhile
                    jobstore.request_control(self.engine, node.job_id, "cancel")
            changes.setdefault(name, {}).update(state="cancelled", finished_at=now)
        runstore.update_nodes(
            self.engine,
            self.run_id,
            changes,
            {"state": "cancelled", "finished_at": now, "control": None, "heartbeat_at": now},
        )
        self._apply(changes)
        self.writes += 1
        self._pending = {}
        self.last_changes = changes
        self.finished = True
        return True

    # -- summaries ------------------------------------------------------------

    def view(self) -> dict[str, Any]:
        """The run as this driver knows it (``runstore.run_view``'s shape, read from
        memory: the catalog may not have every node's progress yet)."""
        nodes = [
            {**n.as_dict(), "steps_done": self.steps_done.get(n.node, 0) if n.job_id else 0}
            for n in self.nodes.values()
        ]
        return {**self.run.as_dict(), "nodes": nodes}

    def active_jobs(self) -> bool:
        return any(n.state in ("queued", "running") for n in self.nodes.values())


def _submitted(job: JobRecord, now: float) -> dict[str, Any]:
    """A node's values once its job is submitted (reused jobs are complete at once)."""
    state = node_state_of_job(job.state)
    values: dict[str, Any] = {
        "job_id": job.id,
        "state": state,
        "reused": job.reused_from is not None,
        "input_pdh": job.input_pdh,
        "started_at": job.started_at or now,
    }
    if state in ("complete", "failed", "cancelled"):
        values.update(output_pdh=job.output_pdh, finished_at=job.finished_at or now)
    return values
