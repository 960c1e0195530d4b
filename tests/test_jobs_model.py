"""The job/step state machine alone: no processes, no database."""

from __future__ import annotations

from warehouse.jobs.model import Job, Kill, Resources, Scheduler, Step

CAP = Resources(2, 1000)


def started(sched: Scheduler) -> list[tuple[int, int]]:
    return [(s.job, s.step) for s in sched.schedule(0.0)]


def finish(sched: Scheduler, job: int, step: int, ok: bool = True, queued=()) -> list[Kill]:
    attempt = sched.jobs[job].steps[step].attempts
    return sched.step_exited(job, step, attempt, ok, 0 if ok else 3, 1.0, queued)


def test_levels_gate_steps_and_order_is_by_step_number() -> None:
    sched = Scheduler(CAP)
    sched.add_job(Job(1, Resources(1, 0), steps=[Step(0, 0)]), 0.0)
    assert started(sched) == [(1, 0)]
    assert started(sched) == []  # step 0 still running
    finish(sched, 1, 0, queued=[(2, "c"), (1, "a"), (1, "b")])
    assert started(sched) == [(1, 2), (1, 3)]  # level 1 first; level 2 waits
    finish(sched, 1, 3)
    assert started(sched) == []  # step 2 (level 1) still running: level 2 waits
    finish(sched, 1, 2)
    assert started(sched) == [(1, 1)]
    assert sched.to_assemble() == []
    finish(sched, 1, 1)
    assert sched.to_assemble() == [1]
    assert sched.to_assemble() == []  # asked once
    sched.assembled(1, None, 2.0)
    assert sched.jobs[1].state == "complete"
    assert sched.forget_finished() == [1]


def test_failed_attempt_is_retried_then_fails_the_job_and_stops_the_rest() -> None:
    sched = Scheduler(CAP)
    sched.add_job(Job(1, Resources(1, 0), max_attempts=2, steps=[Step(0, 0)]), 0.0)
    started(sched)
    finish(sched, 1, 0, queued=[(1, "a"), (1, "b"), (1, "c")])
    assert started(sched) == [(1, 1), (1, 2)]
    assert finish(sched, 1, 1, ok=False) == []
    assert started(sched) == [(1, 1)]  # the retry goes first, in its place
    assert sched.jobs[1].steps[1].attempts == 2
    kills = finish(sched, 1, 1, ok=False)
    assert kills == [Kill(1, 2)]
    job = sched.jobs[1]
    assert job.state == "failed" and "step 1 failed 2 times" in (job.error or "")
    assert [s.state for s in job.steps] == ["done", "failed", "stopped", "stopped"]
    assert job.failed_attempts == 2
    assert sched.in_use == Resources(0, 0)
    assert started(sched) == []


def test_retry_that_succeeds_completes_the_job() -> None:
    sched = Scheduler(CAP)
    sched.add_job(Job(1, Resources(1, 0), steps=[Step(0, 0)]), 0.0)
    started(sched)
    finish(sched, 1, 0, ok=False)
    started(sched)
    finish(sched, 1, 0)
    assert sched.to_assemble() == [1]


def test_stale_exit_of_a_superseded_attempt_is_ignored() -> None:
    sched = Scheduler(CAP)
    sched.add_job(Job(1, Resources(1, 0), steps=[Step(0, 0)]), 0.0)
    started(sched)
    assert sched.step_exited(1, 0, 7, True, 0, 1.0) == []
    assert sched.jobs[1].steps[0].state == "running"


def test_priority_then_first_come_and_resources() -> None:
    sched = Scheduler(Resources(3, 1000))
    sched.add_job(Job(1, Resources(1, 0), steps=[Step(0, 0)]), 0.0)
    sched.add_job(Job(2, Resources(2, 600), priority=5, steps=[Step(0, 0)]), 0.0)
    sched.add_job(Job(3, Resources(1, 0), steps=[Step(0, 0)]), 0.0)
    assert started(sched) == [(2, 0), (1, 0)]  # job 3 waits for a slot
    finish(sched, 1, 0, queued=[(1, "x")])
    assert started(sched) == [(1, 1)]  # first come: job 1 before job 3
    finish(sched, 2, 0)
    assert started(sched) == [(3, 0)]


def test_a_job_that_does_not_fit_blocks_later_ones() -> None:
    sched = Scheduler(Resources(2, 1000))
    sched.add_job(Job(1, Resources(1, 0), steps=[Step(0, 0)]), 0.0)
    started(sched)
    sched.add_job(Job(2, Resources(2, 0), steps=[Step(0, 0)]), 0.0)
    sched.add_job(Job(3, Resources(1, 0), steps=[Step(0, 0)]), 0.0)
    assert started(sched) == []  # job 2 waits for both slots; job 3 may not jump ahead
    finish(sched, 1, 0)
    assert started(sched) == [(2, 0)]


def test_too_big_a_request_fails_the_job() -> None:
    sched = Scheduler(Resources(2, 1000))
    sched.add_job(Job(1, Resources(3, 0), steps=[Step(0, 0)]), 0.0)
    assert sched.jobs[1].state == "failed"
    assert "asks for 3 cpus" in (sched.jobs[1].error or "")
    # Slots smaller than the whole (a Slurm node of a partition): the slot
    # bounds a step, and the message says so, not the partition's total.
    sched = Scheduler(Resources(32, 32000), largest=Resources(2, 2000))
    sched.add_job(Job(1, Resources(4, 0), steps=[Step(0, 0)]), 0.0)
    sched.add_job(Job(2, Resources(2, 2000), steps=[Step(0, 0)]), 0.0)
    assert sched.jobs[1].error == (
        "asks for 4 cpus and 0 bytes of memory; "
        "a step can have at most 2 cpus and 2000 bytes of memory"
    )
    assert sched.jobs[2].state != "failed"


def test_cancel_pause_resume() -> None:
    sched = Scheduler(CAP)
    sched.add_job(Job(1, Resources(1, 0), steps=[Step(0, 0)]), 0.0)
    started(sched)
    finish(sched, 1, 0, queued=[(1, "a"), (1, "b"), (1, "c")])
    sched.pause(1)
    assert started(sched) == []
    assert sched.idle()
    sched.resume(1)
    assert started(sched) == [(1, 1), (1, 2)]
    assert sched.cancel(1, 3.0) == [Kill(1, 1), Kill(1, 2)]
    assert sched.jobs[1].state == "cancelled"
    assert sched.in_use == Resources(0, 0)
    assert sched.cancel(1, 3.0) == []


def test_restart_requeues_lost_steps_without_counting_an_attempt() -> None:
    steps = [Step(0, 0, state="done", attempts=1), Step(1, 1, "a", "running", attempts=1)]
    steps.append(Step(2, 1, "b", "done", attempts=1))
    sched = Scheduler(CAP)
    sched.add_job(Job(1, Resources(1, 0), state="running", steps=steps), 0.0)
    assert started(sched) == [(1, 1)]
    assert sched.jobs[1].steps[1].attempts == 1
    finish(sched, 1, 1)
    assert sched.to_assemble() == [1]


def test_changes_are_reported_once() -> None:
    sched = Scheduler(CAP)
    sched.add_job(Job(1, Resources(1, 0), steps=[Step(0, 0)]), 0.0)
    started(sched)
    assert sched.take_changes() == ({1}, {(1, 0)})
    assert sched.take_changes() == (set(), set())
