"""The job and step state machine: events in, decisions out, no I/O.

The manager loop feeds it what happened (a step exited, a job was cancelled,
slots are free) and carries out what it answers (start these steps, kill
those, assemble that job's output). Everything is decided here, so it is
tested without processes or a database.

Rules (DESIGN §5.2): a level-L step starts only when every step of a lower
level has finished; a failed attempt is retried until the step has failed
``max_attempts`` times, and then the job fails and its other steps are
stopped; jobs are served by priority (higher first), then first come; a
step starts only when its job's cpus and memory fit in the free slots, and a
job that does not fit blocks the jobs after it (so big jobs do not starve).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = [
    "ACTIVE",
    "FINISHED",
    "Job",
    "Kill",
    "Resources",
    "Scheduler",
    "Start",
    "Step",
]

QUEUED, RUNNING, PAUSED = "queued", "running", "paused"
COMPLETE, FAILED, CANCELLED = "complete", "failed", "cancelled"
ACTIVE = frozenset({QUEUED, RUNNING, PAUSED})
FINISHED = frozenset({COMPLETE, FAILED, CANCELLED})
DONE, STOPPED = "done", "stopped"  # step states besides queued, running, failed


@dataclass(frozen=True, slots=True)
class Resources:
    cpus: int
    memory: int  # bytes

    def fits(self, other: Resources) -> bool:
        return other.cpus <= self.cpus and other.memory <= self.memory

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpus + other.cpus, self.memory + other.memory)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpus - other.cpus, self.memory - other.memory)


@dataclass(slots=True)
class Step:
    number: int
    level: int
    input: str = ""
    state: str = QUEUED
    attempts: int = 0  # attempts started
    failures: int = 0
    exit_status: int | None = None
    started_at: float | None = None
    finished_at: float | None = None


@dataclass(frozen=True, slots=True)
class Start:
    job: int
    step: int
    attempt: int


@dataclass(frozen=True, slots=True)
class Kill:
    job: int
    step: int


@dataclass
class Job:
    id: int
    request: Resources
    priority: int = 0
    max_attempts: int = 3
    state: str = QUEUED
    steps: list[Step] = field(default_factory=list)
    error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    failed_attempts: int = 0
    assembling: bool = False
    user: str = ""  # who submitted it (a limit on running steps is per user)
    _queued: dict[int, deque[int]] = field(default_factory=dict, repr=False)
    _unfinished: Counter[int] = field(default_factory=Counter, repr=False)

    def __post_init__(self) -> None:
        for step in self.steps:
            self._track(step)

    def _track(self, step: Step) -> None:
        if step.state in (QUEUED, RUNNING):
            self._unfinished[step.level] += 1
        if step.state == QUEUED:
            self._queued.setdefault(step.level, deque()).append(step.number)

    def add_step(self, level: int, input: str = "") -> Step:
        step = Step(len(self.steps), level, input)
        self.steps.append(step)
        self._track(step)
        return step

    def _requeue(self, step: Step) -> None:
        step.state = QUEUED
        queue = self._queued.setdefault(step.level, deque())
        # Keep step order within the level: a retried step goes back in its place.
        if queue and queue[0] < step.number:
            queue.append(step.number)
            self._queued[step.level] = deque(sorted(queue))
        else:
            queue.appendleft(step.number)

    def _finish(self, step: Step, state: str) -> None:
        if step.state in (QUEUED, RUNNING):
            self._unfinished[step.level] -= 1
            if not self._unfinished[step.level]:
                del self._unfinished[step.level]
        step.state = state

    def runnable(self) -> deque[int]:
        """Queued steps that may start now, in step order (empty if none)."""
        if not self._unfinished or self.state not in (QUEUED, RUNNING):
            return deque()
        return self._queued.get(min(self._unfinished), deque())

    @property
    def counts(self) -> dict[str, int]:
        c = Counter(s.state for s in self.steps)
        return {"done": c[DONE], "running": c[RUNNING], "queued": c[QUEUED]}

    @property
    def all_done(self) -> bool:
        return not self._unfinished and bool(self.steps)


class Scheduler:
    """Every active job of one manager, and the slots of its executor."""

    def __init__(
        self, capacity: Resources, largest: Resources | None = None, per_user: int = 0
    ) -> None:
        self.capacity = capacity
        # The most steps one user may have running at once (0: no limit).
        self.per_user = per_user
        self._by_user: Counter[str] = Counter()
        # The most one step may have (a Slurm node's; a local executor's all).
        self.largest = largest or capacity
        self.in_use = Resources(0, 0)
        self.jobs: dict[int, Job] = {}
        self.changed_steps: set[tuple[int, int]] = set()
        self.changed_jobs: set[int] = set()

    # -- events ---------------------------------------------------------------

    def add_job(self, job: Job, now: float) -> None:
        """A new job, or one loaded after a restart (its running steps were lost)."""
        self.jobs[job.id] = job
        for step in job.steps:
            if step.state == RUNNING:  # the process that ran it is gone
                step.attempts -= 1
                job._queued.setdefault(step.level, deque())
                job._requeue(step)
                self.changed_steps.add((job.id, step.number))
        if not self.largest.fits(job.request):
            most = show_resources(self.largest)
            why = f"asks for {show_resources(job.request)}; a step can have at most {most}"
            self._fail(job, why, now)

    def step_exited(
        self,
        job_id: int,
        number: int,
        attempt: int,
        ok: bool,
        exit_status: int,
        now: float,
        queued: Iterable[tuple[int, str]] = (),
        limit: str = "",
    ) -> list[Kill]:
        """An attempt ended; ``queued`` are the (level, input) steps it asked for;
        ``limit``: the limit it failed by, named in the job's error."""
        job = self.jobs.get(job_id)
        if job is None or number >= len(job.steps):
            return []
        step = job.steps[number]
        if step.state != RUNNING or step.attempts != attempt:
            return []  # killed or superseded: its resources were released then
        self.in_use -= job.request
        self._by_user[job.user] -= 1
        step.exit_status = exit_status
        step.finished_at = now
        self.changed_steps.add((job_id, number))
        self.changed_jobs.add(job_id)
        if ok:
            job._finish(step, DONE)
            for level, text in queued:
                new = job.add_step(level, text)
                self.changed_steps.add((job_id, new.number))
            return []
        step.failures += 1
        job.failed_attempts += 1
        if step.failures < job.max_attempts:
            job._requeue(step)
            return []
        job._finish(step, FAILED)
        last = f"{exit_status}: {limit}" if limit else f"{exit_status}"
        reason = f"step {number} failed {step.failures} times (last exit status {last})"
        return self._fail(job, reason, now)

    def cancel(self, job_id: int, now: float) -> list[Kill]:
        job = self.jobs.get(job_id)
        if job is None or job.state not in ACTIVE:
            return []
        return self._stop(job, CANCELLED, None, now)

    def pause(self, job_id: int) -> None:
        """No new step starts; running ones finish."""
        job = self.jobs.get(job_id)
        if job is not None and job.state in (QUEUED, RUNNING):
            job.state = PAUSED
            self.changed_jobs.add(job_id)

    def resume(self, job_id: int) -> None:
        job = self.jobs.get(job_id)
        if job is not None and job.state == PAUSED:
            job.state = RUNNING if job.started_at is not None else QUEUED
            self.changed_jobs.add(job_id)

    def assembled(self, job_id: int, error: str | None, now: float) -> None:
        """The manager stored the output (``error`` None) or could not."""
        job = self.jobs[job_id]
        job.assembling = False
        if error is None:
            job.state, job.finished_at = COMPLETE, now
            self.changed_jobs.add(job_id)
        else:
            self._fail(job, error, now)

    # -- decisions ------------------------------------------------------------

    def schedule(self, now: float) -> list[Start]:
        """Steps to start now, in priority then first-come order."""
        starts: list[Start] = []
        free = self.capacity - self.in_use
        for job in sorted(self.jobs.values(), key=lambda j: (-j.priority, j.id)):
            runnable = job.runnable()
            while runnable:
                if self.per_user and self._by_user[job.user] >= self.per_user:
                    break  # this user's next steps wait; other users' go on
                if not free.fits(job.request):
                    return starts
                step = job.steps[runnable.popleft()]
                step.state, step.started_at, step.finished_at = RUNNING, now, None
                step.attempts += 1
                free -= job.request
                self.in_use += job.request
                self._by_user[job.user] += 1
                if job.state == QUEUED:
                    job.state, job.started_at = RUNNING, now
                self.changed_steps.add((job.id, step.number))
                self.changed_jobs.add(job.id)
                starts.append(Start(job.id, step.number, step.attempts))
        return starts

    def to_assemble(self) -> list[int]:
        """Jobs whose steps are all done: their output can be assembled now."""
        ready = []
        for job in self.jobs.values():
            if job.state in (QUEUED, RUNNING) and job.all_done and not job.assembling:
                job.assembling = True
                ready.append(job.id)
        return ready

    def forget_finished(self) -> list[int]:
        """Drop finished jobs (after their rows were written); return their ids."""
        gone = [j.id for j in self.jobs.values() if j.state in FINISHED]
        for job_id in gone:
            del self.jobs[job_id]
        return gone

    def forget(self, job_ids: Iterable[int]) -> None:
        """Drop these finished jobs (after their rows were written)."""
        for job_id in job_ids:
            job = self.jobs.get(job_id)
            if job is not None and job.state in FINISHED:
                del self.jobs[job_id]

    def take_changes(self) -> tuple[set[int], set[tuple[int, int]]]:
        jobs, steps = self.changed_jobs, self.changed_steps
        self.changed_jobs, self.changed_steps = set(), set()
        return jobs, steps

    def idle(self) -> bool:
        return not any(j.state in (QUEUED, RUNNING) for j in self.jobs.values())

    def fail(self, job_id: int, reason: str, now: float) -> list[Kill]:
        job = self.jobs.get(job_id)
        if job is None or job.state not in ACTIVE:
            return []
        return self._fail(job, reason, now)

    # -- helpers --------------------------------------------------------------

    def _fail(self, job: Job, reason: str, now: float) -> list[Kill]:
        return self._stop(job, FAILED, reason, now)

    def _stop(self, job: Job, state: str, reason: str | None, now: float) -> list[Kill]:
        kills = []
        for step in job.steps:
            if step.state == RUNNING:
                self.in_use -= job.request
                self._by_user[job.user] -= 1
                kills.append(Kill(job.id, step.number))
            if step.state in (QUEUED, RUNNING):
                job._finish(step, STOPPED)
                step.finished_at = now
                self.changed_steps.add((job.id, step.number))
        job._queued.clear()
        job.state, job.error, job.finished_at = state, reason, now
        self.changed_jobs.add(job.id)
        return kills


def show_resources(r: Resources) -> str:
    return f"{r.cpus} cpus and {r.memory} bytes of memory"
