"""Private mode through a real controller: what the security review found
leaking or let through (docs/permissions.md): a workflow started over a
hidden name, a stopped watch of another user's, a watch on a job shared
without its input, and a job's token listing and revoking its submitter's
tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import Controller, KeepPool, controller
from permission_helpers import api_as, wh_as
from regol_helpers import make_repo
from warehouse import catalog
from warehouse.catalog.auth import JOB_TOKEN_LABEL, token_id


@pytest.fixture
def ctl(tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(tmp_path / "controller.db", keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=1)
        yield c


def _put(ctl: Controller, token: str, where: Path, text: str, name: str = "") -> str:
    where.mkdir(parents=True)
    (where / "r.txt").write_text(text)
    args = ["put", str(where)] + (["--name", name] if name else [])
    return wh_as(ctl, token, *args).output.split()[-1]


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

LITERAL = """workflow: count
jobs:
  words:
    function: builtin:wordcount
    input: NAME
outputs:
  counts: $words
"""


def test_a_workflow_over_a_hidden_name_answers_as_for_a_missing_name(
    ctl: Controller, tmp_path: Path
) -> None:
    alice, bob = ctl.user("alice"), ctl.user("bob")
    wh_as(ctl, ctl.admin_token, "perms-mode", "private")
    pdh = _put(ctl, alice, tmp_path / "raw", "alice's words\n", "secret-merger")
    with api_as(ctl, bob) as api:
        for as_input in (True, False):  # an input of the run, a name written in its file
            hidden, missing = (
                api.post("/api/v1/workflows", json={"file": COUNT, "inputs": {"text": n}})
                if as_input
                else api.post("/api/v1/workflows", json={"file": LITERAL.replace("NAME", n)})
                for n in ("secret-merger", "no-such-name")
            )
            assert hidden.status_code == missing.status_code, (hidden.text, missing.text)
            assert pdh not in hidden.text and pdh.split("+")[0] not in hidden.text, hidden.text
            error = hidden.json()["error"]
            assert error.replace("secret-merger", "no-such-name") == missing.json()["error"]
            assert "no name 'secret-merger'" in error, error
    # Shared, bob starts it.
    wh_as(ctl, alice, "share", "secret-merger", "bob")
    with api_as(ctl, bob) as api:
        r = api.post("/api/v1/workflows", json={"file": COUNT, "inputs": {"text": "secret-merger"}})
        assert r.status_code == 200, r.text


def _git_job(ctl: Controller, alice: str, tmp_path: Path) -> tuple[int, str, list[str]]:
    commits = make_repo(tmp_path / "repo")
    raw = _put(ctl, alice, tmp_path / "raw", "raw reads\n")
    function = f"git:{tmp_path / 'repo'}@{commits[0]}:fn.py"
    out = wh_as(ctl, alice, "job", "submit", function, "--input", raw, "--wait", "--json").output
    job: dict[str, Any] = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert job["state"] == "complete", job
    return int(job["id"]), raw, commits


def test_regol_another_users_stopped_watch_and_a_shared_jobs_private_input(
    ctl: Controller, tmp_path: Path
) -> None:
    alice, bob = ctl.user("alice"), ctl.user("bob")
    wh_as(ctl, ctl.admin_token, "perms-mode", "private")
    job, raw, commits = _git_job(ctl, alice, tmp_path)
    with api_as(ctl, alice) as api:
        r = api.post("/api/v1/regol/watches", json={"job": job, "branch": "main"})
        assert r.status_code == 200, r.text
        stopped = r.json()["id"]
        assert api.delete(f"/api/v1/regol/watches/{stopped}").status_code == 200
    wh_as(ctl, alice, "share", f"job:{job}", "bob")
    with api_as(ctl, bob) as api:
        # alice's stopped watch answers as one that does not exist.
        for i in (stopped, 9999):
            r = api.post("/api/v1/regol/runs", json={"watches": [i]})
            assert r.status_code == 404 and r.json()["error"] == f"no watch {i}", r.text
        # bob reads alice's job, not its input: he may not follow it.
        r = api.post("/api/v1/regol/watches", json={"job": job, "branch": "main"})
        assert r.status_code == 404 and r.json()["error"] == f"no collection {raw}", r.text
    # Given the input, he may; taken back, his watch submits nothing more.
    wh_as(ctl, alice, "share", raw, "bob")
    with api_as(ctl, bob) as api:
        r = api.post("/api/v1/regol/watches", json={"job": job, "branch": "main"})
        assert r.status_code == 200, r.text
        watch = r.json()["id"]
        wh_as(ctl, alice, "unshare", raw, "bob")
        r = api.post(
            "/api/v1/regol/runs",
            json={"watches": [watch], "commits": f"{commits[0]}..{commits[1]}"},
        )
        assert r.status_code == 404 and r.json()["error"] == f"no collection {raw}", r.text


def test_a_jobs_token_neither_lists_nor_revokes_its_submitters_tokens(ctl: Controller) -> None:
    """As it makes none: a step acts for its submitter only while its job runs."""
    alice = ctl.user("alice")
    as_job = catalog.create_token(ctl.state.engine, "alice", label=f"{JOB_TOKEN_LABEL}7", ttl=3600)
    with api_as(ctl, as_job) as step:
        r = step.get("/api/v1/tokens")
        assert r.status_code == 403 and r.json()["error"] == "a job's token cannot list tokens"
        r = step.delete(f"/api/v1/tokens/{token_id(alice)}")
        assert r.status_code == 403 and r.json()["error"] == "a job's token cannot revoke tokens"
    with api_as(ctl, alice) as api:  # her own token still works, and lists and revokes
        assert token_id(alice) in [t["id"] for t in api.get("/api/v1/tokens").json()]
        assert api.delete(f"/api/v1/tokens/{token_id(as_job)}").status_code == 200
