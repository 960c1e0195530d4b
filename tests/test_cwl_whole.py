"""Reuse of a whole CWL run: a re-run of a finished run is answered by it, with
no job submitted; anything that could make the run differently (an input, a
secondary file found beside it, a tool) runs it job by job as before
(docs/cwl.md, "Reuse of a whole run")."""

from __future__ import annotations

import functools
import http.server
import json
import threading
import time
from pathlib import Path

from conftest import Runner
from cwl_helpers import cwltool_installed  # noqa: F401 (autouse fixture)
from warehouse.embedded import EmbeddedWarehouse
from warehouse.gc.roots import workflow_roots
from warehouse.jobs.jobstore import list_jobs

HEAD = """\
cwlVersion: v1.2
class: CommandLineTool
baseCommand: head
inputs:
  n: {type: int, inputBinding: {prefix: -n, position: 1}}
  text: {type: File, inputBinding: {position: 2}}
stdout: head.txt
outputs:
  out: {type: stdout}
"""

# A scatter of a tool from its own file, and an int[] output (in the output object only).
SCATTER = """\
cwlVersion: v1.2
class: Workflow
requirements: {ScatterFeatureRequirement: {}}
inputs:
  text: File
  counts: int[]
outputs:
  heads: {type: "File[]", outputSource: head/out}
  counts_n: {type: "int[]", outputSource: counts}
steps:
  head:
    run: head.cwl
    scatter: n
    in: {text: text, n: counts}
    out: [out]
"""

# The tool reads the secondary file cwltool finds beside its input (not in the job file).
SECONDARY = """\
cwlVersion: v1.2
class: CommandLineTool
requirements: {InlineJavascriptRequirement: {}}
baseCommand: cat
inputs:
  f: {type: File, secondaryFiles: [.idx]}
arguments: ["$(inputs.f.secondaryFiles[0].path)"]
stdout: idx.txt
outputs:
  out: {type: stdout}
"""


def _scatter(d: Path) -> tuple[Path, Path]:
    (d / "head.cwl").write_text(HEAD)
    (d / "scatter.cwl").write_text(SCATTER)
    (d / "text.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    (d / "job.json").write_text(
        json.dumps({"text": {"class": "File", "path": "text.txt"}, "counts": [1, 2, 3]})
    )
    return d / "scatter.cwl", d / "job.json"


def _jobs(home: Path) -> list[int]:
    with EmbeddedWarehouse(home) as wh:
        return [j.id for j in list_jobs(wh.engine)]


def test_a_rerun_is_answered_by_the_whole_run_with_no_job_submitted(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    wf, job = _scatter(tmp_path)
    first = run("cwl", "run", str(wf), str(job), "--json", "--name-outputs", "p1")
    assert "wh cwl: 3 jobs: 3 ran, 0 reused\n" in first.stderr
    jobs = _jobs(home)
    assert len(jobs) == 3
    again = run("cwl", "run", str(wf), str(job), "--json", "--name-outputs", "p2")
    # Said so, and no job submitted: per-job reuse would have added 3 reused jobs.
    assert (
        "wh cwl: 3 jobs: 0 ran, 3 reused (0 steps run): the whole run reused from run 1\n"
        in again.stderr
    )
    assert _jobs(home) == jobs
    assert json.loads(again.stdout) == json.loads(first.stdout)
    heads = json.loads(again.stdout)["heads"]
    assert [h["location"].startswith("keep:") and "path" not in h for h in heads] == [True] * 3
    assert json.loads(again.stdout)["counts_n"] == [1, 2, 3]  # a value, not a file
    # A workflow run of its own, complete, its nodes the first run's jobs, reused.
    runs = {r["id"]: r for r in json.loads(run("workflow", "ls", "--json").stdout)}
    assert set(runs) == {1, 2} and {r["state"] for r in runs.values()} == {"complete"}
    one, two = (json.loads(run("workflow", "show", str(i), "--json").stdout) for i in (1, 2))
    assert [n["job_id"] for n in two["nodes"]] == [n["job_id"] for n in one["nodes"]]
    assert sorted(n["job_id"] for n in two["nodes"]) == jobs
    assert all(n["reused"] and n["state"] == "complete" for n in two["nodes"])
    assert not any(n["reused"] for n in one["nodes"])
    assert two["outputs"] == one["outputs"] and two["file_pdh"] == one["file_pdh"]
    assert two["inputs"] == one["inputs"]
    # The output object is kept (the same one for both) and wh gc keeps it.
    assert two["output_object"] == one["output_object"] is not None
    with EmbeddedWarehouse(home) as wh:
        assert one["output_object"] in workflow_roots(wh.engine, 0.0)
    # Its outputs named with its own prefix; their lineage reaches the CWL
    # files, the jobs (their tools) and the input as it was put.
    with EmbeddedWarehouse(home) as wh:
        assert wh.resolve("p2.heads") == wh.resolve("p1.heads") == two["outputs"]["heads"]
        put = wh.put([tmp_path / "text.txt"]).pdh
    graph = json.loads(run("lineage", "p2.heads", "--json").stdout)
    kinds = {c["pdh"]: c["kinds"] for c in graph["collections"]}
    assert kinds[two["file_pdh"]] == ["workflow file"] and kinds[put] == ["put"]
    assert {j["id"] for j in graph["jobs"]} == set(jobs)
    # With --outdir the files are written out, each output naming its path there.
    out = tmp_path / "out"
    third = run("cwl", "run", str(wf), str(job), "--json", "--outdir", str(out))
    assert "the whole run reused from run 2" in third.stderr
    written = json.loads(third.stdout)["heads"]
    assert [Path(h["path"]).read_text().count("\n") for h in written] == [1, 2, 3]
    assert [Path(h["path"]).parent for h in written] == [out] * 3
    assert _jobs(home) == jobs


def test_a_changed_secondary_file_is_not_answered_by_the_earlier_run(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    tool = tmp_path / "idx.cwl"
    tool.write_text(SECONDARY)
    (tmp_path / "data.txt").write_text("data\n")
    (tmp_path / "data.txt.idx").write_text("index one\n")
    job = tmp_path / "job.yml"
    job.write_text("f: {class: File, location: data.txt}\n")  # the .idx is found beside it
    first = run("cwl", "run", str(tool), str(job), "--outdir", str(tmp_path / "a"))
    assert "1 ran, 0 reused" in first.stderr
    assert (tmp_path / "a" / "idx.txt").read_text() == "index one\n"
    # Only the secondary file changed: the job file and the input are the same.
    (tmp_path / "data.txt.idx").write_text("index two\n")
    again = run("cwl", "run", str(tool), str(job), "--outdir", str(tmp_path / "b"))
    assert "1 ran, 0 reused" in again.stderr and "whole run" not in again.stderr
    assert (tmp_path / "b" / "idx.txt").read_text() == "index two\n"


def test_a_changed_tool_or_input_reruns_what_depends_on_it(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    wf, job = _scatter(tmp_path)
    run("cwl", "run", str(wf), str(job))
    # One more count: the three jobs of before are reused, one runs.
    job.write_text(
        json.dumps({"text": {"class": "File", "path": "text.txt"}, "counts": [1, 2, 3, 4]})
    )
    more = run("cwl", "run", str(wf), str(job), "--json")
    assert "wh cwl: 4 jobs: 1 ran, 3 reused\n" in more.stderr
    assert len(_jobs(home)) == 3 + 4
    # A changed input file: every job reads it, every one runs.
    (tmp_path / "text.txt").write_text("other\n" * 10)
    changed = run("cwl", "run", str(wf), str(job), "--json")
    assert "wh cwl: 4 jobs: 4 ran, 0 reused\n" in changed.stderr
    heads = json.loads(changed.stdout)["heads"]
    assert heads != json.loads(more.stdout)["heads"]
    # A changed tool: every job runs again.
    (tmp_path / "head.cwl").write_text(HEAD.replace("stdout: head.txt", "stdout: first.txt"))
    tool = run("cwl", "run", str(wf), str(job))
    assert "wh cwl: 4 jobs: 4 ran, 0 reused\n" in tool.stderr


def test_a_tool_asking_to_run_every_time_is_not_answered_whole(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    tool = tmp_path / "date.cwl"
    tool.write_text(
        HEAD.replace("baseCommand: head", "requirements: {WorkReuse: {enableReuse: false}}\n"
                     "baseCommand: head")
    )  # fmt: skip
    (tmp_path / "text.txt").write_text("a\nb\n")
    job = tmp_path / "job.yml"
    job.write_text("n: 1\ntext: {class: File, location: text.txt}\n")
    assert "1 ran, 0 reused" in run("cwl", "run", str(tool), str(job)).stderr
    assert "1 ran, 0 reused" in run("cwl", "run", str(tool), str(job)).stderr
    assert len(_jobs(home)) == 2


def test_a_changed_file_behind_an_http_location_is_not_answered_by_the_earlier_run(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    served = tmp_path / "served"
    served.mkdir()
    (served / "text.txt").write_text("first\n")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            tool = tmp_path / "head.cwl"
            tool.write_text(HEAD)
            job = tmp_path / "job.yml"
            url = f"http://127.0.0.1:{server.server_address[1]}/text.txt"
            job.write_text(f"n: 1\ntext: {{class: File, location: '{url}'}}\n")
            first = run("cwl", "run", str(tool), str(job), "--outdir", str(tmp_path / "a"))
            assert "1 ran, 0 reused" in first.stderr
            assert (tmp_path / "a" / "head.txt").read_text() == "first\n"
            # The job file and the tool are the same; what the URL gives is not.
            (served / "text.txt").write_text("second\n")
            again = run("cwl", "run", str(tool), str(job), "--outdir", str(tmp_path / "b"))
            assert "whole run" not in again.stderr
            assert (tmp_path / "b" / "head.txt").read_text() == "second\n"
        finally:
            server.shutdown()


# A step's input defaults to a local file named in the workflow's document,
# not in the job order.
STEP_DEFAULT = """\
cwlVersion: v1.2
class: Workflow
inputs:
  n: int
outputs:
  out: {type: File, outputSource: head/out}
steps:
  head:
    run: head.cwl
    in:
      n: n
      text: {default: {class: File, location: ref.txt}}
    out: [out]
"""


def test_a_changed_local_file_a_document_names_is_not_answered_by_the_earlier_run(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    (tmp_path / "head.cwl").write_text(HEAD)
    wf = tmp_path / "wf.cwl"
    wf.write_text(STEP_DEFAULT)
    (tmp_path / "ref.txt").write_text("first\n")
    job = tmp_path / "job.yml"
    job.write_text("n: 1\n")
    first = run("cwl", "run", str(wf), str(job), "--outdir", str(tmp_path / "a"))
    assert "1 ran, 0 reused" in first.stderr
    assert (tmp_path / "a" / "head.txt").read_text() == "first\n"
    # The documents' text and the job file are the same; the file they name is not.
    (tmp_path / "ref.txt").write_text("second\n")
    again = run("cwl", "run", str(wf), str(job), "--outdir", str(tmp_path / "b"))
    assert "whole run" not in again.stderr
    assert (tmp_path / "b" / "head.txt").read_text() == "second\n"


TWO_STEPS = """\
cwlVersion: v1.2
class: Workflow
inputs:
  text: File
outputs:
  one: {type: File, outputSource: first/out}
  two: {type: File, outputSource: second/out}
steps:
  first:
    run: head.cwl
    in: {text: text, n: {default: 1}}
    out: [out]
  second:
    run: head.cwl
    in: {text: text, n: {default: 2}}
    out: [out]
"""


def test_a_run_of_two_file_outputs_is_answered_whole_after_a_gc(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    # Two steps' files: the output object names them in one collection of
    # both, which is neither output's nor either job's: kept with the run.
    (tmp_path / "head.cwl").write_text(HEAD)
    wf = tmp_path / "two.cwl"
    wf.write_text(TWO_STEPS)
    (tmp_path / "text.txt").write_text("a\nb\n")
    job = tmp_path / "job.yml"
    job.write_text("text: {class: File, location: text.txt}\n")
    first = run("cwl", "run", str(wf), str(job), "--json")
    assert "2 ran, 0 reused" in first.stderr
    named = {k: o["location"].removeprefix("keep:") for k, o in json.loads(first.stdout).items()}
    assert len({key.split("/", 1)[0] for key in named.values()}) == 1  # one collection of both
    # Past the signature TTL, wh gc collects every collection that is no root.
    run("gc", "settings", "signature_ttl=1s")
    time.sleep(2)
    run("gc")
    # The printed locations still read.
    assert {k: run("cat", key).stdout for k, key in named.items()} == {
        "one": "a\n",
        "two": "a\nb\n",
    }
    again = run("cwl", "run", str(wf), str(job), "--json")
    assert "the whole run reused from run 1" in again.stderr
    assert json.loads(again.stdout) == json.loads(first.stdout)
