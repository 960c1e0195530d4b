"""Jobs across users in private mode (docs/permissions.md, "Jobs across
users"): reuse hands a user only an earlier job whose output and log it may
read, a job's function collection must be its submitter's to read (through
the API and on the hosts that submit in the background), and a job's
``function_pdh`` is shown only to who may read that collection."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from cluster import Controller, KeepPool, controller
from jobs_helpers import job_row
from permission_helpers import api_as, wh_as
from warehouse import catalog, jobs
from warehouse.catalog import grants
from warehouse.errors import NotFoundError
from warehouse.jobs.controllerhost import CatalogWarehouse
from warehouse.jobs.jobstore import insert_job
from warehouse.permissions import Level, Mode

COUNT = "import sys\nfor line in sys.stdin:\n    print(len(line.split()))\n"


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


def _submit(ctl: Controller, token: str, function: str, key: str) -> dict[str, Any]:
    with api_as(ctl, token) as api:
        r = api.post("/api/v1/jobs", json={"function": function, "input": key})
    assert r.status_code in (200, 201), r.text
    job: dict[str, Any] = r.json()
    return job


def _run(ctl: Controller, token: str, function: str, key: str) -> dict[str, Any]:
    out = wh_as(ctl, token, "job", "submit", function, "--input", key, "--wait", "--json").output
    job: dict[str, Any] = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert job["state"] == "complete", job
    return job


def test_reuse_hands_over_only_what_the_submitter_reads(ctl: Controller, tmp_path: Path) -> None:
    alice, bob, carol = ctl.user("alice"), ctl.user("bob"), ctl.user("carol")
    wh_as(ctl, ctl.admin_token, "perms-mode", "private")
    data = _put(ctl, alice, tmp_path / "data", {"reads.txt": "a b c\nd e\n"})
    for who in ("bob", "carol"):
        wh_as(ctl, alice, "share", data, who)  # the input, not what jobs make of it
    first = _run(ctl, alice, "builtin:wordcount", data)

    # alice shares her job with bob: he reads its output and log, so he gets it.
    wh_as(ctl, alice, "share", f"job:{first['id']}", "bob")
    given = _submit(ctl, bob, "builtin:wordcount", data)
    assert (given["state"], given["reused_from"]) == ("complete", first["id"]), given

    # carol reads neither (nor bob's job): hers runs again, handed nothing.
    again = _submit(ctl, carol, "builtin:wordcount", data)
    assert again["reused_from"] is None and again["output_pdh"] is None, again
    with api_as(ctl, carol) as api:
        r = api.get(f"/api/v1/collections/{first['output_pdh']}")
        assert r.status_code == 404, r.text


def test_a_function_collection_is_the_submitters_to_read(ctl: Controller, tmp_path: Path) -> None:
    alice, bob = ctl.user("alice"), ctl.user("bob")
    wh_as(ctl, ctl.admin_token, "perms-mode", "private")
    code = _put(ctl, alice, tmp_path / "code", {"count.py": COUNT})
    data = _put(ctl, bob, tmp_path / "data", {"reads.txt": "a b c\n"})
    with api_as(ctl, bob) as api:
        r = api.post("/api/v1/jobs", json={"function": f"{code}/count.py", "input": data})
        assert r.status_code == 404 and r.json()["error"] == f"no collection {code}", r.text
    # The hosts that submit in the background (a workflow's driver, Regol) act
    # for a run's owner without the API's checks: the submission checks.
    host = CatalogWarehouse(ctl.state.engine, ctl.state.keep, "bob")
    request = jobs.JobRequest(f"{code}/count.py", data, {}, executor="local")
    with pytest.raises(NotFoundError, match=re.escape(f"no collection {code}")):
        jobs.submit(host, request)
    assert all(j.function_pdh != code for j in jobs.list_jobs(ctl.state.engine))


def test_a_users_fan_in_workflow_runs_in_private_mode(ctl: Controller, tmp_path: Path) -> None:
    """A job reading two of the run's outputs reads a combined collection the
    driver records with the job itself: the check asks about its parts (it
    failed "no collection" for every user but an admin)."""
    bob = ctl.user("bob")
    wh_as(ctl, ctl.admin_token, "perms-mode", "private")
    code = _put(ctl, bob, tmp_path / "code", {"count.py": COUNT})
    _put(ctl, bob, tmp_path / "data", {"reads.txt": "a b c\n"})
    wh_as(ctl, bob, "put", str(tmp_path / "data"), "--name", "bobs")
    flow = tmp_path / "fan.yml"
    flow.write_text(
        "workflow: fan\ninputs:\n  data:\njobs:\n"
        f"  one:\n    function: {code}/count.py\n    input: $data\n"
        f"  two:\n    function: {code}/count.py\n    input: $data\n    params: {{x: 1}}\n"
        f"  both:\n    function: {code}/count.py\n    input: {{a: $one, b: $two}}\n"
    )
    out = wh_as(ctl, bob, "workflow", "run", str(flow), "-i", "data=bobs", "--wait").output
    assert "complete" in out and "failed" not in out, out


def test_function_pdh_is_shown_only_to_who_reads_it(ctl: Controller, tmp_path: Path) -> None:
    alice, bob = ctl.user("alice"), ctl.user("bob")
    wh_as(ctl, ctl.admin_token, "perms-mode", "private")
    code = _put(ctl, alice, tmp_path / "code", {"count.py": COUNT})
    data = _put(ctl, alice, tmp_path / "data", {"reads.txt": "a b c\n"})
    job = _run(ctl, alice, f"{code}/count.py", data)
    assert job["function_pdh"] == code
    wh_as(ctl, alice, "share", f"job:{job['id']}", "bob")
    with api_as(ctl, bob) as api:
        for shown in (
            api.get(f"/api/v1/jobs/{job['id']}").json(),
            *[j for j in api.get("/api/v1/jobs").json() if j["id"] == job["id"]],
        ):
            assert shown["function_pdh"] == "hidden", shown
            assert code not in json.dumps(shown), shown
            assert shown["output_pdh"] == job["output_pdh"]  # the job's own: shared
    assert code not in wh_as(ctl, bob, "job", "show", str(job["id"])).output
    # The pages alike: the jobs list, the job's page, its output's "made by".
    with httpx.Client(base_url=ctl.url, timeout=60) as browser:
        signed = browser.post("/web/signin", data={"token": bob, "next": "/web/"})
        assert signed.status_code == 303, signed.text
        listed = browser.get("/web/jobs")
        assert f"/web/jobs/{job['id']}" in listed.text and "hidden/count.py" in listed.text
        for page in ("/web/jobs", f"/web/jobs/{job['id']}", f"/web/c/{job['output_pdh']}"):
            answer = browser.get(page)
            assert answer.status_code == 200, (page, answer.status_code)
            assert code not in answer.text, page
    wh_as(ctl, alice, "share", code, "bob")
    with api_as(ctl, bob) as api:
        assert api.get(f"/api/v1/jobs/{job['id']}").json()["function_pdh"] == code


def test_readable_among_decides_for_many_at_once(catalog_engine: sa.Engine) -> None:
    first, second = (f"{c * 32}+{i}" for i, c in enumerate("ab", 1))
    for user in ("alice", "bob"):
        catalog.add_user(catalog_engine, user)
    for pdh in (first, second):
        catalog.add_collection(catalog_engine, pdh, "", 0, 0, "alice")
    assert grants.readable_among(catalog_engine, "bob", [first, second]) == {first, second}
    root = grants.principal_of(catalog_engine, "root", admin=True)
    grants.set_mode(catalog_engine, Mode.PRIVATE, root)
    assert grants.readable_among(catalog_engine, "bob", [first, second]) == set()
    assert grants.readable_among(catalog_engine, "alice", [first, second]) == {first, second}
    grants.share(catalog_engine, second, "bob", Level.READ, root)
    assert grants.readable_among(catalog_engine, "bob", [first, second]) == {second}
    # What a job made (its output, its log) is its submitter's, asked among others.
    made, log = (f"{c * 32}+{i}" for i, c in enumerate("cd", 3))
    insert_job(catalog_engine, job_row(submitted_by="bob", output_pdh=made, log_pdh=log))
    among = [first, second, made, log]
    assert grants.readable_among(catalog_engine, "bob", among) == {second, made, log}
    assert grants.readable_among(catalog_engine, "alice", among) == {first, second}
