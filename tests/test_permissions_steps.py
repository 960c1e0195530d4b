"""Private mode and jobs through a real controller running sandboxed steps:
a step of bob's reads nothing of alice's by PDH, and bob's lineage of what
alice shared shows her unshared data and job as hidden (docs/permissions.md)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result

from cluster import Controller, KeepPool, controller
from regol_helpers import make_repo
from warehouse.cli import cli


@pytest.fixture
def ctl(tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(tmp_path / "controller.db", keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=1)
        yield c


def _wh(ctl: Controller, token: str, *args: str, code: int = 0) -> Result:
    env = {k: None for k in os.environ if k.startswith("WH_")}
    env.update(WH_URL=ctl.url, WH_TOKEN=token)
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == code, (args, result.exit_code, result.output, result.stderr)
    return result


def _put(ctl: Controller, token: str, where: Path, files: dict[str, str]) -> str:
    where.mkdir(parents=True)
    for name, text in files.items():
        (where / name).write_text(text)
    return _wh(ctl, token, "put", str(where)).output.split()[-1]


def _run(ctl: Controller, token: str, function: str, key: str) -> dict[str, Any]:
    out = _wh(ctl, token, "job", "submit", function, "--input", key, "--wait", "--json").output
    job: dict[str, Any] = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert job["state"] == "complete", job
    return job


READS_BY_PDH = """
import os, sys, urllib.error, urllib.request

for path in ("/collections/{pdh}", "/collections/{pdh}/manifest", "/lineage/{pdh}"):
    request = urllib.request.Request(
        os.environ["WH_URL"] + "/api/v1" + path,
        headers={{"Authorization": "Bearer " + os.environ["WH_TOKEN"]}},
    )
    try:
        with urllib.request.urlopen(request) as r:
            print("READ", path, r.read()[:100])
    except urllib.error.HTTPError as e:
        print("REFUSED", e.code, path)
"""


def test_a_step_of_bobs_cannot_read_alices_private_collection(
    ctl: Controller, tmp_path: Path
) -> None:
    alice, bob = ctl.user("alice"), ctl.user("bob")
    _wh(ctl, ctl.admin_token, "perms-mode", "private")
    secret = _put(ctl, alice, tmp_path / "secret", {"s.txt": "alice only\n"})
    fn = _put(ctl, bob, tmp_path / "fn", {"peek.py": READS_BY_PDH.format(pdh=secret)})
    data = _put(ctl, bob, tmp_path / "bobs", {"b.txt": "bob's\n"})
    job = _run(ctl, bob, f"{fn}/peek.py", data)
    log = _wh(ctl, bob, "job", "logs", str(job["id"]), "--step", "0").output
    for path in ("/collections/{pdh}", "/collections/{pdh}/manifest", "/lineage/{pdh}"):
        assert f"REFUSED 404 {path.format(pdh=secret)}" in log, log
    assert "READ" not in log, log
    # Nor may bob hand alice's collection to a job of his as its input.
    _wh(ctl, bob, "job", "submit", f"{fn}/peek.py", "--input", secret, code=4)
    # bob reads his own job, alice does not see it at all.
    _wh(ctl, bob, "job", "show", str(job["id"]))
    _wh(ctl, alice, "job", "show", str(job["id"]), code=4)


def test_lineage_shows_what_the_reader_may_not_read_as_hidden(
    ctl: Controller, tmp_path: Path
) -> None:
    alice, bob = ctl.user("alice"), ctl.user("bob")
    _wh(ctl, ctl.admin_token, "perms-mode", "private")
    raw = _put(ctl, alice, tmp_path / "raw", {"r.txt": "raw reads\n"})
    made = _run(ctl, alice, "builtin:wordcount", raw)["output_pdh"]
    headers = {"Authorization": f"Bearer {bob}"}
    with httpx.Client(base_url=ctl.url, headers=headers, timeout=60) as api:
        assert api.get(f"/api/v1/lineage/{made}").status_code == 404
        _wh(ctl, alice, "share", made, "bob")
        graph = api.get(f"/api/v1/lineage/{made}").json()
    shown = {c["pdh"] for c in graph["collections"]}
    assert made in shown and raw not in shown
    assert "hidden-1" in shown
    [job] = graph["jobs"]
    assert job["submitted_by"] == "hidden" and job["function"]["spec"] == "hidden"
    assert raw not in json.dumps(graph)
    # alice sees all of it.
    with httpx.Client(
        base_url=ctl.url, headers={"Authorization": f"Bearer {alice}"}, timeout=60
    ) as api:
        full = api.get(f"/api/v1/lineage/{made}").json()
    assert {made, raw} <= {c["pdh"] for c in full["collections"]}


COUNT = """workflow: count
inputs:
  text: {}
jobs:
  words:
    function: builtin:wordcount
    input: $text
outputs:
  counts: $words
"""


def test_workflow_runs_are_their_owners_and_read_only_what_the_owner_may(
    ctl: Controller, tmp_path: Path
) -> None:
    alice, bob = ctl.user("alice"), ctl.user("bob")
    _wh(ctl, ctl.admin_token, "perms-mode", "private")
    raw = _put(ctl, alice, tmp_path / "raw", {"r.txt": "raw reads\n"})
    body = {"file": COUNT, "inputs": {"text": raw}}
    as_alice = {"Authorization": f"Bearer {alice}"}
    with httpx.Client(base_url=ctl.url, headers=as_alice, timeout=60) as api:
        r = api.post("/api/v1/workflows", json=body)
        assert r.status_code == 200, r.text
        run = r.json()["id"]
    with httpx.Client(
        base_url=ctl.url, headers={"Authorization": f"Bearer {bob}"}, timeout=60
    ) as api:
        assert run not in [r["id"] for r in api.get("/api/v1/workflows").json()]
        for r in (api.get(f"/api/v1/workflows/{run}"), api.post(f"/api/v1/workflows/{run}/cancel")):
            assert r.status_code == 404 and r.json()["error"] == f"no workflow run {run}", r.text
        # bob may not start one over alice's data either: told as for none.
        r = api.post("/api/v1/workflows", json=body)
        none = "0123456789abcdef0123456789abcdef+3"
        nothing = api.post("/api/v1/workflows", json={**body, "inputs": {"text": none}})
        assert r.status_code == nothing.status_code == 400, r.text
        assert r.json()["error"].replace(raw, none) == nothing.json()["error"]
        _wh(ctl, alice, "share", f"run:{run}", "bob")
        assert api.get(f"/api/v1/workflows/{run}").status_code == 200
        assert run in [r["id"] for r in api.get("/api/v1/workflows").json()]


def test_regol_watches_are_their_owners_in_private_mode(ctl: Controller, tmp_path: Path) -> None:
    alice, bob = ctl.user("alice"), ctl.user("bob")
    _wh(ctl, ctl.admin_token, "perms-mode", "private")
    first = make_repo(tmp_path / "repo")[0]
    raw = _put(ctl, alice, tmp_path / "raw", {"r.txt": "raw reads\n"})
    job = _run(ctl, alice, f"git:{tmp_path / 'repo'}@{first}:fn.py", raw)
    as_alice = {"Authorization": f"Bearer {alice}"}
    with httpx.Client(base_url=ctl.url, headers=as_alice, timeout=60) as api:
        r = api.post("/api/v1/regol/watches", json={"job": job["id"], "branch": "main"})
        assert r.status_code == 200, r.text
        watch = r.json()["id"]
    as_bob = {"Authorization": f"Bearer {bob}"}
    with httpx.Client(base_url=ctl.url, headers=as_bob, timeout=60) as api:
        assert watch not in [w["id"] for w in api.get("/api/v1/regol/watches").json()]
        for r in (
            api.get(f"/api/v1/regol/watches/{watch}"),
            api.get(f"/api/v1/regol/watches/{watch}/runs"),
            api.delete(f"/api/v1/regol/watches/{watch}"),
            api.post(f"/api/v1/regol/watches/{watch}/bisect", json={"good": "a", "bad": "b"}),
        ):
            assert r.status_code == 404 and r.json()["error"] == f"no watch {watch}", r.text
        # Nor may bob follow alice's job with a watch of his own.
        r = api.post("/api/v1/regol/watches", json={"job": job["id"], "branch": "main"})
        assert r.status_code == 404 and r.json()["error"] == f"no job {job['id']}", r.text
