"""Step limits (DESIGN §9.2, docs/jobs.md "Limits"): memory, processes,
scratch and wall time, each enforced on real steps in the real sandbox, by
the control groups this host offers and by resource limits alone; the
reason a step failed by is named in its log and in the job's error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import Controller, KeepPool, controller
from conftest import Runner
from jobs_helpers import make_text
from warehouse.cli import cli
from warehouse.jobs.executors import Finished, Launch, LocalExecutor
from warehouse.jobs.model import Job, Resources, Scheduler
from warehouse.jobs.sandbox import Sandbox, find_sandbox
from warehouse.limits import (
    Host,
    Limiter,
    Policy,
    Seen,
    decide,
    detect,
    size_text,
    slurm_reason,
    verdict,
)
from warehouse.limits.policy import MIB

# -- decisions (pure) -------------------------------------------------------------


def test_a_step_gets_what_it_asked_for_and_no_more_than_the_machine() -> None:
    policy = Policy(processes=64, scratch=10 * MIB, wall=60)
    asked = decide(1, 100 * MIB, 4, 8192 * MIB, policy)
    assert (asked.cpus, asked.memory, asked.asked_memory) == (1, 100 * MIB, True)
    assert (asked.processes, asked.scratch, asked.wall) == (64, 10 * MIB, 60)
    greedy = decide(16, 1 << 50, 4, 8192 * MIB, policy)
    assert (greedy.cpus, greedy.memory) == (4, 8192 * MIB)
    # Asking none: a share of the machine by its cpus.
    share = decide(2, 0, 4, 8192 * MIB, policy)
    assert (share.memory, share.asked_memory) == (4096 * MIB, False)


def test_the_reason_names_the_limit_and_what_was_asked() -> None:
    limits = decide(1, 100 * MIB, 2, 4096 * MIB, Policy(processes=64, scratch=20 * MIB, wall=5))
    assert verdict(Seen(), limits) is None
    assert verdict(Seen(oom_kills=1), limits) == "memory limit: asked 100 MB"
    assert verdict(Seen(out_of_memory=True), limits) == "memory limit: asked 100 MB"
    assert verdict(Seen(process_limit_hits=3), limits) == "process limit: 64 processes"
    assert verdict(Seen(processes=64), limits) == "process limit: 64 processes"
    assert verdict(Seen(scratch=21 * MIB), limits) == "scratch limit: 20 MB (it wrote 21 MB)"
    assert verdict(Seen(elapsed=5.5), limits) == "wall-time limit: 5 s"
    unasked = decide(1, 0, 2, 4096 * MIB, Policy())
    assert verdict(Seen(oom_kills=1), unasked) == "memory limit: its share (it asked none) 2 GB"
    assert size_text(1536 * MIB) == "1.5 GB" and size_text(100) == "100 bytes"


def test_slurm_names_the_limits_it_enforced() -> None:
    assert slurm_reason("OUT_OF_MEMORY", 100 * MIB, 60) == "memory limit: asked 100 MB"
    assert slurm_reason("TIMEOUT", 100 * MIB, 60) == "wall-time limit: 60 s"
    assert slurm_reason("FAILED", 100 * MIB, 60) is None


def test_one_user_runs_at_most_so_many_steps_and_the_others_go_on() -> None:
    sched = Scheduler(Resources(4, 4096 * MIB), per_user=2)
    for job_id, user, steps in ((1, "alice", 5), (2, "alice", 3), (3, "bob", 2)):
        job = Job(job_id, Resources(1, MIB), user=user)
        for _ in range(steps):
            job.add_step(0)
        sched.add_job(job, 0.0)
    started = sched.schedule(0.0)
    assert [s.job for s in started] == [1, 1, 3, 3]  # alice's second job waits
    sched.step_exited(1, started[0].step, 1, True, 0, 1.0)
    assert [s.job for s in sched.schedule(1.0)] == [1]  # her turn again, one slot
    # Without a limit, the slots alone.
    free = Scheduler(Resources(4, 4096 * MIB))
    free.add_job(Job(1, Resources(1, MIB), steps=[], user="alice"), 0.0)
    for _ in range(6):
        free.jobs[1].add_step(0)
    assert len(free.schedule(0.0)) == 4


# -- enforced on real steps ---------------------------------------------------------


def _sandbox() -> Sandbox:
    sandbox = find_sandbox()
    if sandbox is None:
        if os.environ.get("CI"):
            pytest.fail("bubblewrap is missing or cannot make a sandbox here")
        pytest.skip("bubblewrap is missing or cannot make a sandbox here")
    return sandbox


@pytest.fixture(params=["host", "rlimit"])
def host(request: pytest.FixtureRequest) -> Host:
    """What this host offers (control groups, on the machines the suite runs
    on), and resource limits alone (the fallback, on every host)."""
    if request.param == "rlimit":
        return Host("rlimit")
    found = detect()
    if found.kind == "rlimit" and os.environ.get("CI"):
        pytest.fail("no writable control group with memory and pids controllers here")
    if found.kind == "rlimit":
        pytest.skip("no writable control group with memory and pids controllers here")
    return found


POLICY = Policy(processes=64, scratch=20 * MIB, wall=4.0)

STEPS = {
    # Asks 100 MB, takes 1 GB.
    "greedy.py": "x = b'x' * (1 << 30)\nprint('survived', len(x))\n",
    # Processes without end, each waiting, so that the bomb grows and stays.
    "bomb.sh": "#!/bin/sh\nbomb() { bomb & bomb & wait; }\nbomb\n",
    # Writes 1 MiB files into its scratch, 200 at most (10 times the limit).
    "fills.sh": "#!/bin/sh\n"
    'for i in $(seq 200); do head -c 1048576 /dev/zero > "$WH_SCRATCH/f$i"; sleep 0.02; done\n'
    "echo wrote it all\n",
    "sleeps.sh": "#!/bin/sh\nsleep 1000\n",
    # Another user's well-behaved step, run beside each of them.
    "fine.sh": '#!/bin/sh\nhead -c 1048576 /dev/zero > "$WH_SCRATCH/f"\necho fine\n',
}


def _function(tmp_path: Path) -> Path:
    fn = tmp_path / "fn"
    fn.mkdir(exist_ok=True)
    for name, text in STEPS.items():
        (fn / name).write_text(text)
        (fn / name).chmod(0o755)
    return fn


def _launch(tmp_path: Path, step: int, entry: str, memory: int = 100 * MIB) -> Launch:
    fn = _function(tmp_path)
    path = str(fn / entry)
    argv = (sys.executable, "-P", path) if entry.endswith(".py") else (path,)
    env = {"WH_FUNCTION_DIR": str(fn)}
    return Launch(1, step, 1, argv, env, str(tmp_path / "scratch"), Resources(1, memory))


def _run(executor: LocalExecutor, launches: list[Launch]) -> dict[int, Finished]:
    done: dict[int, Finished] = {}
    try:
        for launch in launches:
            executor.start(launch)
        deadline = time.monotonic() + 120  # a guard against a hang, not a bound
        while len(done) < len(launches):
            assert time.monotonic() < deadline, f"steps still running: {sorted(done)}"
            for finished in executor.poll(0.2):
                done[finished.step] = finished
    finally:
        executor.close()
    return done


@pytest.fixture
def executor(host: Host) -> Iterator[LocalExecutor]:
    sandbox = _sandbox()
    limiter = Limiter(2, 4096 * MIB, POLICY, host, own_user=sandbox.user is not None)
    yield LocalExecutor(Resources(2, 4096 * MIB), sandbox, limiter=limiter)


def _check(done: dict[int, Finished], reason: str) -> None:
    bad, fine = done[1], done[2]
    assert bad.exit_status != 0, bad.log[-2000:]
    assert bad.limit == reason, (bad.limit, bad.log[-2000:])
    assert f"wh: {reason}".encode() in bad.log
    # The other step, beside it, was not hurt.
    assert fine.exit_status == 0 and fine.limit == "", fine.log
    assert fine.log.strip() == b"fine"


def test_a_step_asking_100_mb_that_takes_1_gb_fails_by_the_memory_limit(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    done = _run(executor, [_launch(tmp_path, 1, "greedy.py"), _launch(tmp_path, 2, "fine.sh")])
    _check(done, "memory limit: asked 100 MB")
    assert b"survived" not in done[1].log


def test_a_fork_bomb_is_stopped_at_the_process_limit(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    limiter, sandbox = executor.limiter, executor.sandbox
    assert limiter is not None and sandbox is not None
    if limiter.host.kind != "rlimit":
        done = _run(executor, [_launch(tmp_path, 1, "bomb.sh"), _launch(tmp_path, 2, "fine.sh")])
        _check(done, "process limit: 64 processes")
        return
    if sandbox.user is None:
        # Not root: no user of the steps' own for RLIMIT_NPROC to count, and a
        # bomb is only counted every second: not tried on a shared machine.
        pytest.skip("no steps user to hold a fork bomb by RLIMIT_NPROC")
    # RLIMIT_NPROC counts the steps' user's processes, all steps together
    # (docs/jobs.md): a step beside the bomb may be refused a fork too, so
    # the other step runs once the bomb is stopped.
    (bad,) = _run(executor, [_launch(tmp_path, 1, "bomb.sh")]).values()
    assert bad.limit == "process limit: 64 processes", (bad.limit, bad.log[-2000:])
    assert bad.exit_status != 0
    limiter = Limiter(2, 4096 * MIB, POLICY, limiter.host, own_user=True)
    after = LocalExecutor(Resources(2, 4096 * MIB), sandbox, limiter=limiter)
    (fine,) = _run(after, [_launch(tmp_path, 2, "fine.sh")]).values()
    assert fine.exit_status == 0 and fine.log.strip() == b"fine", fine.log


def test_a_step_filling_its_scratch_past_the_limit_is_stopped(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    done = _run(executor, [_launch(tmp_path, 1, "fills.sh"), _launch(tmp_path, 2, "fine.sh")])
    bad = done[1]
    assert bad.limit.startswith("scratch limit: 20 MB (it wrote "), bad.limit
    assert b"wrote it all" not in bad.log  # stopped, not let run to its end
    _check(done, bad.limit)


def test_a_step_running_past_its_wall_time_is_stopped(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    done = _run(executor, [_launch(tmp_path, 1, "sleeps.sh"), _launch(tmp_path, 2, "fine.sh")])
    _check(done, "wall-time limit: 4 s")


def test_a_step_leaves_no_control_group_behind(executor: LocalExecutor, tmp_path: Path) -> None:
    limiter = executor.limiter
    assert limiter is not None
    _run(executor, [_launch(tmp_path, 1, "sleeps.sh"), _launch(tmp_path, 2, "fine.sh")])
    for top in limiter.host.dirs.values():
        mine = Path(top, f"wh-steps-{os.getpid()}")
        assert not mine.exists() or not [p for p in mine.iterdir() if p.is_dir()]


# -- through a controller: the reason in `wh job show` and the API -----------------


@pytest.fixture
def ctl(
    tmp_path: Path, keep_servers: KeepPool, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Controller]:
    _sandbox()
    with controller(tmp_path / "controller.db", keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=2)
        monkeypatch.setenv("WH_URL", c.url)
        monkeypatch.setenv("WH_HOME", str(tmp_path / "unused-home"))
        yield c


def test_a_controller_names_the_memory_limit_a_step_failed_by(
    ctl: Controller, run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WH_TOKEN", ctl.user("bob"))
    fn = tmp_path / "fn-greedy"
    fn.mkdir()
    (fn / "greedy.py").write_text(STEPS["greedy.py"])
    pdh = run("put", str(fn)).output.split()[-1]
    key = run("put", str(make_text(tmp_path / "in"))).output.split()[-1]
    args = ["job", "submit", f"{pdh}/greedy.py", "--input", key, "--memory", "100M"]
    result = run.runner.invoke(cli, [*args, "--attempts", "1", "--wait", "--json"])
    assert result.exit_code == 1, result.output
    out = result.output
    job = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert job["state"] == "failed"
    assert "memory limit: asked 100 MB" in job["error"], job
    shown = run("job", "show", str(job["id"])).output
    assert "memory limit: asked 100 MB" in shown, shown
    # The controller goes on running other users' steps.
    monkeypatch.setenv("WH_TOKEN", ctl.user("alice"))
    (fn / "fine.py").write_text("print('fine')\n")
    pdh = run("put", str(fn)).output.split()[-1]
    fine = run.runner.invoke(cli, ["job", "submit", f"{pdh}/fine.py", "--input", key, "--wait"])
    assert fine.exit_code == 0, fine.output


def test_a_controller_holds_steps_to_the_limits_it_was_started_with(
    tmp_path: Path, keep_servers: KeepPool, run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`wh serve --step-time` and the others reach every step's guard."""
    _sandbox()
    limits = Policy(processes=64, scratch=20 * MIB, wall=3.0)
    with controller(tmp_path / "controller.db", keep_servers, step_limits=limits) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=2)
        monkeypatch.setenv("WH_URL", c.url)
        monkeypatch.setenv("WH_HOME", str(tmp_path / "unused-home"))
        monkeypatch.setenv("WH_TOKEN", c.user("bob"))
        pdh = run("put", str(_function(tmp_path))).output.split()[-1]
        key = run("put", str(make_text(tmp_path / "in"))).output.split()[-1]
        args = ["job", "submit", f"{pdh}/sleeps.sh", "--input", key, "--attempts", "1"]
        result = run.runner.invoke(cli, [*args, "--wait"])
        assert result.exit_code == 1, result.output
        assert "wall-time limit: 3 s" in result.output, result.output


# A manager holding one limited step, killed by the test once it runs.
HOLDS_A_STEP = """import sys, time
from warehouse.jobs.executors import Launch, LocalExecutor
from warehouse.jobs.model import Resources
from warehouse.jobs.sandbox import find_sandbox
from warehouse.limits import Limiter, Policy

sandbox = find_sandbox()
limiter = Limiter(1, 1 << 30, Policy(), own_user=sandbox.user is not None)
executor = LocalExecutor(Resources(1, 1 << 30), sandbox, limiter=limiter)
env = {"WH_FUNCTION_DIR": sys.argv[1]}
argv = (sys.argv[1] + "/sleeps.sh",)
executor.start(Launch(1, 1, 1, argv, env, sys.argv[2], Resources(1, 1 << 28)))
print("running", flush=True)
while True:
    executor.poll(1.0)
"""


def test_the_groups_a_killed_manager_left_are_removed_by_the_next(tmp_path: Path) -> None:
    sandbox = _sandbox()
    found = detect()
    if found.kind == "rlimit":
        if os.environ.get("CI"):
            pytest.fail("no writable control group with memory and pids controllers here")
        pytest.skip("no writable control group with memory and pids controllers here")
    driver = tmp_path / "driver.py"
    driver.write_text(HOLDS_A_STEP)
    fn = _function(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, str(driver), str(fn), str(tmp_path / "scratch")],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"running\n"
        left = [Path(top, f"wh-steps-{proc.pid}") for top in found.dirs.values()]
        assert all(p.is_dir() for p in left)
        proc.kill()
        proc.wait()
        Limiter(1, 1 << 30, POLICY, found, own_user=sandbox.user is not None)
        deadline = time.monotonic() + 60  # a guard against a hang, not a bound
        while any(p.exists() for p in left):
            assert time.monotonic() < deadline, [p for p in left if p.exists()]
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.communicate()
