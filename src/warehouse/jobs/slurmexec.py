"""The Slurm executor: steps run as ``sbatch`` jobs on a Slurm cluster.

Each Slurm job runs one step, or a small batch of steps of one job one after
the other (tiny steps would otherwise each pay Slurm's scheduling), named
``wh-<job>-<step>`` after its first step and tagged (``--comment``) with the
installation it belongs to. Steps must see the same scratch directory as the
manager (a shared file system) and reach ``WH_HOME`` or ``WH_URL``.

The batch script writes each step's log and result in the step's own
directory and appends one line per finished step to an events file, which
the manager reads at each turn: no Slurm command is needed to learn that a
step ended normally. Slurm itself is asked, once per turn at most and for all
our jobs at once (one ``squeue``; the job-completion log or ``sacct`` for jobs
squeue has forgotten), only to notice jobs that ended without finishing
their steps (cancelled, failed nodes, time limits). ``kill`` is ``scancel``.

Given a ``sandbox`` (a controller's steps, docs/security.md), each step runs
on its node inside the same bubblewrap sandbox as the local executor's
steps, as the steps' user when the Slurm job runs as root: the command line
is decided here, on the manager's machine, and the node must have the same
paths (bwrap, setpriv, the Python installation, the function and scratch
directories on the shared file system). A node without bubblewrap runs
nothing unsandboxed: the step fails with a line saying why.

Placement (docs/clusters.md): given Slurm node names -> host labels, a batch
of steps sharing a preferred host asks for that host's nodes with
``--nodelist`` only when one of them is up with the CPUs idle at submission,
and a pinned batch still pending a few seconds later has its node list lifted
(``scontrol update``), so a busy or lost node delays a step briefly at most.
Each step gets its node's label as ``WH_HOST``.

Slurm's commands are run and read in ``slurmcli``; the batch script and
its ``sbatch`` command line are written in ``slurmscript``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shlex
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from warehouse.clusters.placement import LabelledWorkers, slurm_nodes, slurm_unpin
from warehouse.errors import UsageError
from warehouse.jobs.executors import Finished, Launch, ResultTooLong, read_result
from warehouse.jobs.measure import measured_argv, read_measured
from warehouse.jobs.model import Resources
from warehouse.jobs.protocol import process_environment
from warehouse.jobs.sandbox import Sandbox
from warehouse.jobs.slurmcli import (
    ENDED,
    EndedStates,
    idle_cpus,
    our_jobs,
    owner_tag,
    read_nodes,
    read_step_log,
    run_slurm,
)
from warehouse.jobs.slurmscript import host_case, sbatch_argv, step_lines
from warehouse.limits.policy import slurm_reason

__all__ = ["SlurmExecutor", "owner_tag"]

log = logging.getLogger("warehouse.jobs")

MAX_BATCH = 16  # steps run by one Slurm job at most
SUBMIT_DELAY = 0.25  # seconds a freed step may wait for others to batch with
STATE_INTERVAL = 0.5  # seconds between two looks at Slurm's own state
PIN_GRACE = 5.0  # seconds a batch asking for its preferred nodes may wait for them
# sbatch refused a batch: try again after a pause that doubles up to the
# last figure, and report the steps lost only once it has refused them for
# SUBMIT_PATIENCE seconds (a slurmctld restarting, a socket timing out).
SUBMIT_RETRY = (0.5, 8.0)
SUBMIT_PATIENCE = 60.0
# A batch that ends (time limit, node failure, an outside scancel) before
# one of its steps started gives that step back to the queue, without a
# failed attempt, this many times at most.
UNSTARTED_RETRIES = 3


@dataclass(slots=True)
class _Step:
    launch: Launch
    path: str  # its directory: tmp/, log, result

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


@dataclass(slots=True)
class _Batch:
    steps: dict[tuple[int, int], _Step]
    submitted: float
    slurm_id: str = ""
    ended: str = ""  # the Slurm state it ended in, once known
    ended_at: float = 0.0
    unseen: int = 0  # state looks that did not find it
    killed: set[tuple[int, int]] = field(default_factory=set)
    started: set[tuple[int, int]] = field(default_factory=set)  # steps the script began
    pinned: bool = False  # submitted with --nodelist (placement), not yet lifted


class SlurmExecutor(LabelledWorkers):
    def __init__(
        self,
        partition: str | None = None,
        *,
        owner: str = "",
        queue_factor: int = MAX_BATCH,
        max_batch: int = MAX_BATCH,
        sandbox: Sandbox | None = None,
        worker_hosts: dict[str, str] | None = None,
        pin_grace: float | None = None,
        wall: float = 0.0,
    ) -> None:
        self.partition = partition or None
        self.wall = wall  # seconds a step may run (Slurm's --time, for a whole batch)
        # Placement: Slurm node name -> host label (the host map's [workers]).
        self.worker_hosts: dict[str, str] = dict(worker_hosts or {})
        self.pin_grace = PIN_GRACE if pin_grace is None else pin_grace
        self.sandbox = sandbox
        self._prepared: set[str] = set()  # function directories made readable
        self.comment = owner_tag(owner or os.getcwd(), self.partition)
        self.max_batch = max(1, max_batch)
        # _unusable: the nodes left out, for a message.
        nodes, self._unusable = read_nodes(self._partition_args())
        if not nodes:
            raise UsageError(
                f"Slurm has no node up in partition {partition or '(default)'}"
                + (f" ({self._unusable})" if self._unusable else "")
            )
        self.largest = Resources(max(c for c, _ in nodes), max(m for _, m in nodes))
        self._cpus = sum(c for c, _ in nodes)
        self.capacity = Resources(
            self._cpus * max(queue_factor, 1), sum(m for _, m in nodes) * max(queue_factor, 1)
        )
        self._pending: list[Launch] = []
        self._pending_since = 0.0
        # Steps sbatch refused: when it first did, and no new try before _hold_until.
        self._refused: dict[tuple[int, int, int], float] = {}
        self._refusals = 0
        self._hold_until = 0.0
        self._requeued: dict[tuple[int, int, int], int] = {}  # unstarted steps given back
        self._batches: dict[str, _Batch] = {}  # by Slurm job id
        self._where: dict[tuple[int, int], str] = {}  # step -> Slurm job id
        self._done: list[Finished] = []
        self._dir: Path | None = None
        self._events = -1
        self._partial = b""
        self._last_state = 0.0
        self._ended_states = EndedStates()
        self.cancel_orphans()

    # -- Slurm's view ---------------------------------------------------------

    def _partition_args(self) -> list[str]:
        return [f"--partition={self.partition}"] if self.partition else []

    def cancel_orphans(self) -> int:
        """Cancel every Slurm job of this installation: a new manager starts
        again whatever an earlier one left running, so none is collected."""
        ours = our_jobs(self.comment)
        if ours:
            log.warning("cancelling %d Slurm jobs left by an earlier manager", len(ours))
            run_slurm(["scancel", *ours])
        return len(ours)

    # -- the executor interface -----------------------------------------------

    def start(self, launch: Launch) -> None:
        # Gathered and submitted in batches per job (see _due).
        if not self._pending:
            self._pending_since = time.monotonic()
        self._pending.append(launch)

    def _due(self) -> bool:
        if self._hold_until and time.monotonic() < self._hold_until:
            return False  # sbatch refused the last batch: wait before trying again
        # Steps freed one at a time would each pay Slurm's scheduling as a
        # job of their own: wait a moment for a batch, unless Slurm is idle.
        return (
            not self._where
            or len(self._pending) >= self.max_batch
            or time.monotonic() - self._pending_since >= SUBMIT_DELAY
        )

    def poll(self, timeout: float) -> list[Finished]:
        deadline = time.monotonic() + timeout
        while True:
            if self._pending and self._due():
                self._submit()
            self._read_events()
            if time.monotonic() - self._last_state >= STATE_INTERVAL and self._batches:
                self._check_slurm()
            if self._done or time.monotonic() >= deadline:
                break
            time.sleep(min(0.02, max(deadline - time.monotonic(), 0.0)))
        done, self._done = self._done, []
        return done

    def kill(self, job: int, step: int) -> None:
        for launch in [x for x in self._pending if (x.job, x.step) == (job, step)]:
            self._pending.remove(launch)
            self._refused.pop((launch.job, launch.step, launch.attempt), None)
            self._done.append(_lost(launch, "it was stopped before it was submitted"))
        jid = self._where.get((job, step))
        if jid is None:
            return
        batch = self._batches[jid]
        batch.killed.add((job, step))
        # The manager kills the steps of a job together (cancel, failure),
        # and a batch holds one job's steps: cancel it once all are asked.
        if batch.killed >= set(batch.steps):
            with contextlib.suppress(UsageError):
                run_slurm(["scancel", jid])
            self._last_state = 0.0  # look soon

    def running(self) -> int:
        return len(self._where) + len(self._pending)

    def close(self) -> None:
        # As the other executors do: no step of ours goes on running.
        self._pending.clear()
        self._refused.clear()
        self._requeued.clear()
        if self._batches:
            with contextlib.suppress(UsageError):
                run_slurm(["scancel", *self._batches])
        for batch in self._batches.values():
            for step in batch.steps.values():
                step.remove()
        self._batches.clear()
        self._where.clear()
        if self._events >= 0:
            os.close(self._events)
            self._events = -1
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    # -- submitting -----------------------------------------------------------

    def _workdir(self, scratch_root: str) -> Path:
        if self._dir is None:
            root = Path(scratch_root)
            root.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._dir = Path(tempfile.mkdtemp(prefix=f"slurm-{os.getpid()}-", dir=root))
            events = self._dir / "events"
            events.touch(0o600)
            self._events = os.open(events, os.O_RDONLY | os.O_CLOEXEC)
        return self._dir

    def _submit(self) -> None:
        pending, self._pending = self._pending, []
        # One group per job, resource request and preferred host: a batch's
        # steps share the node they ask for (docs/clusters.md).
        groups: dict[tuple[int, Resources, tuple[str, ...]], list[Launch]] = {}
        for launch in pending:
            groups.setdefault((launch.job, launch.request, self.prefer(launch)), []).append(launch)
        idle: dict[str, int] | None = None
        for (_, request, prefer), launches in groups.items():
            # Enough Slurm jobs to keep every CPU busy, no more than needed.
            slots = max(1, self._cpus // max(request.cpus, 1))
            size = max(1, min(self.max_batch, math.ceil(len(launches) / slots)))
            for i in range(0, len(launches), size):
                nodes: tuple[str, ...] = ()
                if prefer:
                    if idle is None:  # one sinfo per turn, only with placement
                        try:
                            idle = idle_cpus(self._partition_args())
                        except UsageError as e:
                            log.warning("could not read Slurm's nodes: %s", e)
                            idle = {}
                    held = dict(launches[i].held)
                    nodes = slurm_nodes(held, self.worker_hosts, idle, request.cpus)
                    if nodes:  # those CPUs are now taken by this batch
                        idle[nodes[0]] -= max(request.cpus, 1)
                self._submit_batch(launches[i : i + size], request, nodes)

    def _submit_batch(
        self, launches: list[Launch], request: Resources, nodes: tuple[str, ...] = ()
    ) -> None:
        root = self._workdir(launches[0].scratch_root)
        steps: dict[tuple[int, int], _Step] = {}
        lines = ["#!/bin/bash", "umask 077", *host_case(self.worker_hosts)]
        events = shlex.quote(str(root / "events"))
        for launch in launches:
            path = tempfile.mkdtemp(prefix=f"{launch.job}-{launch.step}-", dir=root)
            os.mkdir(path + "/tmp")
            steps[(launch.job, launch.step)] = _Step(launch, path)
            given = process_environment(launch.env)
            if self.sandbox is not None:
                given = self.sandbox.environment(given)
            env = {
                **given,
                "WH_SCRATCH": path + "/tmp",
                "TMPDIR": path + "/tmp",
                "WH_RESULT": path + "/result",
            }
            argv = measured_argv(self._wrap(launch, path), path + "/usage")
            lines += step_lines(
                launch,
                path,
                events,
                argv,
                env,
                with_host=bool(self.worker_hosts),
                sandbox=self.sandbox,
            )
        script = "\n".join(lines) + "\n"
        argv = sbatch_argv(
            launches,
            request,
            str(root),
            comment=self.comment,
            partition_args=self._partition_args(),
            wall=self.wall,
            nodes=nodes,
        )
        try:
            jid = run_slurm(argv, stdin=script).strip().split(";")[0]
        except UsageError as e:
            self._refused_batch([step.launch for step in steps.values()], e)
            for step in steps.values():
                step.remove()
            return
        self._refusals = 0
        self._hold_until = 0.0
        for launch in launches:
            self._refused.pop((launch.job, launch.step, launch.attempt), None)
        self._batches[jid] = _Batch(steps, time.time(), jid, pinned=bool(nodes))
        for key in steps:
            self._where[key] = jid

    def _refused_batch(self, launches: list[Launch], error: UsageError) -> None:
        """sbatch refused a batch: submit it again later, unless it has refused
        these steps for SUBMIT_PATIENCE seconds; then they are lost and the
        job's attempts decide. Refusals are often brief (slurmctld restarting,
        a timeout), and failing each step at once spent every attempt within
        a second."""
        now = time.monotonic()
        again: list[Launch] = []
        for launch in launches:
            first = self._refused.setdefault((launch.job, launch.step, launch.attempt), now)
            if now - first >= SUBMIT_PATIENCE:
                del self._refused[(launch.job, launch.step, launch.attempt)]
                self._done.append(_lost(launch, f"sbatch refused it: {error}"))
            else:
                again.append(launch)
        if again:
            log.warning("sbatch refused %d steps, trying again: %s", len(again), error)
            first_try, longest = SUBMIT_RETRY
            self._hold_until = now + min(longest, first_try * 2**self._refusals)
            self._refusals += 1
            if not self._pending:
                self._pending_since = now
            self._pending[:0] = again

    def _wrap(self, launch: Launch, path: str) -> tuple[str, ...] | list[str]:
        """The step's command line: in the sandbox when there is one."""
        if self.sandbox is None:
            return launch.argv
        scratch, result = path + "/tmp", path + "/result"
        self.sandbox.prepare_scratch(scratch, result)
        function_dir = launch.env.get("WH_FUNCTION_DIR")
        if function_dir and function_dir not in self._prepared:
            self.sandbox.prepare_function(Path(function_dir))
            self._prepared.add(function_dir)
        return self.sandbox.wrap(
            launch.argv, function_dir=function_dir or scratch, scratch=scratch, result=result
        )

    # -- learning what ended --------------------------------------------------

    def _read_events(self) -> None:
        if self._events < 0:
            return
        data = self._partial
        while chunk := os.read(self._events, 1 << 16):
            data += chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            fields = line.decode("utf-8", "replace").split(" ")
            if len(fields) == 4 and fields[3] == "start":
                self._step_started(*(int(x) for x in fields[:3]))
                continue
            if len(fields) < 6:
                continue
            job, step, attempt, rc = (int(x) for x in fields[:4])
            self._step_ended(job, step, attempt, rc, float(fields[4]), float(fields[5]), fields[6])

    def _step_started(self, job: int, number: int, attempt: int) -> None:
        jid = self._where.get((job, number))
        batch = self._batches.get(jid) if jid is not None else None
        step = batch.steps.get((job, number)) if batch is not None else None
        if batch is not None and step is not None and step.launch.attempt == attempt:
            batch.started.add((job, number))

    def _step_ended(
        self, job: int, number: int, attempt: int, rc: int, started: float, ended: float, host: str
    ) -> None:
        jid = self._where.get((job, number))
        if jid is None:
            return
        batch = self._batches[jid]
        step = batch.steps.get((job, number))
        if step is None or step.launch.attempt != attempt:
            return
        # bash reports a death by signal N as 128 + N.
        status = -(rc - 128) if 128 < rc < 128 + 65 else rc
        log_bytes = read_step_log(step.path + "/log")
        result = ""
        if status == 0:
            try:
                result = read_result(step.path + "/result")
            except ResultTooLong as e:
                log_bytes += f"\nwh: {e}\n".encode()
                status = 1
        self._requeued.pop((job, number, attempt), None)
        usage = read_measured(step.path + "/usage")
        ids = (job, number, attempt, status, host, started, ended, log_bytes, result)
        self._done.append(Finished(*ids, worker=host, usage=usage))
        self._forget(jid, (job, number))

    def _forget(self, jid: str, key: tuple[int, int]) -> None:
        batch = self._batches[jid]
        step = batch.steps.pop(key)
        step.remove()
        self._where.pop(key, None)
        if not batch.steps:
            del self._batches[jid]
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self._dir}/slurm-{jid}.out")

    def _check_slurm(self) -> None:
        """One squeue for all our jobs; the ended ones' steps that wrote no
        event are lost (cancelled, killed, node failure)."""
        self._last_state = time.monotonic()
        try:
            out = run_slurm(["squeue", "-h", "--me", "-t", "all", "-o", "%i|%T|%k"])
        except UsageError as e:
            log.warning("could not read Slurm's queue: %s", e)
            return
        states = {}
        for line in out.splitlines():
            jid, state, comment = ([*line.split("|", 2), "", ""])[:3]
            if comment == self.comment:
                states[jid] = state
        self._unpin(states)
        missing = [j for j in self._batches if j not in states]
        if missing:
            states.update(self._ended_states.states(missing, self._batches))
        now = time.time()
        for jid, batch in list(self._batches.items()):
            state = states.get(jid, "")
            if state.split(" ")[0] in ENDED:
                batch.ended = batch.ended or state
                batch.ended_at = batch.ended_at or now
            elif not state:
                batch.unseen += 1
                if batch.unseen >= 3:  # Slurm does not know it at all any more
                    batch.ended = batch.ended or "UNKNOWN"
                    batch.ended_at = batch.ended_at or now
        self._read_events()  # a step's last line may have landed meanwhile
        for jid, batch in list(self._batches.items()):
            # A short grace after the end: the events file is written by the
            # batch script before Slurm records the job's end.
            if batch.ended and now - batch.ended_at >= 0.0 and jid in self._batches:
                for key, step in list(batch.steps.items()):
                    launch = step.launch
                    tried = (launch.job, launch.step, launch.attempt)
                    self._forget(jid, key)
                    # A step the batch never began did not fail: a batch of
                    # many steps outliving a time limit would otherwise spend
                    # the attempts of steps that never ran.
                    given_back = self._requeued.get(tried, 0)
                    if (
                        key not in batch.started
                        and key not in batch.killed
                        and given_back < UNSTARTED_RETRIES
                    ):
                        self._requeued[tried] = given_back + 1
                        self.start(launch)
                        continue
                    why = f"its Slurm job {jid} ended {batch.ended} before the step did"
                    limit = slurm_reason(batch.ended, launch.request.memory, self.wall)
                    self._done.append(_lost(launch, why, limit or ""))

    def _unpin(self, states: dict[str, str]) -> None:
        """Lift the node list of pinned batches still waiting: a preference only."""
        pinned = {j: b.submitted for j, b in self._batches.items() if b.pinned}
        late = slurm_unpin(pinned, states, time.time(), self.pin_grace)
        if not late:
            return
        # One scontrol for all (it reads commands from stdin; JobId takes one id).
        commands = "".join(f"update JobId={jid} ReqNodeList=\n" for jid in late)
        try:
            run_slurm(["scontrol"], stdin=commands)
        except UsageError as e:  # e.g. one started meanwhile: nothing to lift there
            log.info("could not lift the node list of Slurm jobs %s: %s", ",".join(late), e)
        for jid in late:
            self._batches[jid].pinned = False


def _lost(launch: Launch, why: str, limit: str = "") -> Finished:
    now = time.time()
    log_bytes = f"wh: the step did not finish on Slurm: {why}\n".encode()
    ids = (launch.job, launch.step, launch.attempt)
    return Finished(*ids, -9, "slurm", now, now, log_bytes, "", limit=limit)
