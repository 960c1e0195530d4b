"""The manager loop: carries the state machine's decisions to an executor and the catalog.

One turn: collect the steps that exited, feed them to the ``Scheduler``,
start what it says may start, assemble jobs whose steps are all done. The
catalog is written in batches, at most every ``flush_interval`` seconds, by
one writer thread (``batchwriter``: a SQLite commit with ``synchronous=FULL``
costs an fsync, so one per step would cap the step rate); the blocks a batch
refers to are flushed to disk first. Only a batch's steps can run again after
a crash.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from warehouse.blocks import EMPTY_LOCATOR, MAX_BLOCK_SIZE
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import WarehouseError
from warehouse.jobs import jobstore
from warehouse.jobs.assemble import collection_row, logs_manifest, output_manifest
from warehouse.jobs.batchwriter import BatchWriter
from warehouse.jobs.executors import Executor, Finished, Launch
from warehouse.jobs.functions import command_for, materialize
from warehouse.jobs.jobhost import JobHost, as_host
from warehouse.jobs.measure import add_attempt
from warehouse.jobs.model import FINISHED, Job, Scheduler
from warehouse.jobs.protocol import check_level, parse_report, step_environment
from warehouse.manifest import Manifest, escape_name
from warehouse.usage.model import block_columns

if TYPE_CHECKING:
    # Only a controller with a host map places steps: the embedded manager skips its imports.
    from warehouse.clusters.placer import Placer

__all__ = ["LOG_TAIL_BYTES", "Landed", "Manager"]

# What the manager tells a listener of each job whose finished row was just
# written: the columns of that row a workflow follows (``id``, ``state``,
# ``output_pdh``, ``reused_from``, ``started_at``, ``finished_at``, ``error``,
# ``steps_done``), and ``output_manifest``, the output's Manifest (or None).
Landed = dict[str, Any]

LOG_TAIL_BYTES = 2000
_LANDING_POLL = 0.002  # seconds a turn waits on steps while finished jobs' rows are written


class Manager:
    def __init__(
        self,
        wh: JobHost | EmbeddedWarehouse,
        executor: Executor,
        executor_name: str,
        *,
        flush_interval: float = 0.05,
        refresh_interval: float = 0.2,
        placer: Placer | None = None,
    ) -> None:
        self.wh = as_host(wh)
        # Placement (docs/clusters.md): where each step's input sits.
        self.placer = placer
        self._inputs: dict[int, str] = {}  # job -> input PDH, with a placer
        self._placed: dict[int, list[int]] = {}  # job -> [input bytes, local bytes]
        # (job, step) -> (bytes on each host label, input bytes) of its last launch
        self._step_held: dict[tuple[int, int], tuple[dict[str, int], int]] = {}
        self.executor = executor
        self.executor_name = executor_name
        self.sched = Scheduler(executor.capacity, executor.largest)
        self.flush_interval = flush_interval
        self.refresh_interval = refresh_interval
        self.scratch = str(self.wh.work_dir / "scratch")
        self._envs: dict[int, dict[str, str]] = {}
        self._argv: dict[int, tuple[str, ...]] = {}
        self._persisted: dict[int, int] = {}  # steps of each job known to the catalog
        self._results: list[dict[str, Any]] = []
        self._collections: list[dict[str, Any]] = []  # rows written with the next batch
        self._blocks: list[bytes] = []  # their manifests' text, stored by the writer first
        self._job_extra: dict[int, dict[str, Any]] = {}
        self._cpu_seconds: dict[int, float] = {}
        self._last_id = 0
        self._unwritten: dict[int, int] = {}  # job -> lowest level with results not yet written
        # Batches go to the storer thread (their blocks), then the writer (their rows).
        self._catalog = BatchWriter(self.wh)
        self._writes: list[Future[None]] = []
        self._last_flush = self._last_refresh = 0.0
        # job -> step number -> the last result of it this manager saw: a job whose
        # every started step ran here is assembled without reading its steps back.
        self._ran: dict[int, dict[int, dict[str, Any]]] = {}
        self.finished_jobs = 0  # jobs finished and written down, so far
        # Finished jobs whose rows are being written: forgotten (and counted) once
        # that write is done, while the loop goes on starting steps.
        self._landing: list[tuple[Future[None] | None, list[int]]] = []
        self._landing_ids: set[int] = set()
        self._outputs: dict[int, Manifest] = {}  # job -> its output, with a listener
        # Called with the jobs whose finished rows were just written (a workflow
        # driven in this process follows its jobs from these, reading nothing).
        self.on_landed: Callable[[list[Landed]], None] | None = None

    # -- the loop -------------------------------------------------------------

    def run(self, stop: Callable[[Manager], bool] | None = None) -> None:
        """Turn until ``stop`` says so (default: no job left to run)."""
        self.refresh()
        try:
            while True:
                self.turn()
                if stop is not None and stop(self):
                    break
                if stop is None and self.sched.idle() and not self.executor.running():
                    self.flush(wait=True)
                    self.refresh()
                    if self.sched.idle():
                        break
        finally:
            self.flush(wait=True)

    def turn(self) -> None:
        self._land()
        now = time.time()
        timeout = min(self._last_refresh + self.refresh_interval - now, self.refresh_interval)
        if self._landing:
            if not self.executor.running():
                self._land(wait=True)  # nothing else to wait for
            timeout = min(timeout, _LANDING_POLL)
        for done in self.executor.poll(max(timeout, 0.0) if self.executor.running() else 0.0):
            self._exited(done)
        starts = self.sched.schedule(time.time())
        if any(self._unwritten.get(s.job, 1 << 30) < self._level(s.job, s.step) for s in starts):
            # A step of a higher level may read what the lower ones passed on.
            self.flush(wait=True)
        for start in starts:
            self._launch(start.job, start.step, start.attempt)
        ready = self.sched.to_assemble()
        finished = [
            j.id
            for j in self.sched.jobs.values()
            if j.state in FINISHED and j.id not in self._landing_ids
        ]
        if ready or finished:
            logless = [j for j in finished if "log_pdh" not in self._job_extra.get(j, {})]
            steps = {j: self._ran_here(j) for j in [*ready, *logless]}
            unknown = [j for j, known in steps.items() if known is None]
            if unknown:
                # Steps run by an earlier manager: every step's result in the catalog,
                # then read back at once (one query for all the jobs finishing now).
                self.flush(wait=True)
                steps.update(jobstore.steps_of(self.wh.engine, unknown))
            for job_id in ready:
                self._assemble(job_id, steps.get(job_id) or [])
            done_now = [
                j.id
                for j in self.sched.jobs.values()
                if j.state in FINISHED and j.id not in self._landing_ids
            ]
            for job_id in done_now:
                self._finish_logs(job_id, steps)
            # Written by the writer thread (blocks flushed first); the jobs are
            # forgotten once their rows are in, and meanwhile steps go on starting.
            self._landing.append((self.flush(), done_now))
            self._landing_ids.update(done_now)
        if time.time() - self._last_flush >= self.flush_interval:
            self.flush()
        if time.time() - self._last_refresh >= self.refresh_interval:
            self.refresh()
        if not self.executor.running() and not self.sched.idle():
            time.sleep(0.01)  # nothing may start now (paused, or waiting on a level)

    def refresh(self) -> None:
        """Pick up new jobs and control requests from other processes."""
        self._last_refresh = time.time()
        new = jobstore.new_job_ids(self.wh.engine, self._last_id, self.executor_name)
        self._last_id = max([self._last_id, *new])
        for record, job in jobstore.load_jobs(
            self.wh.engine, [j for j in new if j not in self.sched.jobs]
        ):
            self._load(record, job)
        for job_id, control in jobstore.take_controls(self.wh.engine, list(self.sched.jobs)):
            now = time.time()
            if control == "cancel":
                for kill in self.sched.cancel(job_id, now):
                    self.executor.kill(kill.job, kill.step)
            elif control == "pause":
                self.sched.pause(job_id)
            else:
                self.sched.resume(job_id)

    def refresh_soon(self) -> None:
        """New jobs were submitted in this process: the next turn refreshes."""
        self._last_refresh = 0.0

    def take_up(self, submitted: Sequence[jobstore.JobRecord]) -> None:
        """Jobs this process has just submitted, taken up now rather than found by
        the next ``refresh`` (which then skips them: they are known)."""
        for record in submitted:
            mine = record.executor == self.executor_name and record.state == "queued"
            if mine and record.id not in self.sched.jobs:
                self._load(record, jobstore.as_inserted(record))

    # -- carrying out decisions ----------------------------------------------

    def _load(self, record: jobstore.JobRecord, job: Job) -> None:
        job_id = record.id
        self._persisted[job_id] = len(job.steps)
        self._cpu_seconds[job_id] = record.cpu_seconds
        if self.placer is not None:
            self._inputs[job_id] = record.input_pdh
            self._placed[job_id] = [record.input_bytes, record.local_bytes]
        self.sched.add_job(job, time.time())
        fn_dir = materialize(
            self.wh,
            self.wh.work_dir / "functions",
            record.function_pdh,
            record.function_path,
        )
        self._argv[job_id] = tuple(command_for(fn_dir, record.function_path))
        self._envs[job_id] = step_environment(
            location=self.wh.step_location(record),
            job=job_id,
            step=0,
            attempt=0,
            level=0,
            step_input="",
            job_input=record.input_pdh,
            params=record.params,
            function_dir=str(fn_dir),
        )

    def _launch(self, job_id: int, number: int, attempt: int) -> None:
        step = self.sched.jobs[job_id].steps[number]
        env = dict(self._envs[job_id])
        env.update(
            WH_STEP=str(number),
            WH_ATTEMPT=str(attempt),
            WH_LEVEL=str(step.level),
            WH_STEP_INPUT=step.input,
        )
        request = self.sched.jobs[job_id].request
        launch = Launch(
            job_id,
            number,
            attempt,
            self._argv[job_id],
            env,
            self.scratch,
            request,
            self.sched.jobs[job_id].priority,
            self._held(job_id, number, step.input),
        )
        self.executor.start(launch)

    def _held(self, job_id: int, number: int, step_input: str) -> tuple[tuple[str, int], ...]:
        if self.placer is None or not step_input:
            return ()
        try:
            held, total = self.placer.held(self._inputs[job_id], step_input)
        except WarehouseError:  # placement is a hint: never a reason to fail a step
            return ()
        if total:
            self._step_held[(job_id, number)] = (held, total)
        return tuple(sorted(held.items()))

    def _exited(self, done: Finished) -> None:
        log, ok, queued = done.log, done.exit_status == 0, []
        token = self._envs.get(done.job, {}).get("WH_TOKEN")
        if token:
            # Any user reads any job's log: a step printing its environment
            # must not hand them the token its job acts for its submitter with.
            log = log.replace(token.encode(), b"[job token]")
        outputs = intermediates = ""
        counters: dict[str, int] = {}
        given: int | None = None
        blocks: dict[str, int | None] = {}
        if ok:
            try:
                report = parse_report(done.result)
                check = self.wh.check_fragment
                outputs = "".join(check(done.job, t) for t in report.outputs)
                intermediates = "".join(check(done.job, t) for t in report.intermediates)
                job = self.sched.jobs.get(done.job)
                if job is not None:  # a step reporting by hand is checked here too
                    for level, _ in report.queued:
                        check_level(job.steps[done.step].level, level)
                queued = report.queued
                counters = report.counters
                given = report.input_bytes
                blocks = block_columns(report.blocks, report.block_bytes)
            except WarehouseError as e:
                ok = False
                log += f"\nwh: the step's report was refused: {e}\n".encode()
        status = done.exit_status if ok or done.exit_status else 1
        job = self.sched.jobs.get(done.job)
        if job is not None:
            spent = (done.finished_at - done.started_at) * job.request.cpus
            self._cpu_seconds[done.job] = self._cpu_seconds.get(done.job, 0.0) + spent
        attempt_ok = job is not None and job.steps[done.step].attempts == done.attempt
        if ok and attempt_ok:
            self._count_placement(done)
        for kill in self.sched.step_exited(
            done.job, done.step, done.attempt, ok, status, time.time(), queued, done.limit
        ):
            self.executor.kill(kill.job, kill.step)
        if not attempt_ok:
            return
        level = self._level(done.job, done.step)
        self._unwritten[done.job] = min(self._unwritten.get(done.job, level), level)
        result = {
            "job": done.job,
            "number": done.step,
            "host": done.host,
            "output": outputs or None,
            "intermediate": intermediates or None,
            "log": self._store_log(done.step, log),
            "log_tail": log[-LOG_TAIL_BYTES:].decode("utf-8", "replace"),
            "counters": json.dumps(counters, sort_keys=True) if counters else None,
            # Every attempt this manager saw is counted: a failed one used the machine too.
            **add_attempt(self._ran.get(done.job, {}).get(done.step), done),
            # What the attempt that ended the step read, as it reported it.
            "input_bytes": given if ok else None,
            **(blocks if ok else block_columns(None, None)),
        }
        self._results.append(result)
        self._ran.setdefault(done.job, {})[done.step] = result

    def _ran_here(self, job_id: int) -> list[jobstore.StepRecord] | None:
        """The job's steps as the catalog will have them, from what ran here; None
        if a step started before this manager took the job up (read the catalog)."""
        job = self.sched.jobs[job_id]
        ran = self._ran.get(job_id, {})
        if any(s.attempts and s.number not in ran for s in job.steps):
            return None
        out = []
        for s in job.steps:
            r = ran.get(s.number, {})
            out.append(
                jobstore.StepRecord(
                    job=job_id,
                    number=s.number,
                    level=s.level,
                    input=s.input,
                    state=s.state,
                    attempts=s.attempts,
                    failures=s.failures,
                    exit_status=s.exit_status,
                    started_at=s.started_at,
                    finished_at=s.finished_at,
                    **{column: r.get(column) for column in jobstore.RESULT_COLUMNS},
                )
            )
        return out

    def _count_placement(self, done: Finished) -> None:
        placed = self._placed.get(done.job)
        found = self._step_held.pop((done.job, done.step), None)
        label_of: Callable[[str], str | None] | None = getattr(self.executor, "host_label", None)
        if placed is None or found is None:
            return
        held, total = found
        # Counted where the step ran (the Dask worker's host label; none: 0 bytes).
        if total:
            placed[0] += total
            label = label_of(done.worker) if label_of is not None else None
            placed[1] += min(held.get(label or "", 0), total)
            self._job_extra.setdefault(done.job, {}).update(
                input_bytes=placed[0], local_bytes=placed[1]
            )

    def _level(self, job_id: int, number: int) -> int:
        return self.sched.jobs[job_id].steps[number].level

    def _store_log(self, number: int, data: bytes) -> str:
        """The log's manifest line; its blocks are stored by the writer, before the row."""
        chunks = [data[i : i + MAX_BLOCK_SIZE] for i in range(0, len(data), MAX_BLOCK_SIZE)]
        self._blocks.extend(chunks)
        locators = [f"{hashlib.md5(c).hexdigest()}+{len(c)}" for c in chunks] or [
            str(EMPTY_LOCATOR)
        ]
        name = escape_name(f"step-{number:06d}.log")
        return f". {' '.join(locators)} 0:{len(data)}:{name}\n"

    def _assemble(self, job_id: int, steps: list[jobstore.StepRecord]) -> None:
        try:
            manifest = output_manifest(steps)
            pdh = self._save(manifest)
        except WarehouseError as e:
            self.sched.assembled(job_id, f"assembling the output: {e}", time.time())
        else:
            if self.on_landed is not None:
                self._outputs[job_id] = manifest
            self._job_extra.setdefault(job_id, {})["output_pdh"] = pdh
            self.sched.assembled(job_id, None, time.time())

    def _finish_logs(self, job_id: int, steps: dict[int, list[jobstore.StepRecord] | None]) -> None:
        extra = self._job_extra.setdefault(job_id, {})
        if "log_pdh" not in extra:
            known = steps.get(job_id)
            if known is None:  # not read with the others
                known = self._ran_here(job_id)
            if known is None:
                if self._results or self._writes:  # its steps' logs must be in the catalog
                    self.flush(wait=True)
                known = jobstore.steps_of(self.wh.engine, [job_id])[job_id]
            extra["log_pdh"] = self._save(logs_manifest(known))

    def _save(self, manifest: Manifest) -> str:
        """Store a collection's manifest text now; its row goes with this turn's
        writes (one transaction for every job finishing in the turn, not one each)."""
        row, blocks = collection_row(manifest, self.wh.user)
        self._collections.append(row)
        self._blocks.extend(blocks)
        return manifest.pdh

    def _forget(self, job_id: int) -> None:
        for table in (
            self._envs,
            self._argv,
            self._persisted,
            self._cpu_seconds,
            self._job_extra,
            self._ran,
            self._outputs,
        ):
            table.pop(job_id, None)
        self._inputs.pop(job_id, None)
        self._placed.pop(job_id, None)
        for key in [k for k in self._step_held if k[0] == job_id]:
            del self._step_held[key]
        self.wh.release(job_id)

    # -- the catalog ----------------------------------------------------------

    def flush(self, *, wait: bool = False) -> Future[None] | None:
        """Hand this turn's changes to the writer thread (and wait, if asked);
        the last write not yet done (None: every change is written)."""
        self._last_flush = time.time()
        for done in [f for f in self._writes if f.done()]:
            self._writes.remove(done)
            done.result()  # a failed write stops the manager
        batch = self._batch()
        if batch is not None:
            self._writes.append(self._catalog.hand(batch))
        if wait:
            for fut in self._writes:
                fut.result()
            self._writes.clear()
            self._unwritten.clear()
            self._land()
        return self._writes[-1] if self._writes else None

    def landing(self) -> bool:
        """Whether finished jobs wait for their rows to be written."""
        return bool(self._landing)

    def _land(self, *, wait: bool = False) -> None:
        """Forget the finished jobs whose rows are written (the writes end in order)."""
        landed: list[Landed] = []
        while self._landing:
            fut, job_ids = self._landing[0]
            if fut is not None:
                if not (wait or fut.done()):
                    break
                fut.result()  # a failed write stops the manager
            self._landing.pop(0)
            if self.on_landed is not None:
                landed.extend(self._landed(j) for j in job_ids if j in self.sched.jobs)
            self.sched.forget(job_ids)
            for job_id in job_ids:
                self._landing_ids.discard(job_id)
                self._forget(job_id)
            self.finished_jobs += len(job_ids)
        if landed and self.on_landed is not None:
            self.on_landed(landed)

    def _landed(self, job_id: int) -> Landed:
        job = self.sched.jobs[job_id]
        return {
            "id": job_id,
            "state": job.state,
            "output_pdh": self._job_extra.get(job_id, {}).get("output_pdh"),
            "reused_from": None,
            "started_at": job.started_at,
            "finished_at": job.finished_at,
            "error": job.error,
            "steps_done": job.counts["done"],
            "output_manifest": self._outputs.get(job_id),
        }

    def _batch(self) -> tuple[Any, ...] | None:
        job_ids, step_keys = self.sched.take_changes()
        # A landing job's row is written already (its last change).
        extra = set(self._job_extra) - self._landing_ids
        if not (job_ids or step_keys or self._results or extra or self._collections):
            return None
        new, states = [], []
        for job_id, number in sorted(step_keys):
            job = self.sched.jobs.get(job_id)
            if job is None:
                continue
            s = job.steps[number]
            row = {
                "job": job_id,
                "number": number,
                "state": s.state,
                "attempts": s.attempts,
                "failures": s.failures,
                "exit_status": s.exit_status,
                "started_at": s.started_at,
                "finished_at": s.finished_at,
            }
            if number >= self._persisted.get(job_id, 0):
                new.append({**row, "level": s.level, "input": s.input})
            else:
                states.append(row)
        for job_id in job_ids:
            self._persisted[job_id] = len(self.sched.jobs[job_id].steps)
        job_rows = {j: self._job_row(j) for j in job_ids | extra}
        results, self._results = self._results, []
        made, self._collections = self._collections, []
        blocks, self._blocks = self._blocks, []
        return job_rows, new, states, results, made, blocks

    def _job_row(self, job_id: int) -> dict[str, Any]:
        job = self.sched.jobs[job_id]
        counts = job.counts
        return {
            "state": job.state,
            "started_at": job.started_at,
            "finished_at": job.finished_at,
            "error": job.error,
            "steps_done": counts["done"],
            "steps_running": counts["running"],
            "steps_queued": counts["queued"],
            "failed_attempts": job.failed_attempts,
            "cpu_seconds": self._cpu_seconds.get(job_id, 0.0),
            **self._job_extra.get(job_id, {}),
        }

    def close(self) -> None:
        try:
            self.flush(wait=True)
        finally:
            self._catalog.shutdown()
