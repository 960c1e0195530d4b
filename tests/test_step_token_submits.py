"""A step's token acts for its submitter only while its job runs, so it
submits no job and starts no workflow, which would outlive the job
(docs/security.md, "Tokens"; docs/permissions.md): a real step through a
real controller tries both and is refused 403, and nothing is queued."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import Controller, KeepPool, controller
from permission_helpers import wh_as
from warehouse import jobs
from warehouse.workflows import runstore as runs

SUBMITS = """
import json, os, sys, urllib.error, urllib.request

sys.stdin.read()
WORKFLOW = "workflow: w\\njobs:\\n  a: {{function: builtin:wordcount, input: {pdh}}}\\n"
for path, body in (
    ("/jobs", {{"function": "builtin:wordcount", "input": "{pdh}", "reuse": False}}),
    ("/workflows", {{"file": WORKFLOW}}),
):
    request = urllib.request.Request(
        os.environ["WH_URL"] + "/api/v1" + path,
        data=json.dumps(body).encode(),
        headers={{
            "Authorization": "Bearer " + os.environ["WH_TOKEN"],
            "Content-Type": "application/json",
        }},
    )
    try:
        with urllib.request.urlopen(request) as r:
            print("DONE", path, r.status)
    except urllib.error.HTTPError as e:
        print("REFUSED", e.code, path, json.loads(e.read())["error"])
"""


@pytest.fixture
def ctl(tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(tmp_path / "controller.db", keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=1)
        yield c


def _put(ctl: Controller, token: str, where: Path, files: dict[str, str]) -> str:
    where.mkdir(parents=True)
    for name, text in files.items():
        (where / name).write_text(text)
    return wh_as(ctl, token, "put", str(where)).output.split()[-1]


def test_a_steps_token_submits_no_job_and_starts_no_workflow(
    ctl: Controller, tmp_path: Path
) -> None:
    alice = ctl.user("alice")
    data = _put(ctl, alice, tmp_path / "data", {"a.txt": "a b\n"})
    fn = _put(ctl, alice, tmp_path / "fn", {"submit.py": SUBMITS.format(pdh=data)})
    out = wh_as(
        ctl, alice, "job", "submit", f"{fn}/submit.py", "--input", data, "--wait", "--json"
    ).output
    job: dict[str, Any] = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert job["state"] == "complete", job
    log = wh_as(ctl, alice, "job", "logs", str(job["id"]), "--step", "0").output
    assert "REFUSED 403 /jobs a job's token cannot submit jobs" in log, log
    assert "REFUSED 403 /workflows a job's token cannot start workflows" in log, log
    assert "DONE" not in log, log
    assert [j.id for j in jobs.list_jobs(ctl.state.engine)] == [job["id"]]
    assert runs.list_runs(ctl.state.engine) == []
    # The submitter's own token still does both.
    wh_as(ctl, alice, "job", "submit", "builtin:wordcount", "--input", data)
