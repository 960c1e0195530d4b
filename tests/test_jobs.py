"""Jobs end to end on the embedded warehouse: retries, failures, reuse, the step protocol."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import Runner
from cwl_helpers import SORT
from jobs_helpers import make_text, put_function, run_job
from warehouse import jobs
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs.jobstore import request_control

FLAKY = """#!/bin/sh
# Fails its first attempt (until the marker exists), then succeeds.
marker="$WH_HOME/../flaky-marker-$WH_STEP"
if [ ! -e "$marker" ]; then touch "$marker"; echo "first attempt fails"; exit 1; fi
echo "second attempt works"
"""

ALWAYS_FAILS = """#!/bin/sh
echo "boom: something is wrong with $WH_STEP_INPUT" >&2
exit 7
"""

WRAPPED_ERROR = """#!/bin/sh
echo "Error: record 7 is truncated" >&2
echo "mapper.py exited with status 1" >&2
exit 1
"""

SHELL_STEPS = """#!/bin/sh
set -e
if [ "$WH_STEP" = 0 ]; then
    wh step queue --level 1 alpha "beta gamma"
    exit 0
fi
printf '%s\\n' "$WH_STEP_INPUT" > "$WH_SCRATCH/$WH_STEP.txt"
pdh=$(wh put "$WH_SCRATCH/$WH_STEP.txt")
wh manifest "$pdh" | wh step output -
"""


def test_a_cwl_tool_runs_as_a_job_on_each_executor(
    home: Path, tmp_path: Path, executor: str
) -> None:
    """docs/cwl.md: each tool invocation a job, on the executor asked for."""
    try:
        from warehouse.cwl import RunOptions, run_cwl
    except ImportError:  # cwltool missing: CI must run this
        if os.environ.get("CI"):
            pytest.fail("cwltool is not installed; CI must run the CWL case", pytrace=False)
        pytest.skip("cwltool is not installed (pip install -e '.[cwl]')")
    (tmp_path / "sort.cwl").write_text(SORT)
    (tmp_path / "in.txt").write_text("b\nc\na\n")
    (tmp_path / "job.yml").write_text("f: {class: File, location: in.txt}\n")
    argv = ["--quiet", "--outdir", str(tmp_path / "out"), str(tmp_path / "sort.cwl")]
    err = io.StringIO()
    options = RunOptions(executor=executor)
    code = run_cwl([*argv, str(tmp_path / "job.yml")], stderr=err, options=options)
    assert code == 0, err.getvalue()
    assert (tmp_path / "out" / "sorted.txt").read_text() == "a\nb\nc\n"
    with EmbeddedWarehouse(home) as wh:
        (job,) = jobs.list_jobs(wh.engine)
        assert job.executor == executor and job.state == "complete" and job.steps_done == 1


def test_a_step_failing_its_first_attempt_succeeds_on_a_retry(
    wh: EmbeddedWarehouse, tmp_path: Path, executor: str
) -> None:
    fn = put_function(wh, tmp_path, "flaky.sh", FLAKY)
    job = run_job(wh, fn, wh.put([make_text(tmp_path / "in")]).pdh, executor=executor)
    assert job.state == "complete"
    assert job.failed_attempts == 1
    (step,) = jobs.list_steps(wh.engine, job.id)
    assert (step.attempts, step.failures, step.exit_status) == (2, 1, 0)
    assert "second attempt works" in (step.log_tail or "")


def test_a_step_that_always_fails_fails_the_job_and_show_tells_why(
    wh: EmbeddedWarehouse, tmp_path: Path, run: Runner, executor: str
) -> None:
    fn = put_function(wh, tmp_path, "fails.sh", ALWAYS_FAILS)
    key = wh.put([make_text(tmp_path / "in")]).pdh
    job = run_job(wh, fn, key, max_attempts=2, executor=executor)
    assert job.state == "failed"
    assert job.output_pdh is None and job.log_pdh is not None
    shown = run("job", "show", str(job.id)).output
    assert "step 0 (level 0" in shown
    assert "exit status 7" in shown
    assert "boom: something is wrong" in shown
    data = json.loads(run("job", "show", str(job.id), "--json").output)
    assert data["failed_steps"][0]["exit_status"] == 7
    assert "boom" in run("job", "logs", str(job.id), "--step", "0").output
    # An "Error: …" line the step wrote wins over what a wrapper said after it.
    wrapped = put_function(wh, tmp_path / "w", "wrapped.sh", WRAPPED_ERROR)
    failed = run_job(wh, wrapped, key, max_attempts=1, executor=executor)
    err = run("job", "watch", str(failed.id), code=1).stderr
    assert err.splitlines()[-1].endswith("(last exit status 1): record 7 is truncated"), err
    # `watch` (as `submit --wait`) ends with the step's own last line: the why.
    err = run("job", "watch", str(job.id), code=1).stderr
    assert err.splitlines()[-1].endswith("(last exit status 7): boom: something is wrong with"), err


@pytest.mark.parametrize(
    "executor", ["local", pytest.param("slurm", marks=pytest.mark.slow)], indirect=True
)
def test_reuse_and_what_defeats_it(wh: EmbeddedWarehouse, tmp_path: Path, executor: str) -> None:
    key = wh.put([make_text(tmp_path / "in")]).pdh
    first = run_job(wh, "builtin:wordcount", key, params={"partitions": 2}, executor=executor)
    assert first.state == "complete"
    again = run_job(wh, "builtin:wordcount", key, params={"partitions": 2}, executor=executor)
    assert (again.state, again.reused_from, again.output_pdh) == (
        "complete",
        first.id,
        first.output_pdh,
    )
    assert jobs.list_steps(wh.engine, again.id) == []  # no step ran
    rerun = run_job(
        wh, "builtin:wordcount", key, params={"partitions": 2}, reuse=False, executor=executor
    )
    assert rerun.reused_from is None and rerun.steps_done > 0
    assert rerun.output_pdh == first.output_pdh
    changed = run_job(wh, "builtin:wordcount", key, params={"partitions": 3}, executor=executor)
    assert changed.reused_from is None and changed.output_pdh != first.output_pdh


def git(repo: Path, *args: str) -> str:
    env_args = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    done = subprocess.run(
        ["git", "-C", str(repo), *env_args, *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_git_function_is_pinned_and_a_new_revision_runs_again(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "steps").mkdir()
    (repo / "steps" / "run.sh").write_text(SHELL_STEPS)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "one")
    first_commit = git(repo, "rev-parse", "HEAD")
    key = wh.put([make_text(tmp_path / "in")]).pdh
    spec = f"git:{repo}@main:steps/run.sh"
    one = run_job(wh, spec, key)
    assert one.state == "complete", one.error
    assert one.function_commit == first_commit
    files = wh.manifest(one.output_pdh).files()
    assert sorted(files) == ["1.txt", "2.txt"]
    assert wh.reader(one.output_pdh).read_file("2.txt") == b"beta gamma\n"
    assert run_job(wh, spec, key).reused_from == one.id
    (repo / "steps" / "README").write_text("a new revision\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "two")
    two = run_job(wh, spec, key)
    assert two.reused_from is None and two.function_commit != first_commit
    assert two.function_pdh != one.function_pdh
    assert two.output_pdh == one.output_pdh  # same output: reproducible
    pinned = run_job(wh, f"git:{repo}@{first_commit}:steps/run.sh", key)
    assert pinned.reused_from == one.id


def test_a_git_function_that_cannot_be_had_is_one_error_line(
    wh: EmbeddedWarehouse, tmp_path: Path, run: Runner
) -> None:
    """A commit of no files is 'not found' (4), not tarfile's traceback; a
    repository that is not there is git's first line, not its advice."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "fn.sh").write_text(SHELL_STEPS)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "one")
    git(repo, "rm", "-q", "fn.sh")
    git(repo, "commit", "-q", "-m", "none")
    key = wh.put([make_text(tmp_path / "in")]).pdh
    err = run("job", "submit", f"git:{repo}@main:fn.sh", "--input", key, code=4).stderr
    assert err.startswith("Error: commit ") and err.endswith(" holds no files\n"), err
    missing = f"git:file://{tmp_path / 'nowhere'}@main:fn.sh"
    err = run("job", "submit", missing, "--input", key, code=2).stderr
    assert err.startswith("Error: git ") and len(err.splitlines()) == 1, err
    assert run("job", "ls").output.count("\n") == 1  # the header: nothing submitted


def test_cli_submit_in_the_background_watch_ls_and_logs(
    wh: EmbeddedWarehouse, tmp_path: Path, run: Runner
) -> None:
    key = wh.put([make_text(tmp_path / "in")]).pdh
    out = run("job", "submit", "builtin:zhash", "--input", key, "--param", "algorithm=sha256")
    job_id = int(out.output.split()[1].rstrip(":"))
    watched = run("job", "watch", str(job_id)).output
    assert f"job {job_id}: complete" in watched
    record = jobs.get_job(wh.engine, job_id)
    assert record.steps_done == 4 and json.loads(record.params) == {"algorithm": "sha256"}
    listed = run("job", "ls").output
    assert record.output_pdh in listed
    assert listed.splitlines()[0].startswith("id\tstate\tfunction")
    assert [line.split("\t")[1] for line in listed.splitlines()[1:]] == ["complete"]
    assert "== step 3" in run("job", "logs", str(job_id)).output
    reused = run(
        "job", "submit", "builtin:zhash", "--input", key, "--param", "algorithm=sha256", "--wait"
    ).output
    assert f"reused from {job_id}" in reused
    run("job", "cancel", str(job_id), code=2)  # already finished
    # A path inside the input is refused, not dropped (the job ran on everything).
    wh.set_name("in", key, expect=None)
    before = len(jobs.list_jobs(wh.engine))
    for inside in (f"{key}/a.txt", "in/a.txt"):
        err = run("job", "submit", "builtin:zhash", "--input", inside, code=2).stderr
        assert err.startswith("Error: input ") and "inside a collection" in err, err
    assert len(jobs.list_jobs(wh.engine)) == before
    # Params too big for a step's environment would stop the whole queue: refused.
    err = run(
        "job",
        "submit",
        "builtin:zhash",
        "--input",
        key,
        "--param",
        "x=" + "y" * (130 << 10),
        code=2,
    ).stderr
    assert err.startswith("Error: params: ") and "at most" in err, err[:200]
    assert len(jobs.list_jobs(wh.engine)) == before


SLEEPERS = """#!/bin/sh
if [ "$WH_STEP" = 0 ]; then exec wh step queue --level 1 $(seq 1 6); fi
echo $$ > "$WH_HOME/../pids/$WH_STEP"
exec sleep 600
"""


def test_cancel_kills_the_running_steps(
    wh: EmbeddedWarehouse, tmp_path: Path, executor: str
) -> None:
    """On Dask too: a task cannot be interrupted, so the worker kills the step's process."""
    pids = wh.home.parent / "pids"
    pids.mkdir()
    fn = put_function(wh, tmp_path, "sleepers.sh", SLEEPERS)
    record = jobs.submit(
        wh, jobs.JobRequest(fn, wh.put([make_text(tmp_path / "in")]).pdh, {}, executor=executor)
    )
    manager = threading.Thread(
        target=jobs.run_manager, args=(wh, executor), kwargs={"until_job": record.id}
    )
    manager.start()
    try:
        deadline = time.monotonic() + 60
        while len(list(pids.iterdir())) < 2:  # both slots run a sleeper
            assert time.monotonic() < deadline, "no step started"
            time.sleep(0.1)
        if executor != "local":  # the probe used below sees the running steps
            assert not _nothing_left_to_start(executor)
        request_control(wh.engine, record.id, "cancel")
        # The steps sleep far longer than this: a cancel that waited for them
        # instead of killing them fails here, however slow the machine.
        manager.join(90)
        assert not manager.is_alive(), "the manager did not finish the cancelled job"
    finally:
        if manager.is_alive():  # failed: no sleeper is left behind
            _kill_all(pids)
            request_control(wh.engine, record.id, "cancel")
            manager.join(30)
    assert jobs.get_job(wh.engine, record.id).state == "cancelled"
    for marker in pids.iterdir():
        deadline = time.monotonic() + 60
        while _alive(int(marker.read_text())):
            if time.monotonic() >= deadline:
                _kill_all(pids)
                pytest.fail(f"step {marker.name} still runs after the cancel")
            time.sleep(0.1)
    # A step not yet begun must not start later: once nothing the executor
    # was given can still start one, no third sleeper has begun.
    deadline = time.monotonic() + 60
    while not _nothing_left_to_start(executor):
        assert time.monotonic() < deadline, f"{executor} still runs tasks after the cancel"
        time.sleep(0.1)
    assert len(list(pids.iterdir())) == 2, "a step started after the cancel"


def _worker_tasks(dask_worker: Any) -> int:
    # A task cancelled while it runs stays in `executing` until it ends (on
    # Dask a task cannot be interrupted: it goes on to the rest of its chunk).
    state = dask_worker.state
    return len(state.executing) + len(state.long_running) + len(state.ready)


def _nothing_left_to_start(executor: str) -> bool:
    """No task or batch job the executor was given can still start a step."""
    if executor.startswith("dask:"):
        from distributed import Client

        with Client(executor.removeprefix("dask:"), timeout=30) as client:
            return not any(client.run(_worker_tasks).values())
    if executor == "slurm":  # this test has the cluster to itself (slurm_turn)
        queue = subprocess.run(
            ["squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=True, timeout=60
        )
        return not queue.stdout.strip()
    # Local: the manager's return closed its executor, which reaped every step.
    return True


def _kill_all(pids: Path) -> None:
    for marker in pids.iterdir():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(marker.read_text()), signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize(
    ("level", "text"),
    [
        ("99999999999999999999", ""),
        ("2147483648", ""),
        ("true", ""),
        ("-1", ""),
        ("1", "\\\\ud800"),  # a lone surrogate: JSON, but no UTF-8 text
    ],
)
def test_a_queued_step_out_of_range_fails_the_step_not_the_manager(
    wh: EmbeddedWarehouse, tmp_path: Path, level: str, text: str
) -> None:
    script = (
        "#!/bin/sh\n"
        f"""echo '{{"op":"queue","level":{level},"input":"{text}"}}' >> "$WH_RESULT"\n"""
    )
    fn = put_function(wh, tmp_path, "badlevel.sh", script)
    job = run_job(wh, fn, wh.put([make_text(tmp_path / "in")]).pdh, max_attempts=1)
    assert job.state == "failed"
    (step,) = jobs.list_steps(wh.engine, job.id)
    assert "the step's report was refused" in (step.log_tail or "")
    # The manager is still fine: the next job runs.
    ok = put_function(wh, tmp_path, "ok.sh", "#!/bin/sh\nexit 0\n")
    assert run_job(wh, ok, wh.put([make_text(tmp_path / "in2")]).pdh).state == "complete"


LEAVES_A_CHILD_SH = """#!/bin/sh
for pid in $(cat "$WH_HOME/../pids" 2>/dev/null); do
    # A killed orphan may stay a zombie a while (until its new parent reaps it).
    state=$(sed -n 's/^State:[[:space:]]*\\(.\\).*/\\1/p' "/proc/$pid/status" 2>/dev/null)
    [ -n "$state" ] && [ "$state" != Z ] && echo "still running: $pid"
done
sleep 1000 &
echo $! >> "$WH_HOME/../pids"
[ "$WH_LEVEL" -lt 3 ] && wh step queue --level $((WH_LEVEL + 1)) next
exit 0
"""

LEAVES_A_CHILD_PY = """
import os, subprocess
from warehouse import step
pids = os.path.join(os.environ["WH_HOME"], "..", "pids")
if os.path.exists(pids):
    for pid in open(pids).read().split():
        try:  # a killed orphan may stay a zombie a while (until its new parent reaps it)
            state = open(f"/proc/{pid}/status").read().split("State:")[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            continue
        if state != "Z":
            print("still running:", pid)
child = subprocess.Popen(["sleep", "1000"])
with open(pids, "a") as f:
    f.write(f"{child.pid}\\n")
if step.level() < 3:
    step.queue(step.level() + 1, "next")
"""


@pytest.mark.parametrize(
    ("name", "text"), [("a.sh", LEAVES_A_CHILD_SH), ("a.py", LEAVES_A_CHILD_PY)]
)
def test_what_a_step_leaves_running_ends_with_it(
    wh: EmbeddedWarehouse, tmp_path: Path, name: str, text: str
) -> None:
    # One slot: each step reuses the work directory (and log) of the one before;
    # a Python step after the first is forked from the fork server.
    fn = put_function(wh, tmp_path, name, text)
    record = jobs.submit(wh, jobs.JobRequest(fn, wh.put([make_text(tmp_path / "in")]).pdh, {}))
    try:
        assert jobs.run_manager(wh, "local", until_job=record.id, cpus=1)
        assert jobs.get_job(wh.engine, record.id).state == "complete"
        steps = jobs.list_steps(wh.engine, record.id)
        assert len(steps) == 4
        assert not [s.log_tail for s in steps if s.log_tail]
    finally:  # none is left behind, even when this fails
        for pid in (wh.home.parent / "pids").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


@pytest.mark.parametrize(
    ("level", "text"), [(1.5, "x"), ("1", "x"), (True, "x"), (2**31, "x"), (1, b"x"), (1, "\udcff")]
)
def test_the_step_library_refuses_a_bad_queue_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: object, text: object
) -> None:
    from warehouse import step
    from warehouse.errors import UsageError

    result = tmp_path / "result"
    monkeypatch.setenv("WH_RESULT", str(result))
    with pytest.raises(UsageError):
        step.queue(level, text)  # type: ignore[arg-type]
    assert not result.exists()


@pytest.mark.parametrize("make", ["mkfifo", "mkdir"])
def test_a_result_file_that_is_no_regular_file_fails_the_step(
    wh: EmbeddedWarehouse, tmp_path: Path, make: str
) -> None:
    # A FIFO with no writer would block the manager's read forever; a directory
    # made it stop with a traceback.
    script = f'#!/bin/sh\n[ "$WH_ATTEMPT" = 1 ] && {make} "$WH_RESULT"\nexit 0\n'
    fn = put_function(wh, tmp_path, "odd.sh", script)
    record = jobs.submit(wh, jobs.JobRequest(fn, wh.put([make_text(tmp_path / "in")]).pdh, {}))
    assert jobs.run_manager(wh, "local", until_job=record.id, cpus=1)
    job = jobs.get_job(wh.engine, record.id)
    # The retry, in the same work directory, finds it cleaned and succeeds.
    assert (job.state, job.failed_attempts) == ("complete", 1)


def test_a_scratch_replaced_by_a_link_is_removed_not_what_it_names(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    # Step 0 puts a link to a directory of the user's in its scratch's place;
    # the next step (same work directory, one slot) must get an empty scratch,
    # and the directory named must be left as it was.
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "sub" / "keep.txt").write_text("keep\n")
    os.chmod(mine / "sub", 0o755)
    script = f"""#!/bin/sh
if [ "$WH_STEP" = 0 ]; then
    wh step queue --level 1 next
    cd / && rm -rf "$WH_SCRATCH" && ln -s {mine} "$WH_SCRATCH"
    exit 0
fi
ls -A "$WH_SCRATCH"
[ -L "$WH_SCRATCH" ] && echo "a link"
exit 0
"""
    fn = put_function(wh, tmp_path, "link.sh", script)
    record = jobs.submit(wh, jobs.JobRequest(fn, wh.put([make_text(tmp_path / "in")]).pdh, {}))
    assert jobs.run_manager(wh, "local", until_job=record.id, cpus=1)
    assert jobs.get_job(wh.engine, record.id).state == "complete"
    assert [s.log_tail for s in jobs.list_steps(wh.engine, record.id)] == ["", ""]
    assert (mine / "sub" / "keep.txt").read_text() == "keep\n"
    assert (mine / "sub").stat().st_mode & 0o777 == 0o755


def test_a_function_that_cannot_be_started_fails_its_job_not_the_manager(
    wh: EmbeddedWarehouse, tmp_path: Path, executor: str
) -> None:
    if executor.startswith("slurm"):
        pytest.skip("the Slurm executor starts a step through its own script")
    fn = put_function(wh, tmp_path, "notes", "no interpreter line: not a program\n")
    job = run_job(wh, fn, wh.put([make_text(tmp_path / "in")]).pdh, executor=executor)
    assert job.state == "failed"
    (step,) = jobs.list_steps(wh.engine, job.id)
    assert (step.attempts, step.exit_status) == (3, 126)
    assert "wh: the step could not be started:" in (step.log_tail or "")
    ok = put_function(wh, tmp_path, "ok.sh", "#!/bin/sh\nexit 0\n")
    job = run_job(wh, ok, wh.put([make_text(tmp_path / "in2")]).pdh, executor=executor)
    assert job.state == "complete"


def test_watch_starts_a_manager_when_none_runs(
    wh: EmbeddedWarehouse, tmp_path: Path, run: Runner
) -> None:
    # As after `wh job manager` was killed: the job is queued and nothing runs it.
    fn = put_function(wh, tmp_path, "ok.sh", "#!/bin/sh\nexit 0\n")
    record = jobs.submit(wh, jobs.JobRequest(fn, wh.put([make_text(tmp_path / "in")]).pdh, {}))
    assert f"job {record.id}: complete" in run("job", "watch", str(record.id)).output


PRINTS_A_PROBE = """#!/bin/sh
echo "probe=$WH_TEST_PROBE"
"""


def test_a_step_sees_the_environment_as_it_is_when_it_starts(
    wh: EmbeddedWarehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A program running several jobs (or a test) may change its environment
    # between them: each step gets it as it is at its start, not as it was at
    # the first step this process ran.
    fn = put_function(wh, tmp_path, "probe.sh", PRINTS_A_PROBE)
    pdh = wh.put([make_text(tmp_path / "in")]).pdh
    seen = []
    for value in ("one", "two"):
        monkeypatch.setenv("WH_TEST_PROBE", value)
        record = run_job(wh, fn, pdh, reuse=False)
        assert record.state == "complete"
        (step,) = jobs.list_steps(wh.engine, record.id)
        seen.append(step.log_tail)
    assert seen == ["probe=one\n", "probe=two\n"]


QUEUES_BELOW_ITSELF = """#!/bin/sh
set -e
case "$WH_LEVEL" in
0) wh step queue --level 2 late ;;
2) if [ "$WH_PARAMS" = '{"how":"cli"}' ]; then wh step queue --level 1 early
   else printf '%s\\n' '{"op":"queue","level":1,"input":"early"}' >> "$WH_RESULT"; fi ;;
esac
"""


@pytest.mark.parametrize("how", ["cli", "result file"])
@pytest.mark.parametrize("kind", ["local", "dask"])
def test_a_step_cannot_queue_a_step_below_its_own_level(
    wh: EmbeddedWarehouse,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    how: str,
    kind: str,
) -> None:
    # A level-1 step queued by a level-2 one would run while level-2 steps
    # run (which never see what it passes on): the queueing step fails, with
    # the rule in its log, whether it asked through `wh step queue` (checked
    # in the step) or wrote its result file by hand (checked by the manager).
    executor = "local" if kind == "local" else f"dask:{request.getfixturevalue('dask_cluster')}"
    fn = put_function(wh, tmp_path, "below.sh", QUEUES_BELOW_ITSELF)
    pdh = wh.put([make_text(tmp_path / "in")]).pdh
    params = {"how": "cli" if how == "cli" else "file"}
    record = run_job(wh, fn, pdh, executor=executor, max_attempts=1, params=params)
    assert record.state == "failed"
    steps = jobs.list_steps(wh.engine, record.id)
    assert [(s.level, s.state) for s in steps] == [(0, "done"), (2, "failed")]
    rule = "a step at level 2 cannot queue a step at level 1: a step queues steps at its own"
    assert rule in (steps[1].log_tail or ""), steps[1].log_tail


def test_the_step_library_refuses_a_level_below_its_own_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from warehouse import step
    from warehouse.errors import UsageError

    result = tmp_path / "result"
    monkeypatch.setenv("WH_RESULT", str(result))
    monkeypatch.setenv("WH_LEVEL", "2")
    with pytest.raises(UsageError, match="a step at level 2 cannot queue a step at level 1"):
        step.queue(1, "x")
    assert not result.exists()
    step.queue(2, "same level")
    step.queue(3, "higher")
    assert [json.loads(line)["level"] for line in result.read_text().splitlines()] == [2, 3]
