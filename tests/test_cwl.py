"""CWL on the warehouse: `wh cwl run` and `wh-cwl-runner` over real CWL documents,
each tool invocation a real job, and the `required` tests of the CWL v1.2
conformance suite driven by cwltest (docs/cwl.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cwl_helpers import (
    SORT,
    cwltool_installed,  # noqa: F401 (autouse fixture)
    need,
)
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs.jobstore import list_jobs
from warehouse.workflows.runstore import list_runs

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SUITE = Path(os.environ.get("WH_CWL_CONFORMANCE", ROOT.parent / "shared" / "cwl-v1.2"))


# A two-step workflow: a scatter of a tool over words, then an ExpressionTool
# and a tool reading every file the scatter made.
WORKFLOW = """\
cwlVersion: v1.2
class: Workflow
requirements:
  ScatterFeatureRequirement: {}
  InlineJavascriptRequirement: {}
inputs:
  words: string[]
outputs:
  joined: {type: File, outputSource: join/out}
  count: {type: int, outputSource: count/n}
steps:
  echo:
    run:
      class: CommandLineTool
      baseCommand: echo
      inputs:
        w: {type: string, inputBinding: {position: 1}}
      stdout: $(inputs.w).txt
      outputs:
        out: {type: stdout}
    scatter: w
    in: {w: words}
    out: [out]
  count:
    run:
      class: ExpressionTool
      requirements: {InlineJavascriptRequirement: {}}
      inputs:
        files: File[]
      outputs:
        n: int
      expression: "$({n: inputs.files.length})"
    in: {files: echo/out}
    out: [n]
  join:
    run:
      class: CommandLineTool
      baseCommand: cat
      inputs:
        files: {type: "File[]", inputBinding: {position: 1}}
      stdout: joined.txt
      outputs:
        out: {type: stdout}
    in: {files: echo/out}
    out: [out]
"""


def _write(d: Path, name: str, text: str) -> Path:
    (d / name).write_text(text)
    return d / name


def _keep(location: str) -> tuple[str, str]:
    assert location.startswith("keep:"), location
    pdh, _, path = location.removeprefix("keep:").partition("/")
    return pdh, path


def test_a_tool_is_a_job_and_the_same_tool_on_the_same_input_is_reused(
    run, home: Path, tmp_path: Path
) -> None:
    tool = _write(tmp_path, "sort.cwl", SORT)
    _write(tmp_path, "in.txt", "b\nc\na\n")
    job = _write(tmp_path, "job.yml", "f: {class: File, location: in.txt}\n")
    first = run("cwl", "run", str(tool), str(job), "--json")
    out = json.loads(first.stdout)["sorted"]
    pdh, path = _keep(out["location"])
    assert "path" not in out  # no --outdir: the files are only in the warehouse
    assert "1 ran, 0 reused" in first.stderr
    with EmbeddedWarehouse(home) as wh:
        assert wh.reader(pdh).read_file(path) == b"a\nb\nc\n"
        (ran,) = list_jobs(wh.engine)
        # The function holds the tool document; the input, the staged file.
        assert {"cwlstep.py", "tool.cwl.json"} <= set(wh.manifest(ran.function_pdh).files())
        assert list(wh.manifest(ran.input_pdh).files()) == ["stage/stg0/in.txt"]
        assert ran.steps_done == 1
    again = run("cwl", "run", str(tool), str(job))
    assert again.stdout == f"sorted: keep:{pdh}/{path}\n"
    assert "wh cwl: 1 job: 0 ran, 1 reused (0 steps run)" in again.stderr
    # The same job in another run (its job file has one more, unused, value):
    # not the same run, but the same job, answered by the earlier one.
    other = _write(tmp_path, "other.yml", "f: {class: File, location: in.txt}\nunused: 1\n")
    third = run("cwl", "run", str(tool), str(other))
    assert third.stdout == f"sorted: keep:{pdh}/{path}\n"
    assert "wh cwl: 1 job: 0 ran, 1 reused (0 steps run)\n" in third.stderr
    with EmbeddedWarehouse(home) as wh:
        second = list_jobs(wh.engine)[-1]
        assert second.reused_from == ran.id and second.output_pdh == ran.output_pdh
    # A changed input is another job.
    _write(tmp_path, "in.txt", "z\ny\n")
    changed = run("cwl", "run", str(tool), str(job), "--json")
    assert "1 ran, 0 reused" in changed.stderr
    assert _keep(json.loads(changed.stdout)["sorted"]["location"])[0] != pdh


def test_a_workflow_with_a_scatter_and_an_expression_tool_through_wh_cwl_runner(
    home: Path, tmp_path: Path
) -> None:
    wf = _write(tmp_path, "wf.cwl", WORKFLOW)
    job = _write(tmp_path, "job.json", json.dumps({"words": ["one", "two", "three"]}))
    outdir = tmp_path / "out"
    done = subprocess.run(
        [str(BIN / "wh-cwl-runner"), "--quiet", "--outdir", str(outdir), str(wf), str(job)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["count"] == 3
    joined = result["joined"]
    assert (outdir / "joined.txt").read_text() == "one\ntwo\nthree\n"
    assert joined["path"] == str(outdir / "joined.txt")
    pdh, path = _keep(joined["location"])
    with EmbeddedWarehouse(home) as wh:
        assert wh.reader(pdh).read_file(path) == b"one\ntwo\nthree\n"
        # 3 echo jobs and the cat job; the ExpressionTool ran in the runner.
        made = list_jobs(wh.engine)
        assert len(made) == 4 and all(j.state == "complete" for j in made)
        # The cat job read the scatter's outputs by their blocks: no new put.
        cat = made[-1]
        staged = wh.manifest(cat.input_pdh).files()
        assert sorted(p.rsplit("/", 1)[-1] for p in staged) == ["one.txt", "three.txt", "two.txt"]


def test_what_cwltool_answers_alone_is_printed_as_it_is(home: Path, tmp_path: Path) -> None:
    # --version, --validate and --print-dot run nothing: their text is not an
    # output object, and no run is recorded.
    tool = _write(tmp_path, "sort.cwl", SORT)
    wf = _write(tmp_path, "wf.cwl", WORKFLOW)
    runner = str(BIN / "wh-cwl-runner")
    for argv, said in (
        (["--version"], "wh-cwl-runner"),
        (["--validate", str(tool)], "is valid CWL"),
        (["--print-dot", str(wf)], "digraph"),
    ):
        done = subprocess.run([runner, *argv], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert said in done.stdout and "Traceback" not in done.stderr
    with EmbeddedWarehouse(home) as wh:
        assert list_runs(wh.engine) == []


def test_keep_and_name_locations_are_read_from_the_warehouse(
    run, home: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.txt").write_text("3\n1\n2\n")
    pdh = run("put", str(data), "--name", "numbers").stdout.strip().split()[-1]
    tool = _write(tmp_path, "sort.cwl", SORT)
    for loc in (f"keep:{pdh}/x.txt", "wh:numbers/x.txt"):
        job = _write(tmp_path, "job.yml", f"f: {{class: File, location: '{loc}'}}\n")
        out = json.loads(run("cwl", "run", str(tool), str(job), "--json").stdout)
        with EmbeddedWarehouse(home) as wh:
            got_pdh, path = _keep(out["sorted"]["location"])
            assert wh.reader(got_pdh).read_file(path) == b"1\n2\n3\n"


def test_bad_documents_and_job_files_get_one_error_line(run, tmp_path: Path) -> None:
    bad = _write(tmp_path, "bad.cwl", "cwlVersion: v1.2\nclass: CommandLineTool\ninputs: 3\n")
    res = run("cwl", "run", str(bad), code=2)
    (line,) = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert line.startswith("Error: Tool definition failed validation") and "Traceback" not in line
    res = run("cwl", "run", str(tmp_path / "nosuch.cwl"), code=2)
    assert res.stderr.strip() == f"Error: no CWL document {tmp_path / 'nosuch.cwl'}"
    tool = _write(tmp_path, "sort.cwl", SORT)
    res = run("cwl", "run", str(tool), str(_write(tmp_path, "job.yml", "g: 1\n")), code=2)
    assert res.stderr.splitlines()[-1].startswith("Error: Workflow error: Invalid job input record")
    assert "Missing required input parameter 'f'" in res.stderr


def test_a_failing_command_fails_the_run(run, home: Path, tmp_path: Path) -> None:
    tool = _write(
        tmp_path,
        "fail.cwl",
        "cwlVersion: v1.2\nclass: CommandLineTool\nbaseCommand: [sh, -c, 'exit 3']\n"
        "inputs: []\noutputs: []\n",
    )
    res = run("cwl", "run", str(tool), code=1)
    assert res.stderr.splitlines()[-1].startswith("Error: ")
    with EmbeddedWarehouse(home) as wh:
        (job,) = list_jobs(wh.engine)
        assert job.state == "failed"
    # ToolTimeLimit: the command is killed, and the job fails.
    slow = _write(
        tmp_path,
        "slow.cwl",
        "cwlVersion: v1.2\nclass: CommandLineTool\n"
        "requirements: {ToolTimeLimit: {timelimit: 1}}\n"
        "baseCommand: [sleep, '60']\ninputs: []\noutputs: []\n",
    )
    run("cwl", "run", str(slow), code=1)
    with EmbeddedWarehouse(home) as wh:
        killed = list_jobs(wh.engine)[-1]
        assert killed.state == "failed"
        assert (
            "ToolTimeLimit: killed after 1 s"
            in wh.reader(killed.log_pdh).read_file("step-000000.log").decode()
        )


def test_a_docker_requirement_runs_on_the_host_and_says_so_once(
    run, home: Path, tmp_path: Path
) -> None:
    tool = _write(
        tmp_path,
        "echo.cwl",
        "cwlVersion: v1.2\nclass: CommandLineTool\n"
        "requirements: {DockerRequirement: {dockerPull: 'debian:stable-slim'}}\n"
        "baseCommand: [echo, hi]\ninputs: []\nstdout: hi.txt\n"
        "outputs: {out: {type: stdout}}\n",
    )
    res = run("cwl", "run", str(tool), "--json")
    assert res.stderr.count("no container engine is used") == 1
    pdh, path = _keep(json.loads(res.stdout)["out"]["location"])
    with EmbeddedWarehouse(home) as wh:
        assert wh.reader(pdh).read_file(path) == b"hi\n"


def test_wh_loads_no_cwltool_until_a_cwl_run() -> None:
    probe = (
        "import sys\nfrom warehouse.cli import main\nimport warehouse.cwl\n"
        "sys.argv[:] = ['wh', '--version']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('cwltool', 'schema_salad') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


# Every `required` test of the suite but the one `cwltool --no-container`
# fails here too (docs/cwl.md, "Conformance"): what the issue asks of
# `make test`. The whole suite is run by hand (docs/cwl.md has its figures).
NOT_HERE = ["filename_with_hash_mark"]


@pytest.mark.slow
@pytest.mark.timeout(3600)  # 83 runs of the runner: minutes, far more on a loaded machine
def test_the_required_conformance_tests_pass(home: Path, tmp_path: Path) -> None:
    tests = SUITE / "conformance_tests.yaml"
    need(None if tests.is_file() else f"no CWL conformance suite at {SUITE}")
    done = subprocess.run(
        [
            str(BIN / "cwltest"),
            "--test",
            str(tests),
            "--tool",
            str(BIN / "wh-cwl-runner"),
            "--tags",
            "required",
            "-S",
            ",".join(NOT_HERE),
            "-j",
            "2",
            "--timeout",
            "300",
        ],
        cwd=SUITE,
        capture_output=True,
        text=True,
        timeout=3500,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "All tests passed" in done.stdout + done.stderr
    ran = [ln for ln in (done.stdout + done.stderr).splitlines() if ln.startswith("Test [")]
    assert len(ran) == 83  # the suite's 84 required tests but the one above
