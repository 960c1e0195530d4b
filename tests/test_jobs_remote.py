"""Jobs through the API: a controller (in this process) runs the manager in its
thread over real keep server processes; steps are real subprocesses that reach
the controller with WH_URL and a token made for the job."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import waiting
from cluster import Controller, KeepPool, controller
from conftest import Runner
from jobs_helpers import make_compressed, make_text, run_job
from warehouse.catalog.schema import tokens
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs.builtins.zhash import decompressed
from warehouse.remote.warehouse import RemoteWarehouse

ALWAYS_FAILS = """#!/bin/sh
echo "boom: something is wrong with $WH_STEP_INPUT" >&2
exit 7
"""

# Each run's steps sleep for a length of their own (``sleep 300.NNNN``), by
# which the test finds their processes on this machine (sandboxed or under
# Slurm, they are this machine's processes too).
SLEEPS = """#!/bin/sh
if [ "$WH_STEP" = 0 ]; then wh step queue --level 1 a b c d; exit 0; fi
sleep {seconds}
"""


@pytest.fixture
def ctl(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    keep_servers: KeepPool,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Controller]:
    # The local executor unless a test asks for another (indirect parameter).
    executor = getattr(request, "param", "local")
    if executor == "slurm":
        request.getfixturevalue("slurm_cluster")
    with controller(tmp_path / "controller.db", keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", executor, cpus=4)
        monkeypatch.setenv("WH_URL", c.url)
        monkeypatch.setenv("WH_TOKEN", c.user("alice"))
        monkeypatch.setenv("WH_HOME", str(tmp_path / "unused-home"))
        yield c


@pytest.fixture
def remote(ctl: Controller) -> Iterator[RemoteWarehouse]:
    with RemoteWarehouse(ctl.url, ctl.user("bob")) as wh:
        yield wh


def submitted(run: Runner, *args: str, code: int = 0) -> dict[str, object]:
    out = run("job", "submit", *args, "--json", code=code).output
    value = json.loads(out[out.index("{") : out.rindex("}") + 1])  # stderr may be mixed in
    assert isinstance(value, dict)
    return value


def zhash_oracle(root: Path, algorithm: str) -> dict[str, str]:
    """``<dir>/<algorithm>sum.txt`` → its text, by hashlib over the files themselves."""
    listings: dict[str, str] = {}
    for d in sorted({p.parent for p in root.rglob("*") if p.is_file()}):
        lines = []
        for f in sorted(p for p in d.iterdir() if p.is_file()):
            h = hashlib.new(algorithm)
            for data in decompressed([f.read_bytes()]):
                h.update(data)
            lines.append(f"{h.hexdigest()}  {f.name}\n")
        rel = d.relative_to(root).as_posix()
        listings[("" if rel == "." else rel + "/") + f"{algorithm}sum.txt"] = "".join(lines)
    return listings


def test_zhash_through_the_api_matches_an_oracle_reuses_and_equals_embedded(
    ctl: Controller, run: Runner, tmp_path: Path, remote: RemoteWarehouse
) -> None:
    tree = make_compressed(tmp_path / "in")
    run("put", str(tree), "--name", "compressed")
    job = submitted(
        run, "builtin:zhash", "--input", "compressed", "--param", "algorithm=sha256", "--wait"
    )
    assert job["state"] == "complete" and job["submitted_by"] == "alice"
    output = str(job["output_pdh"])
    reader = remote.reader(output)
    got = {path: reader.read_file(path).decode() for path in reader.files}
    assert got == zhash_oracle(tree, "sha256")
    # An identical job is answered from reuse, by the controller, with no step run.
    again = submitted(run, "builtin:zhash", "--input", "compressed", "--param", "algorithm=sha256")
    assert (again["reused_from"], again["output_pdh"]) == (job["id"], output)
    assert f"reused from {job['id']}" in run("job", "show", str(again["id"])).output
    assert "\tcomplete\t" in run("job", "ls").output
    assert "== step 1" in run("job", "logs", str(job["id"])).output
    assert f"job {job['id']}: complete" in run("job", "watch", str(job["id"])).output
    # The same function over the same input gives the same PDH embedded.
    with EmbeddedWarehouse(tmp_path / "embedded") as wh:
        key = wh.put([tree]).pdh
        assert key == job["input_pdh"]
        embedded = run_job(wh, "builtin:zhash", key, params={"algorithm": "sha256"})
    assert embedded.output_pdh == output
    # Steps held a token for the submitter, made for the job and revoked when
    # it ended (tests/test_security_tokens.py tries to use one).
    query = sa.select(tokens.c.label, tokens.c.expires_at).where(tokens.c.user == "alice")
    with ctl.state.engine.connect() as conn:
        made = {r.label: r.expires_at for r in conn.execute(query)}
    assert f"job {job['id']}" not in made


def test_wordcount_reads_intermediates_through_the_api(
    ctl: Controller, run: Runner, tmp_path: Path
) -> None:
    tree = make_text(tmp_path / "in")
    key = run("put", str(tree)).output.split()[-1]
    job = submitted(run, "builtin:wordcount", "--input", key, "--param", "partitions=2", "--wait")
    with EmbeddedWarehouse(tmp_path / "embedded") as wh:
        embedded = run_job(wh, "builtin:wordcount", wh.put([tree]).pdh, params={"partitions": 2})
    assert job["output_pdh"] == embedded.output_pdh


def test_a_failing_step_fails_the_job_and_show_tells_why(
    ctl: Controller, run: Runner, tmp_path: Path
) -> None:
    fn = tmp_path / "fn"
    fn.mkdir()
    (fn / "fails.sh").write_text(ALWAYS_FAILS)
    fn_pdh = run("put", str(fn)).output.split()[-1]
    key = run("put", str(make_text(tmp_path / "in"))).output.split()[-1]
    job = submitted(run, f"{fn_pdh}/fails.sh", "--input", key, "--attempts", "2", "--wait", code=1)
    assert job["state"] == "failed" and job["output_pdh"] is None
    shown = run("job", "show", str(job["id"])).output
    assert "step 0 (level 0" in shown
    assert "exit status 7" in shown
    assert "boom: something is wrong" in shown
    data = json.loads(run("job", "show", str(job["id"]), "--json").output)
    assert data["failed_steps"][0]["exit_status"] == 7
    assert "boom" in run("job", "logs", str(job["id"]), "--step", "0").output


def wait_for(
    run: Runner, job_id: object, test: Callable[[dict[str, Any]], bool], timeout: float = 60.0
) -> dict[str, Any]:
    """`wh job show --json` once ``test`` holds for it (or fail after ``timeout``)."""
    deadline = time.time() + timeout
    while True:
        data: dict[str, Any] = json.loads(run("job", "show", str(job_id), "--json").output)
        if test(data) or time.time() > deadline:
            assert test(data), data
            return data
        time.sleep(0.1)


@pytest.mark.parametrize("ctl", ["local", "slurm"], indirect=True)
def test_pause_resume_and_cancel(
    ctl: Controller, run: Runner, tmp_path: Path, remote: RemoteWarehouse
) -> None:
    fn = tmp_path / "fn"
    fn.mkdir()
    seconds = f"300.{os.getpid()}{time.monotonic_ns() % 10**6}"
    (fn / "sleeps.sh").write_text(SLEEPS.format(seconds=seconds))
    fn_pdh = run("put", str(fn)).output.split()[-1]
    key = run("put", str(make_text(tmp_path / "in"))).output.split()[-1]
    job = submitted(run, f"{fn_pdh}/sleeps.sh", "--input", key)
    wait_for(run, job["id"], lambda j: j["steps_running"] >= 1 and j["steps_done"] == 1)
    with pytest.raises(Exception, match="submitted by alice"):
        remote.api.post(f"/jobs/{job['id']}/control", {"control": "cancel"})
    assert "pause requested" in run("job", "pause", str(job["id"])).output
    wait_for(run, job["id"], lambda j: j["state"] == "paused")
    run("job", "resume", str(job["id"]))
    wait_for(run, job["id"], lambda j: j["state"] == "running")
    waiting.wait_for(
        lambda: waiting.processes(seconds, program="sleep"), "a step of the resumed job running"
    )
    run("job", "cancel", str(job["id"]))
    # The steps sleep far longer than these waits: a cancel that waited for
    # them, or only marked them stopped, fails here however slow the machine.
    done = wait_for(run, job["id"], lambda j: j["state"] == "cancelled" and j["steps_running"] == 0)
    assert done["output_pdh"] is None
    waiting.wait_for(
        lambda: not waiting.processes(seconds, program="sleep"), "the cancelled job's step to end"
    )
    run("job", "cancel", str(job["id"]), code=2)  # already finished
    # Neither a reason nor a failed step: no empty ": " after the state.
    err = run("job", "watch", str(job["id"]), code=1).stderr
    assert err.splitlines()[-1] == f"Error: job {job['id']} cancelled", err
