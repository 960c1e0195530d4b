"""Crash safety: SIGKILL the process running the manager mid-job, then start it again."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import WH_BIN, wh_process
from jobs_helpers import put_function, run_job
from warehouse import jobs
from warehouse.embedded import EmbeddedWarehouse

SLOW = """import os, time
from pathlib import Path
from warehouse import step

if step.number() == 0:
    step.queue(1, *(f"s{i:02d}" for i in range(12)))
else:
    runs = Path(os.environ["WH_HOME"]).parent / "runs"
    runs.mkdir(exist_ok=True)
    first = not (runs / step.step_input()).exists()
    with open(runs / step.step_input(), "a") as f:
        f.write("ran\\n")
    if first:  # slow the first run only: the kill must land mid-job, not in the oracle's run
        time.sleep(0.4)
    out = step.StreamWriter("./" + step.step_input())
    out.add_file("out.txt", [step.step_input().encode() * 1000])
    step.output(out.finish())
"""


@pytest.mark.parametrize(
    "executor", ["local", pytest.param("slurm", marks=pytest.mark.slow)], indirect=True
)
def test_killed_manager_restarts_without_rerunning_finished_steps(
    wh: EmbeddedWarehouse, home: Path, tmp_path: Path, executor: str
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x").write_text("x")
    key = wh.put([tmp_path / "in"]).pdh
    fn = put_function(wh, tmp_path, "slow.py", SLOW)
    env = {**os.environ, "WH_HOME": str(home)}
    proc = subprocess.Popen(
        [
            WH_BIN,
            "job",
            "submit",
            fn,
            "--input",
            key,
            "--wait",
            "--cpus",
            "1",
            "--executor",
            executor,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=False,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = jobs.list_jobs(wh.engine)
            if found and found[0].steps_done >= 4:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the job did not get going")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
        proc.communicate()
    job_id = found[0].id
    done_before = {s.input for s in jobs.list_steps(wh.engine, job_id) if s.state == "done"}
    assert jobs.get_job(wh.engine, job_id).state == "running"
    restarted = wh_process("job", "manager", "--executor", executor, home=home, timeout=90)
    assert restarted.returncode == 0, restarted.stderr
    job = jobs.get_job(wh.engine, job_id)
    assert job.state == "complete", job.error
    runs = tmp_path / "runs"
    for name in done_before - {""}:
        assert (runs / name).read_text() == "ran\n", name  # not run again
    clean = run_job(wh, fn, key, reuse=False, executor=executor)
    assert clean.output_pdh == job.output_pdh
    assert len(wh.manifest(job.output_pdh).files()) == 12


WAITS_FOR_GO = """#!/bin/sh
touch "$WH_HOME/../started-$WH_JOB"
while [ ! -e "$WH_HOME/../go" ]; do sleep 0.05; done
echo "job $WH_JOB went"
"""


def _input(tmp_path: Path) -> Path:
    """A job's input in a directory of its own: not ``tmp_path``, which holds
    the warehouse's home, whose catalog files change under a put of it."""
    src = tmp_path / "input"
    src.mkdir()
    (src / "data").write_text("input\n")
    return src


def _until(found: Path, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Wait for a step to say it started (a guard against a hang, not a bound)."""
    deadline = time.monotonic() + 120
    while not found.exists():
        assert proc is None or proc.poll() is None, "it ended first"
        assert time.monotonic() < deadline, f"no {found.name}"
        time.sleep(0.02)


def test_submit_wait_takes_over_from_a_killed_manager(
    wh: EmbeddedWarehouse, home: Path, tmp_path: Path
) -> None:
    # `wh job submit --wait` finds another process running the manager and
    # waits on the catalog; that process is killed (SIGKILL) while the job
    # runs: the waiting command runs the manager itself, and ends with the
    # job's outcome rather than waiting for ever.
    key = wh.put([_input(tmp_path)]).pdh
    fn = put_function(wh, tmp_path, "waits.sh", WAITS_FOR_GO)
    first = jobs.submit(wh, jobs.JobRequest(fn, key, {}))
    env = {**os.environ, "WH_HOME": str(home)}
    manager = subprocess.Popen([WH_BIN, "job", "manager", "--cpus", "2"], env=env)
    waiting = None
    try:
        _until(home.parent / f"started-{first.id}", manager)
        waiting = subprocess.Popen(
            [WH_BIN, "job", "submit", fn, "--input", key, "--no-reuse", "--wait"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _until(home.parent / f"started-{first.id + 1}", manager)  # run by that manager
        manager.send_signal(signal.SIGKILL)
        manager.wait()
        (home.parent / "go").touch()
        out, err = waiting.communicate(timeout=300)  # on a hang, fail; never for ever
        assert waiting.returncode == 0, err
        record = jobs.get_job(wh.engine, first.id + 1)
        assert out.decode() == f"job {record.id}: complete: {record.output_pdh}\n"
        assert not err
        # The other job is left to a background manager, and ends too.
        watched = wh_process("job", "watch", str(first.id), home=home, timeout=300)
        assert watched.returncode == 0, watched.stderr
    finally:
        (home.parent / "go").touch()
        for proc in (manager, waiting):
            if proc is not None:
                proc.kill()
                proc.communicate()


def _ended(pid: int) -> bool:
    """Gone, or a zombie left for its new parent to reap."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return status.split("State:")[1].split()[0] == "Z"


def _leave_nothing(proc: subprocess.Popen[bytes], pids: list[int], lifeline: int = 0) -> None:
    """End what a test started, whatever it found: the manager, the steps and
    their children (``pids``), and a lifeline it stopped."""
    if lifeline:
        with contextlib.suppress(ProcessLookupError):
            os.kill(lifeline, signal.SIGCONT)
    proc.kill()
    proc.wait()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _until_ended(pids: list[int]) -> None:
    deadline = time.monotonic() + 120  # a guard against a hang, not a bound
    while not all(_ended(p) for p in pids):
        assert time.monotonic() < deadline, [p for p in pids if not _ended(p)]
        time.sleep(0.05)


# The step and a child it leaves running tell their pids (and the step's
# parent's), then wait for ever.
RUNS_ON_SH = """#!/bin/sh
sleep 1000 &
echo "$$ $! $PPID" > "$WH_HOME/../pids.tmp"
mv "$WH_HOME/../pids.tmp" "$WH_HOME/../pids"
wait
"""

RUNS_ON_PY = """import os, subprocess, time
from pathlib import Path
home = Path(os.environ["WH_HOME"]).parent
child = subprocess.Popen(["sleep", "1000"])
(home / "pids.tmp").write_text(f"{os.getpid()} {child.pid} {os.getppid()}")
(home / "pids.tmp").rename(home / "pids")
while True:
    time.sleep(1)
"""


def test_a_killed_workflow_run_leaves_no_step_running(
    wh: EmbeddedWarehouse, home: Path, tmp_path: Path
) -> None:
    # kill -9 of `wh workflow run --wait`, whose manager runs a step (a
    # subprocess) that started a child: both end with it.
    key = wh.put([_input(tmp_path)]).pdh
    fn = put_function(wh, tmp_path, "runs.sh", RUNS_ON_SH)
    flow = tmp_path / "w.yml"
    flow.write_text(f"workflow: w\njobs:\n  a:\n    function: {fn}\n    input: {key}\n")
    env = {**os.environ, "WH_HOME": str(home)}
    proc = subprocess.Popen([WH_BIN, "workflow", "run", str(flow), "--wait"], env=env)
    pids: list[int] = []
    try:
        _until(home.parent / "pids", proc)
        pids = [int(p) for p in (home.parent / "pids").read_text().split()]
        assert pids[2] == proc.pid  # started by that process itself
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        _until_ended(pids[:2])
    finally:
        _leave_nothing(proc, pids[:2])


def _lifeline_of(manager: int) -> int:
    """The pid of the lifeline the process ``manager`` started."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == manager and argv[1:4] == [b"-I", b"-S", b"-c"]:
            return int(entry.name)
    raise AssertionError(f"process {manager} runs no lifeline")


def _until_looked(lifeline: int) -> None:
    """Wait until the lifeline has seen the manager alive after the step's
    child started: it looks every 0.2 s while it holds steps, and blocks
    between, so five blocks take two looks at least. Waited for, not
    asserted: a lifeline that never looks is tested too."""
    seen = _sleeps(lifeline)
    deadline = time.monotonic() + 30
    while _sleeps(lifeline) < seen + 5 and time.monotonic() < deadline:
        time.sleep(0.05)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_the_kernel_stops_the_step_and_a_late_lifeline_kills_it_whole(
    wh: EmbeddedWarehouse, home: Path, tmp_path: Path
) -> None:
    """The step's own process is stopped by the kernel with its manager, with
    no process of ours running: the lifeline is stopped here (as a starved
    one is). Its child runs on until the lifeline reads the pids waiting in
    its pipe and kills the step's group, the stopped step with it."""
    key = wh.put([_input(tmp_path)]).pdh
    fn = put_function(wh, tmp_path, "runs.sh", RUNS_ON_SH)
    flow = tmp_path / "w.yml"
    flow.write_text(f"workflow: w\njobs:\n  a:\n    function: {fn}\n    input: {key}\n")
    env = {**os.environ, "WH_HOME": str(home)}
    proc = subprocess.Popen([WH_BIN, "workflow", "run", str(flow), "--wait"], env=env)
    pids: list[int] = []
    lifeline = 0
    try:
        _until(home.parent / "pids", proc)
        pids = [int(p) for p in (home.parent / "pids").read_text().split()]
        lifeline = _lifeline_of(proc.pid)
        # At the manager's own priority: at nice 19 a busy machine starved it.
        assert os.getpriority(os.PRIO_PROCESS, lifeline) == os.getpriority(
            os.PRIO_PROCESS, proc.pid
        )
        os.kill(lifeline, signal.SIGSTOP)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 120  # a guard against a hang, not a bound
        while _state(pids[0]) != "T":  # the kernel's doing: the lifeline is stopped
            assert time.monotonic() < deadline, _state(pids[0])
            time.sleep(0.02)
        assert not _ended(pids[1])  # nothing else killed it
        os.kill(lifeline, signal.SIGCONT)
        _until_ended(pids[:2])
    finally:
        _leave_nothing(proc, pids[:2], lifeline)


RUNS_A_JOB_FORKED = """import sys, time
from warehouse import jobs
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs import forkserver

forkserver.warm()
while not forkserver.ready():
    time.sleep(0.05)
with EmbeddedWarehouse(sys.argv[1]) as wh:
    jobs.run_manager(wh, "local", until_job=int(sys.argv[2]))
"""


def test_a_killed_manager_leaves_no_forked_step_running(
    wh: EmbeddedWarehouse, home: Path, tmp_path: Path
) -> None:
    # The same for a Python step forked from the manager's fork server.
    key = wh.put([_input(tmp_path)]).pdh
    fn = put_function(wh, tmp_path, "runs.py", RUNS_ON_PY)
    record = jobs.submit(wh, jobs.JobRequest(fn, key, {}))
    driver = tmp_path / "driver.py"
    driver.write_text(RUNS_A_JOB_FORKED)
    env = {**os.environ, "WH_HOME": str(home)}
    proc = subprocess.Popen([sys.executable, str(driver), str(home), str(record.id)], env=env)
    pids: list[int] = []
    try:
        _until(home.parent / "pids", proc)
        pids = [int(p) for p in (home.parent / "pids").read_text().split()]
        assert pids[2] != proc.pid  # forked by the fork server, not started by the manager
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        _until_ended(pids)  # the fork server too
    finally:
        _leave_nothing(proc, pids)


# The step leaves a child running, tells the pids, then waits until its
# parent (the manager) is stopped and ends at once: a zombie that its new
# parent reaps once the manager is killed.
ENDS_WITH_ITS_MANAGER = """#!/bin/sh
sleep 1000 &
parent=$PPID
echo "$$ $! $PPID" > "$WH_HOME/../pids.tmp"
mv "$WH_HOME/../pids.tmp" "$WH_HOME/../pids"
while [ "$(awk '{print $3}' /proc/$parent/stat)" != "T" ]; do sleep 0.01; done
exit 0
"""

# Runs a command as a child subreaper (as systemd or an init would be),
# reaping every process handed to it at once.
REAPER = """import ctypes, os, subprocess, sys, time
if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
    sys.exit("no subreaper")
subprocess.Popen(sys.argv[1:])
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.01)
"""


def _sleeps(pid: int) -> int:
    """How many times process ``pid`` has blocked (its voluntary context switches)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("voluntary_ctxt_switches:")[1].split()[0])


def test_the_lifeline_kills_the_group_of_a_step_reaped_by_another(
    wh: EmbeddedWarehouse, home: Path, tmp_path: Path
) -> None:
    """The manager is killed while the lifeline waits (stopped here, as in its
    pause between batches or starved) just as its step ended: the step, not
    yet reaped, is reaped at once by another parent (a subreaper), and its
    child, left in its process group, is killed too. The lifeline has seen
    the manager alive after the child started, which proves the group its
    own."""
    key = wh.put([_input(tmp_path)]).pdh
    fn = put_function(wh, tmp_path, "ends.sh", ENDS_WITH_ITS_MANAGER)
    reaper = tmp_path / "reaper.py"
    reaper.write_text(REAPER)
    env = {**os.environ, "WH_HOME": str(home)}
    proc = subprocess.Popen(
        [sys.executable, str(reaper), WH_BIN, "job", "submit", fn, "--input", key, "--wait"],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    pids: list[int] = []
    lifeline = 0
    try:
        _until(home.parent / "pids", proc)
        pids = [int(p) for p in (home.parent / "pids").read_text().split()]
        lifeline = _lifeline_of(pids[2])  # of the `wh` process, the step's manager
        _until_looked(lifeline)
        deadline = time.monotonic() + 120  # a guard against a hang, not a bound
        os.kill(lifeline, signal.SIGSTOP)
        os.kill(pids[2], signal.SIGSTOP)  # it cannot reap the step now
        while _state(pids[0]) != "Z":  # the step ended
            assert time.monotonic() < deadline, "the step did not end"
            time.sleep(0.02)
        os.kill(pids[2], signal.SIGKILL)
        while Path(f"/proc/{pids[0]}").exists():  # reaped by the subreaper
            assert time.monotonic() < deadline, "the step was not reaped"
            time.sleep(0.02)
        assert not _ended(pids[1])  # its child runs on
        os.kill(lifeline, signal.SIGCONT)
        _until_ended(pids[1:2])
    finally:
        _leave_nothing(proc, pids[:3], lifeline)


# Busy processes that load every core, more than one each: the machine is
# fully loaded while the manager is killed.
HOG = "while :; do :; done"


@pytest.mark.parametrize("how", ["subprocess", "forked"])
def test_steps_of_a_killed_manager_end_beside_cpu_hogs(
    wh: EmbeddedWarehouse, home: Path, tmp_path: Path, how: str
) -> None:
    """A step started as a subprocess (and its child), or forked by the fork
    server, ends soon after its manager is killed on a machine whose every
    core is busy: by the kernel and by processes of normal priority, none
    waiting for CPU the hogs leave (once, at nice 19, minutes)."""
    key = wh.put([_input(tmp_path)]).pdh
    env = {**os.environ, "WH_HOME": str(home)}
    if how == "subprocess":
        fn = put_function(wh, tmp_path, "runs.sh", RUNS_ON_SH)
        flow = tmp_path / "w.yml"
        flow.write_text(f"workflow: w\njobs:\n  a:\n    function: {fn}\n    input: {key}\n")
        argv = [WH_BIN, "workflow", "run", str(flow), "--wait"]
    else:
        fn = put_function(wh, tmp_path, "runs.py", RUNS_ON_PY)
        record = jobs.submit(wh, jobs.JobRequest(fn, key, {}))
        driver = tmp_path / "driver.py"
        driver.write_text(RUNS_A_JOB_FORKED)
        argv = [sys.executable, str(driver), str(home), str(record.id)]
    hogs: list[subprocess.Popen[bytes]] = []
    proc: subprocess.Popen[bytes] | None = None
    pids: list[int] = []
    try:
        for _ in range(2 * len(os.sched_getaffinity(0))):
            hogs.append(subprocess.Popen(["sh", "-c", HOG]))
        proc = subprocess.Popen(argv, env=env)
        _until(home.parent / "pids", proc)
        pids = [int(p) for p in (home.parent / "pids").read_text().split()]
        left = pids[:2] if how == "subprocess" else pids
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed = time.monotonic()
        # Generous beside the 2 s aimed at; the starved lifeline took minutes.
        deadline = killed + 30
        while not all(_ended(p) for p in left):
            assert time.monotonic() < deadline, [p for p in left if not _ended(p)]
            time.sleep(0.02)
        print(f"ended {time.monotonic() - killed:.2f} s after the kill")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        if proc is not None:
            _leave_nothing(proc, pids)
