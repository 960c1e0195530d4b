"""`wh cwl run` through a controller: each tool invocation a job of the
controller's, its step run by the controller's executor in its sandbox, and
what a user may read applies to the inputs (docs/cwl.md, "Through a
controller")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import Controller, KeepPool, controller
from cwl_helpers import cwltool_installed  # noqa: F401 (autouse fixture)
from permission_helpers import api_as, wh_as
from test_cwl_runs import _pipeline
from warehouse import catalog
from warehouse.catalog.auth import JOB_TOKEN_LABEL
from warehouse.jobs.jobstore import list_jobs
from warehouse.workflows import runstore


@pytest.fixture
def ctl(tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(tmp_path / "controller.db", keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=2)
        yield c


# The step's view of the machine: in the controller's sandbox it sees neither
# the controller's catalog nor the user's home.
TOOL = """\
cwlVersion: v1.2
class: CommandLineTool
baseCommand: [sh, -c, 'sort "$0"; test -e "$1" && echo catalog seen || echo no catalog']
inputs:
  f: {type: File, inputBinding: {position: 1}}
  catalog: {type: string, inputBinding: {position: 2}}
stdout: sorted.txt
outputs:
  sorted: {type: stdout}
"""


def test_a_cwl_run_through_a_controller_runs_sandboxed_jobs_of_the_user(
    ctl: Controller, tmp_path: Path
) -> None:
    alice, bob = ctl.user("alice"), ctl.user("bob")
    tool = tmp_path / "sort.cwl"
    tool.write_text(TOOL)
    (tmp_path / "in.txt").write_text("b\nc\na\n")
    catalog_file = str(tmp_path / "controller.db")
    job = tmp_path / "job.yml"
    job.write_text(f"f: {{class: File, location: in.txt}}\ncatalog: '{catalog_file}'\n")
    res = wh_as(ctl, alice, "cwl", "run", str(tool), str(job), "--json", "--name-outputs", "s1")
    assert "wh cwl: 1 job: 1 ran, 0 reused" in res.stderr
    out = json.loads(res.stdout)["sorted"]["location"]
    assert wh_as(ctl, alice, "cat", out.removeprefix("keep:")).output == "a\nb\nc\nno catalog\n"
    assert wh_as(ctl, alice, "cat", "s1.sorted/sorted.txt").output == "a\nb\nc\nno catalog\n"
    (made,) = list_jobs(ctl.state.engine)
    assert made.submitted_by == "alice" and made.state == "complete"
    # Again: the controller's reuse, no step run.
    again = wh_as(ctl, alice, "cwl", "run", str(tool), str(job))
    assert "wh cwl: 1 job: 0 ran, 1 reused (0 steps run)" in again.stderr
    # In private mode bob may not name alice's input: refused as a missing
    # collection would be, and no job of his is made.
    wh_as(ctl, ctl.admin_token, "perms-mode", "private")
    pdh = wh_as(ctl, alice, "put", str(tmp_path / "in.txt")).output.split()[-1]
    theirs = tmp_path / "bob.yml"
    theirs.write_text(f"f: {{class: File, location: 'keep:{pdh}/in.txt'}}\ncatalog: x\n")
    refused = wh_as(ctl, bob, "cwl", "run", str(tool), str(theirs), code=4)
    assert refused.stderr == f"Error: no collection {pdh}\n"
    missing = "0" * 32 + "+1"
    nothing = tmp_path / "nothing.yml"
    nothing.write_text(f"f: {{class: File, location: 'keep:{missing}/in.txt'}}\ncatalog: x\n")
    said = wh_as(ctl, bob, "cwl", "run", str(tool), str(nothing), code=4).stderr
    assert said == f"Error: no collection {missing}\n"  # worded alike: hidden is missing
    assert [j.submitted_by for j in list_jobs(ctl.state.engine)] == ["alice", "alice"]
    # Once she shares it, he may.
    wh_as(ctl, alice, "share", pdh, "bob")
    shared = wh_as(ctl, bob, "cwl", "run", str(tool), str(theirs), "--json")
    assert json.loads(shared.stdout)["sorted"]["location"].startswith("keep:")


@pytest.fixture
def ctl_db(catalog_url: str, tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    """A controller over a fresh catalog on SQLite or PostgreSQL."""
    with controller(catalog_url, keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=2)
        yield c


def test_a_cwl_run_through_a_controller_is_a_workflow_run_with_lineage(
    ctl_db: Controller, tmp_path: Path
) -> None:
    """The same records the embedded run makes, written through the
    controller's API as the user: `wh workflow ls|show`, the run page and
    `wh lineage` of an output reaching the CWL files and the inputs."""
    ctl = ctl_db
    alice = ctl.user("alice")
    wf, job = _pipeline(tmp_path)
    res = wh_as(ctl, alice, "cwl", "run", str(wf), str(job), "--name-outputs", "p1")
    assert "2 jobs: 2 ran, 0 reused" in res.stderr
    (listed,) = json.loads(wh_as(ctl, alice, "workflow", "ls", "--json").stdout)
    assert listed["workflow"] == "pipeline.cwl" and listed["state"] == "complete"
    assert listed["owner"] == "alice" and listed["driver"].startswith("cwl ")
    shown = json.loads(wh_as(ctl, alice, "workflow", "show", str(listed["id"]), "--json").stdout)
    nodes = {n["node"]: n for n in shown["nodes"]}
    assert set(nodes) == {"sort", "count"}
    assert nodes["count"]["depends_on"] == '["sort"]' and nodes["sort"]["depends_on"] == "[]"
    made = {j.id: j for j in list_jobs(ctl.state.engine)}
    for n in nodes.values():
        j = made[n["job_id"]]
        assert n["state"] == "complete" and j.submitted_by == "alice"
        assert (n["input_pdh"], n["output_pdh"]) == (j.input_pdh, j.output_pdh)
    assert shown["inputs"]["f"]["location"].startswith("keep:")
    assert set(shown["outputs"]) == {"sorted", "counted"}
    assert wh_as(ctl, alice, "cat", "p1.sorted/sorted.txt").output == "a\nb\nc\n"
    files = wh_as(ctl, alice, "ls", listed["file_pdh"]).output.split()
    assert set(files) == {"pipeline.cwl", "tools/sort.cwl"}
    put = wh_as(ctl, alice, "put", str(tmp_path / "in.txt")).output.split()[-1]
    graph = json.loads(wh_as(ctl, alice, "lineage", "p1.counted", "--json").stdout)
    kinds = {c["pdh"]: c["kinds"] for c in graph["collections"]}
    assert kinds[listed["file_pdh"]] == ["workflow file"]
    assert kinds[put] == ["put"]  # the input, through the staged input collections
    assert {j["id"] for j in graph["jobs"]} == set(made)
    # The run pages list it.
    with api_as(ctl, alice) as web:
        signed = web.post("/web/signin", data={"token": alice, "next": "/web/jobs"})
        assert signed.status_code == 303, signed.text
        page = web.get(f"/web/workflows/{listed['id']}")
        assert page.status_code == 200 and ">sort<" in page.text and ">count<" in page.text
        assert "pipeline.cwl" in web.get("/web/workflows").text
    # A re-run: a second run, every node answered from reuse.
    again = wh_as(ctl, alice, "cwl", "run", str(wf), str(job), "--name-outputs", "p1")
    assert "0 ran, 2 reused (0 steps run)" in again.stderr
    second = json.loads(
        wh_as(ctl, alice, "workflow", "show", str(listed["id"] + 1), "--json").stdout
    )
    assert second["outputs"] == shown["outputs"] and all(n["reused"] for n in second["nodes"])


def test_the_cwl_run_api_checks_what_the_caller_may_read_and_write(
    ctl_db: Controller, tmp_path: Path
) -> None:
    ctl = ctl_db
    alice, bob = ctl.user("alice"), ctl.user("bob")
    wf, job = _pipeline(tmp_path)
    wh_as(ctl, alice, "cwl", "run", str(wf), str(job), "--name-outputs", "p1")
    wh_as(ctl, ctl.admin_token, "perms-mode", "private")
    run = json.loads(wh_as(ctl, alice, "workflow", "show", "1", "--json").stdout)
    theirs = run["inputs"]["f"]["location"].removeprefix("keep:").split("/")[0]
    their_job = run["nodes"][0]["job_id"]
    (tmp_path / "b1").write_text("b1\n")
    (tmp_path / "b2").write_text("b2\n")
    mine = wh_as(ctl, bob, "put", str(tmp_path / "b1")).output.split()[-1]
    other = wh_as(ctl, bob, "put", str(tmp_path / "b2"), "--name", "b2").output.split()[-1]
    start = {"workflow": "x.cwl", "file_pdh": mine, "inputs": {}, "runner": "h:1"}
    with api_as(ctl, bob) as api:
        # An input, or the file, bob may not read: refused as a missing one.
        f = {"class": "File", "location": f"keep:{theirs}/in.txt"}
        refused = api.post("/api/v1/cwl-runs", json={**start, "inputs": {"f": f}})
        assert refused.status_code == 404 and theirs in refused.text
        assert api.post("/api/v1/cwl-runs", json={**start, "file_pdh": theirs}).status_code == 404
        # Alice's run is not his to see nor write.
        writes: tuple[tuple[str, dict[str, Any] | None], ...] = (
            ("nodes", {"nodes": []}),
            ("heartbeat", None),
            ("finish", {"state": "failed"}),
            ("parts", {"pdh": mine, "parts": [["b1", mine]]}),
        )
        for path, body in writes:
            said = api.post(f"/api/v1/cwl-runs/1/{path}", json=body)
            assert said.status_code == 404 and "no workflow run 1" in said.text, (path, said.text)
        # PDHs only: a name recorded would move under the run.
        named = api.post("/api/v1/cwl-runs", json={**start, "file_pdh": "b2"})
        assert named.status_code == 400 and "not a portable data hash" in named.text
        made = api.post("/api/v1/cwl-runs", json=start)
        assert made.status_code == 200, made.text
        run_id = made.json()["id"]
        node = {"node": "n", "function": "t.cwl", "job_id": their_job}
        said = api.post(f"/api/v1/cwl-runs/{run_id}/nodes", json={"nodes": [node]})
        assert said.status_code == 404 and f"no job {their_job}" in said.text
        # Lineage: no part he may not read, and no part the collection does not hold.
        parts = api.post(
            f"/api/v1/cwl-runs/{run_id}/parts", json={"pdh": mine, "parts": [["b1", theirs]]}
        )
        assert parts.status_code == 404, parts.text
        forged = api.post(
            f"/api/v1/cwl-runs/{run_id}/parts", json={"pdh": mine, "parts": [["b1", other]]}
        )
        assert forged.status_code == 400 and "holds no data" in forged.text
        held = api.post(
            f"/api/v1/cwl-runs/{run_id}/parts", json={"pdh": other, "parts": [["b2", other]]}
        )
        assert held.status_code == 200, held.text
        outputs = {"state": "complete", "outputs": {"o": theirs}}
        said = api.post(f"/api/v1/cwl-runs/{run_id}/finish", json=outputs)
        assert said.status_code == 404
        assert api.get(f"/api/v1/workflows/{run_id}").json()["state"] == "running"
    assert runstore.parts_of(ctl.state.engine, mine) == []
    assert [r.owner for r in runstore.list_runs(ctl.state.engine)] == ["bob", "alice"]
    # A job's token cannot start one (its job would outlive it).
    token = catalog.create_token(ctl.state.engine, "alice", label=JOB_TOKEN_LABEL + "7")
    with api_as(ctl, token) as api:
        assert api.post("/api/v1/cwl-runs", json=start).status_code == 403


def test_wh_workflow_cancel_stops_a_cwl_run_through_a_controller(
    ctl: Controller, tmp_path: Path
) -> None:
    alice = ctl.user("alice")
    tool = tmp_path / "slow.cwl"
    tool.write_text(
        "cwlVersion: v1.2\nclass: CommandLineTool\nbaseCommand: [sleep, '300']\n"
        "inputs: []\noutputs: []\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    env.update(WH_URL=ctl.url, WH_TOKEN=alice)
    wh_bin = str(Path(sys.executable).parent / "wh")
    proc = subprocess.Popen(
        [wh_bin, "cwl", "run", str(tool)], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while True:  # until its node's job runs
            shown = wh_as(ctl, alice, "workflow", "ls", "--json").stdout
            runs = json.loads(shown)
            if runs:
                view = json.loads(wh_as(ctl, alice, "workflow", "show", "1", "--json").stdout)
                if [n["state"] for n in view["nodes"]] == ["running"]:
                    break
            assert time.monotonic() < deadline, shown
            time.sleep(0.2)
        wh_as(ctl, alice, "workflow", "cancel", "1")
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 1, err
    final = json.loads(wh_as(ctl, alice, "workflow", "show", "1", "--json").stdout)
    assert final["state"] == "cancelled" and final["nodes"][0]["state"] == "cancelled"
    (job,) = list_jobs(ctl.state.engine)
    assert job.state == "cancelled"
