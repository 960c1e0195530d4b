"""A CWL run is a workflow run: `wh workflow ls|show|cancel` and the run page
show it, `--name-outputs` names its outputs, and `wh lineage` of an output
reaches the CWL file, the tools and the inputs (docs/cwl.md, "The run")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from conftest import Runner
from cwl_helpers import (
    SORT,
    cwltool_installed,  # noqa: F401 (autouse fixture)
)
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs.jobstore import list_jobs

BIN = Path(sys.executable).parent


# Two tools from their own file, one reading the other's output, and an int output.
PIPELINE = """\
cwlVersion: v1.2
class: Workflow
requirements: {InlineJavascriptRequirement: {}}
inputs:
  f: File
outputs:
  sorted: {type: File, outputSource: sort/sorted}
  counted: {type: File, outputSource: count/out}
  lines: {type: int, outputSource: count/n}
steps:
  sort:
    run: tools/sort.cwl
    in: {f: f}
    out: [sorted]
  count:
    run:
      class: CommandLineTool
      baseCommand: [wc, -l]
      inputs:
        f: File
      stdin: $(inputs.f.path)
      stdout: count.txt
      outputs:
        out: {type: stdout}
        n:
          type: int
          outputBinding:
            {glob: count.txt, loadContents: true, outputEval: "$(parseInt(self[0].contents))"}
    in: {f: sort/sorted}
    out: [out, n]
"""


def _pipeline(d: Path) -> tuple[Path, Path]:
    (d / "tools").mkdir()
    (d / "tools" / "sort.cwl").write_text(SORT)
    (d / "pipeline.cwl").write_text(PIPELINE)
    (d / "in.txt").write_text("c\na\nb\n")
    (d / "job.yml").write_text("f: {class: File, location: in.txt}\n")
    return d / "pipeline.cwl", d / "job.yml"


def test_a_cwl_run_is_a_workflow_run_with_named_outputs_and_lineage(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    wf, job = _pipeline(tmp_path)
    res = run("cwl", "run", str(wf), str(job), "--name-outputs", "p1")
    assert "2 jobs: 2 ran, 0 reused" in res.stderr
    (listed,) = json.loads(run("workflow", "ls", "--json").stdout)
    assert listed["workflow"] == "pipeline.cwl" and listed["state"] == "complete"
    shown = json.loads(run("workflow", "show", str(listed["id"]), "--json").stdout)
    nodes = {n["node"]: n for n in shown["nodes"]}
    assert set(nodes) == {"sort", "count"}
    assert nodes["count"]["depends_on"] == '["sort"]' and nodes["sort"]["depends_on"] == "[]"
    assert all(n["state"] == "complete" and n["job_id"] for n in nodes.values())
    # The inputs as recorded name the file by its collection.
    assert shown["inputs"]["f"]["location"].startswith("keep:")
    # Outputs holding files are named PREFIX.OUTPUT; an int is not a collection.
    outputs = shown["outputs"]
    assert set(outputs) == {"sorted", "counted"}
    with EmbeddedWarehouse(home) as wh:
        assert wh.resolve("p1.sorted") == outputs["sorted"]
        assert wh.reader("p1.sorted").read_file("sorted.txt") == b"a\nb\nc\n"
        assert wh.reader("p1.counted").read_file("count.txt").strip() == b"3"
        # The run's file holds both CWL files, at their paths.
        assert set(wh.manifest(listed["file_pdh"]).files()) == {"pipeline.cwl", "tools/sort.cwl"}
        put = wh.put([tmp_path / "in.txt"]).pdh  # the same bytes: the input's collection
        jobs = list_jobs(wh.engine)
    graph = json.loads(run("lineage", "p1.counted", "--json").stdout)
    kinds = {c["pdh"]: c["kinds"] for c in graph["collections"]}
    assert kinds[listed["file_pdh"]] == ["workflow file"]
    assert kinds[put] == ["put"]  # the input, through the staged input collections
    assert {j["id"] for j in graph["jobs"]} == {j.id for j in jobs}  # both tools
    roles = {(e["from"], e["role"]) for e in graph["edges"]}
    assert (f"collection:{listed['file_pdh']}", "workflow file") in roles
    # A re-run is a second run of the same file, every node answered from reuse.
    again = run("cwl", "run", str(wf), str(job), "--name-outputs", "p1")
    assert "0 ran, 2 reused (0 steps run)" in again.stderr
    second = json.loads(run("workflow", "show", "2", "--json").stdout)
    assert second["file_pdh"] == listed["file_pdh"] and second["outputs"] == shown["outputs"]
    assert all(n["reused"] for n in second["nodes"])


def test_the_run_page_shows_a_cwl_run(run: Runner, home: Path, tmp_path: Path) -> None:
    wf, job = _pipeline(tmp_path)
    run("cwl", "run", str(wf), str(job))
    env = {**os.environ, "WH_HOME": str(home)}
    env.pop("WH_URL", None)
    proc = subprocess.Popen(
        [str(BIN / "wh"), "web", "--listen", "127.0.0.1:0"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1].removesuffix("/web/")
        token = proc.stdout.readline().split()[-1]
        with httpx.Client(base_url=url, timeout=30) as web:
            signed = web.post("/web/signin", data={"token": token, "next": "/web/jobs"})
            assert signed.status_code == 303, signed.text
            page = web.get("/web/workflows/1")
            listed = web.get("/web/workflows").text
    finally:
        proc.terminate()
        proc.wait(15)
        if proc.stdout:
            proc.stdout.close()
    assert page.status_code == 200 and "pipeline.cwl" in page.text
    assert ">sort<" in page.text and ">count<" in page.text, page.text[:3000]
    assert "pipeline.cwl" in listed


def test_a_bad_prefix_is_refused_and_records_nothing(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    wf, job = _pipeline(tmp_path)
    res = run("cwl", "run", str(wf), str(job), "--name-outputs", "no space", code=2)
    assert res.stderr.startswith("Error: --name-outputs: bad name 'no space'")
    # Within 255 itself, but PREFIX.counted is longer: said before anything runs.
    res = run("cwl", "run", str(wf), str(job), "--name-outputs", "p" * 250, code=2)
    (line,) = [ln for ln in res.stderr.splitlines() if ln.startswith("Error:")]
    assert "PREFIX.OUTPUT holds at most 255" in line and "Traceback" not in res.stderr
    assert json.loads(run("workflow", "ls", "--json").stdout) == []
    with EmbeddedWarehouse(home) as wh:
        assert list_jobs(wh.engine) == []


def test_a_failed_tool_fails_the_run_and_names_its_job(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    tool = tmp_path / "fail.cwl"
    tool.write_text(
        "cwlVersion: v1.2\nclass: CommandLineTool\nbaseCommand: [sh, -c, 'exit 3']\n"
        "inputs: []\noutputs: []\n"
    )
    run("cwl", "run", str(tool), "--name-outputs", "f1", code=1)
    (listed,) = json.loads(run("workflow", "ls", "--json").stdout)
    assert listed["state"] == "failed"
    shown = json.loads(run("workflow", "show", str(listed["id"]), "--json").stdout)
    assert shown["error"].startswith(f"job {shown['nodes'][0]['job_id']} failed")
    assert shown["nodes"][0]["state"] == "failed"


def test_wh_workflow_cancel_stops_a_cwl_run(home: Path, tmp_path: Path) -> None:
    tool = tmp_path / "slow.cwl"
    tool.write_text(
        "cwlVersion: v1.2\nclass: CommandLineTool\nbaseCommand: [sleep, '300']\n"
        "inputs: []\noutputs: []\n"
    )
    env = {**os.environ, "WH_HOME": str(home)}
    wh_bin = str(BIN / "wh")
    proc = subprocess.Popen(
        [wh_bin, "cwl", "run", str(tool)], env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while True:  # until its node's job runs
            shown = subprocess.run(
                [wh_bin, "workflow", "show", "1", "--json"], env=env, capture_output=True, text=True
            )
            if shown.returncode == 0 and '"state": "running"' in shown.stdout.split('"nodes"')[-1]:
                break
            assert time.monotonic() < deadline, shown.stdout + shown.stderr
            time.sleep(0.2)
        done = subprocess.run(
            [wh_bin, "workflow", "cancel", "1"], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    final = json.loads(
        subprocess.run(
            [wh_bin, "workflow", "show", "1", "--json"], env=env, capture_output=True, text=True
        ).stdout
    )
    assert final["state"] == "cancelled" and final["nodes"][0]["state"] == "cancelled"


def test_the_same_tools_moved_elsewhere_are_the_same_jobs(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    first, second = tmp_path / "a", tmp_path / "elsewhere" / "b"
    first.mkdir()
    second.mkdir(parents=True)
    wf, job = _pipeline(first)
    assert "2 ran, 0 reused" in run("cwl", "run", str(wf), str(job)).stderr
    # The same files copied to another directory: a tool from its own file
    # and an inline one (cwltool gives it a random id) are both the same jobs.
    moved, moved_job = _pipeline(second)
    again = run("cwl", "run", str(moved), str(moved_job))
    assert "wh cwl: 2 jobs: 0 ran, 2 reused (0 steps run)" in again.stderr
    with EmbeddedWarehouse(home) as wh:
        jobs = list_jobs(wh.engine)
        assert len({j.function_pdh for j in jobs}) == 2
        tool = wh.reader(jobs[0].function_pdh).read_file("tool.cwl.json").decode()
        assert str(tmp_path) not in tool and "sort.cwl" in tool
    # A changed tool is another function.
    (second / "tools" / "sort.cwl").write_text(SORT.replace("[sort]", "[sort, -r]"))
    assert "2 ran, 0 reused" in run("cwl", "run", str(moved), str(moved_job)).stderr
