"""`wh cwl run` through a controller: each tool invocation a job of the
controller's, its step run by the controller's executor in its sandbox, and
what a user may read applies to the inputs (docs/cwl.md, "Through a
controller")."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import Controller, KeepPool, controller
from permission_helpers import wh_as
from warehouse.jobs.records import list_jobs


@pytest.fixture(autouse=True)
def cwltool_installed() -> None:
    try:
        import cwltool  # noqa: F401
    except ImportError:  # CI must run these: there a missing cwltool fails
        if os.environ.get("CI"):
            pytest.fail("cwltool is not installed; CI must run the CWL tests", pytrace=False)
        pytest.skip("cwltool is not installed (pip install -e '.[cwl]')")


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
