"""Crash safety: SIGKILL the process driving a workflow (embedded) mid-run, then
run the same command again: no finished job runs again, and the outputs are
those of an undisturbed run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from conftest import WH_BIN, wh_process
from waiting import wait_for
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs.executors import LocalExecutor
from warehouse.jobs.jobrecords import JobRecord
from warehouse.jobs.jobstore import get_job, list_jobs, list_steps
from warehouse.jobs.manager import Manager
from warehouse.jobs.model import Resources
from warehouse.jobs.submission import JobRequest, submit_many
from warehouse.manifest import Manifest
from warehouse.workflows import runstore
from warehouse.workflows.driver import Driver
from warehouse.workflows.runstart import start_run
from warehouse.workflows.runstore import job_states
from workflow_helpers import json_out, make_lab, ran, write_diamond


@pytest.mark.slow
@pytest.mark.timeout(300)  # two controllers or two drivers, real steps
def test_a_killed_workflow_process_resumes_without_rerunning_finished_jobs(
    wh: EmbeddedWarehouse, home: Path, tmp_path: Path
) -> None:
    make_lab(tmp_path)
    d = tmp_path / "reads"
    d.mkdir()
    (d / "r.fq").write_text("@r\nACGT\n+\nIIII\n")
    wh.put([d], name="reads")
    wf = write_diamond(tmp_path)
    argv = [WH_BIN, "workflow", "run", str(wf), "-i", "sleep=2", "--wait"]
    proc = subprocess.Popen(
        argv,
        env={**os.environ, "WH_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:

        def b_or_c_running() -> bool:
            runs = runstore.list_runs(wh.engine)
            if not runs:
                return False
            nodes = {n.node: n.state for n in runstore.list_nodes(wh.engine, runs[0].id)}
            return nodes["a"] == "complete" and "running" in (nodes["b"], nodes["c"])

        wait_for(b_or_c_running, "a complete, b or c running", 90)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        proc.kill()
        proc.communicate()
    (killed,) = runstore.list_runs(wh.engine)
    assert killed.state == "running"
    again = wh_process(*argv[1:], "--json", home=home, timeout=120)
    assert again.returncode == 0, again.stderr
    view = json_out(again.stdout)
    assert view["resumed"] and view["id"] == killed.id and view["state"] == "complete"
    assert ran(tmp_path)["a"] == 1, "a finished before the kill: not run again"
    assert ran(tmp_path)["d"] == 1
    # An undisturbed run of the same jobs (another parameter: they all run) makes the same.
    clean = wh_process(*argv[1:4], "-i", "sleep=0", "--wait", "--json", home=home, timeout=120)
    assert clean.returncode == 0, clean.stderr
    clean_nodes = {n["node"]: n for n in json_out(clean.stdout)["nodes"]}
    for n in view["nodes"]:
        assert n["output_pdh"] == clean_nodes[n["node"]]["output_pdh"], n["node"]
        if n["node"] != "d":
            assert not clean_nodes[n["node"]]["reused"]


# A step that outputs one empty file named after its "n" parameter (no Python start-up).
STEP = """#!/bin/sh
n=${WH_PARAMS#*\\"n\\":\\"}
n=${n%%\\"*}
empty=d41d8cd98f00b204e9800998ecf8427e+0
printf '{"op":"output","manifest":". %s 0:0:%s.done\\\\n"}\\n' "$empty" "$n" >> "$WH_RESULT"
"""


def test_a_driver_killed_as_it_submits_resumes_without_submitting_twice(
    wh: EmbeddedWarehouse, home: Path, tmp_path: Path
) -> None:
    function = _source_and_step(wh, tmp_path)
    wf = tmp_path / "wf.yml"
    wf.write_text(
        "workflow: two-then-one\n"
        "inputs:\n  source: {default: source}\n"
        "jobs:\n"
        f"  a: {{function: '{function}', input: $source, params: {{n: a}}}}\n"
        f"  b: {{function: '{function}', input: $source, params: {{n: b}}}}\n"
        f"  c: {{function: '{function}', input: $a, params: {{n: c}}}}\n"
        "outputs:\n  last: $c\n"
    )
    argv = ["workflow", "run", str(wf), "--wait", "--json"]
    # Killed while a and b's jobs are being recorded, before their nodes know them.
    killed = wh_process(*argv, home=home, env={"WH_FAULT_POINT": "workflow-submitted"}, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    again = wh_process(*argv, home=home, timeout=120)
    assert again.returncode == 0, again.stderr
    view = json_out(again.stdout)
    assert view["resumed"] and view["state"] == "complete"
    jobs = list_jobs(wh.engine)
    node_jobs = {n["node"]: n["job_id"] for n in view["nodes"]}
    assert sorted(j.id for j in jobs) == sorted(node_jobs.values()), "a job no node knows of"
    assert sorted(json.loads(j.params)["n"] for j in jobs) == ["a", "b", "c"]


@pytest.mark.timeout(120)
def test_progress_held_back_by_the_driver_is_in_the_jobs_and_written_by_a_cancel(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    """A node that only follows its job is written lazily: until then its job's
    row says it (a driver taking over reads it there), and a cancel writes it."""
    src = tmp_path / "source"
    src.mkdir()
    (src / "in.txt").write_text("in\n")
    wh.put([src], name="source")
    fns = {}
    for name, script in (("step.sh", STEP), ("slow.sh", "#!/bin/sh\nexec sleep 60\n")):
        fn = tmp_path / name.removesuffix(".sh")
        fn.mkdir()
        (fn / name).write_text(script)
        fns[name] = f"{wh.put([fn]).pdh}/{name}"
    text = (
        "workflow: quick-and-slow\n"
        "inputs:\n  source: {default: source}\n"
        "jobs:\n"
        f"  a: {{function: '{fns['step.sh']}', input: $source, params: {{n: a}}}}\n"
        f"  b: {{function: '{fns['slow.sh']}', input: $source, params: {{n: b}}}}\n"
    )
    run_id = start_run(wh, text, "wf.yml", {}).run.id
    # Progress written only with other writes (not even with a heartbeat).
    driver = Driver(wh, run_id, progress_every=3600.0, heartbeat_every=3600.0)
    assert driver.claim()
    driver.turn()  # a and b submitted: written with their jobs
    jobs = {n: driver.nodes[n].job_id for n in ("a", "b")}
    assert all(isinstance(j, int) for j in jobs.values())
    executor = LocalExecutor(Resources(2, 1 << 30))
    manager = Manager(wh, executor, "local")
    try:
        manager.refresh()
        deadline = time.monotonic() + 60
        while get_job(wh.engine, jobs["a"]).state != "complete":
            assert time.monotonic() < deadline, "job a never completed"
            manager.turn()
        driver.turn()  # follows a (complete) and b (running): nothing written
        assert driver.nodes["a"].state == "complete"
        held = {n.node: n for n in runstore.list_nodes(wh.engine, run_id)}
        assert held["a"].state in ("queued", "running") and held["a"].output_pdh is None
        # What a driver taking the run over would read: the job's row.
        a_job = get_job(wh.engine, jobs["a"])
        assert a_job.state == "complete" and a_job.output_pdh
        runstore.request_cancel(wh.engine, run_id)
        assert driver.turn()
        nodes = {n.node: n for n in runstore.list_nodes(wh.engine, run_id)}
        assert nodes["a"].state == "complete" and nodes["a"].output_pdh == a_job.output_pdh
        assert nodes["b"].state == "cancelled"
        assert runstore.get_run(wh.engine, run_id).state == "cancelled"
        manager.refresh()  # b's cancel: its step is killed
        while get_job(wh.engine, jobs["b"]).state != "cancelled":
            assert time.monotonic() < deadline, "job b was never cancelled"
            manager.turn()
    finally:
        manager.close()
        executor.close()


def _source_and_step(wh: EmbeddedWarehouse, tmp_path: Path) -> str:
    """Put the collection named ``source`` and the step script; the function."""
    src = tmp_path / "source"
    src.mkdir()
    (src / "in.txt").write_text("in\n")
    wh.put([src], name="source")
    fn = tmp_path / "fn"
    fn.mkdir()
    (fn / "step.sh").write_text(STEP)
    return f"{wh.put([fn]).pdh}/step.sh"


def _three_jobs(wh: EmbeddedWarehouse, tmp_path: Path) -> list[JobRecord]:
    function = _source_and_step(wh, tmp_path)
    requests = [(JobRequest(function, "source", {"n": f"j{i}"}), None) for i in range(3)]
    return submit_many(wh, requests)


@pytest.mark.timeout(120)
def test_jobs_a_manager_hands_over_are_written_as_told_and_run_once(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    """A workflow driven in the manager's process follows its jobs from what the
    manager hands over once their rows are written (reading nothing), and hands
    the manager the jobs it submits: those must be the rows, and each job runs once
    (a refresh finding a job taken up that way leaves it be)."""
    made = _three_jobs(wh, tmp_path)
    executor = LocalExecutor(Resources(2, 1 << 30))
    manager = Manager(wh, executor, "local")
    landed: list[dict[str, object]] = []
    manager.on_landed = landed.extend
    try:
        manager.take_up(made)
        deadline = time.monotonic() + 60
        while len(landed) < 3:
            assert time.monotonic() < deadline, "the jobs never finished"
            manager.turn()
            manager.refresh()
            for row in landed:  # in the catalog already, as told
                told = {k: v for k, v in row.items() if k != "output_manifest"}
                assert job_states(wh.engine, [int(row["id"])])[row["id"]] == told  # type: ignore[index]
    finally:
        manager.close()
        executor.close()
    assert sorted(int(r["id"]) for r in landed) == sorted(j.id for j in made)  # type: ignore[call-overload]
    for row in landed:
        assert row["state"] == "complete"
        output = row["output_manifest"]
        assert isinstance(output, Manifest) and output.pdh == row["output_pdh"]
        assert wh.manifest(str(row["output_pdh"])).files().keys() == output.files().keys()
        (step,) = list_steps(wh.engine, int(row["id"]))  # type: ignore[call-overload]
        assert step.attempts == 1, "run once"


@pytest.mark.timeout(120)
def test_turns_queued_while_the_writer_is_busy_go_in_one_transaction(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    """Batches handed to a busy writer (their blocks stored meanwhile) are written
    together, one commit, and the catalog ends as if each had been written in turn."""
    made = _three_jobs(wh, tmp_path)
    executor = LocalExecutor(Resources(1, 1 << 30))  # one at a time: a batch per job
    manager = Manager(wh, executor, "local")
    commits = 0

    def count(_conn: object) -> None:
        nonlocal commits
        commits += 1

    release = threading.Event()
    try:
        manager.take_up(made)
        manager._catalog.writer.submit(release.wait)  # the writer is busy until released
        deadline = time.monotonic() + 60
        while not all(manager.sched.jobs[j.id].state == "complete" for j in made):
            assert time.monotonic() < deadline, "the jobs never finished"
            manager.turn()
        assert manager.landing()
        manager._catalog.storer.submit(lambda: None).result()  # every batch's blocks are stored
        sa.event.listen(wh.engine, "commit", count)
        release.set()
        manager.flush(wait=True)
    finally:
        release.set()
        manager.close()
        executor.close()
    sa.event.remove(wh.engine, "commit", count)
    assert commits == 1, "every queued batch in one transaction"
    for job in made:
        row = get_job(wh.engine, job.id)
        assert row.state == "complete" and row.steps_done == 1 and row.output_pdh
        assert row.log_pdh and wh.manifest(row.log_pdh).files()
        (step,) = list_steps(wh.engine, job.id)
        assert step.state == "done" and step.attempts == 1 and step.output
        assert wh.manifest(row.output_pdh).files().keys() == {f"{json.loads(job.params)['n']}.done"}
