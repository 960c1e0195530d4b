"""Tokens are revocable (docs/security.md): an ordinary user lists and revokes
their own, never another's; signing out, a job ending and `wh web` stopping
each revoke the token they made. Real servers on 127.0.0.1 throughout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster import WH_BIN, Controller, KeepPool, controller
from conftest import Runner
from jobs_helpers import make_text
from warehouse import catalog
from warehouse.catalog.auth import list_tokens, token_id
from warehouse.cli import cli
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import WarehouseError
from warehouse.remote.api import ApiClient

# The token also backwards: a log keeps no job token as it is, but the tests
# need it back.
LEAKS_ITS_TOKEN = """#!/bin/sh
echo "my token: $WH_TOKEN"
echo "backwards: $(echo "$WH_TOKEN" | rev)"
env
"""


@pytest.fixture
def ctl(tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(tmp_path / "controller.db", keep_servers) as c:
        yield c


def _works(url: str, token: str) -> bool:
    api = ApiClient(url, token)
    try:
        api.get("/users/current")
        return True
    except WarehouseError as e:
        assert "unknown or expired token" in str(e)
        return False
    finally:
        api.close()


def _as(monkeypatch: pytest.MonkeyPatch, url: str, token: str) -> None:
    monkeypatch.setenv("WH_URL", url)
    monkeypatch.setenv("WH_TOKEN", token)


def _fails(args: list[str]) -> str:
    """`wh ARGS` as it fails: one `Error:` line, no traceback."""
    result = Runner().runner.invoke(cli, args)
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    assert result.output.startswith("Error: "), result.output
    return result.output


def test_a_user_lists_and_revokes_their_own_tokens_and_no_one_elses(
    ctl: Controller, run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice, bob = ctl.user("alice"), ctl.user("bob")
    _as(monkeypatch, ctl.url, alice)
    spare = run("token", "create", "--ttl", "3600", "--label", "laptop").output.strip()
    assert _works(ctl.url, spare)

    listed = run("token", "ls").output
    assert token_id(alice) in listed and token_id(spare) in listed and "laptop" in listed
    assert alice not in listed and spare not in listed  # ids only, never secrets
    assert token_id(bob) not in listed  # only her own
    rows = json.loads(run("token", "ls", "--json").output)
    assert {r["user"] for r in rows} == {"alice"}

    # Bob's tokens are neither listed nor revocable by her.
    assert "only admins" in _fails(["token", "ls", "--user", "bob"])
    assert f"no token {token_id(bob)}" in _fails(["token", "revoke", token_id(bob)])
    assert _works(ctl.url, bob)
    assert "admin" in _fails(["user", "ls"])
    assert "only admins" in _fails(["token", "create", "bob"])
    assert "16 hex digits" in _fails(["token", "revoke", "../users"])

    # Her own: revoked, it stops working at once.
    assert "revoked" in run("token", "revoke", token_id(spare)).output
    assert not _works(ctl.url, spare)
    assert _works(ctl.url, alice)

    # An admin sees everyone and revokes anyone's.
    _as(monkeypatch, ctl.url, ctl.admin_token)
    assert "alice" in run("user", "ls").output
    # Through the API, the same keys as on the catalog itself.
    assert all(set(u) == {"name", "admin"} for u in json.loads(run("user", "ls", "--json").output))
    assert token_id(bob) in run("token", "ls", "--user", "bob").output
    run("token", "revoke", token_id(bob))
    assert not _works(ctl.url, bob)


def test_the_api_documents_the_token_endpoints(ctl: Controller) -> None:
    paths = httpx.get(ctl.url + "/openapi.json", verify=False).json()["paths"]
    assert {"get", "post"} <= set(paths["/api/v1/tokens"])
    assert "delete" in paths["/api/v1/tokens/{token_id}"]


def test_signing_out_revokes_the_session_token(ctl: Controller) -> None:
    alice = ctl.user("alice")
    with httpx.Client(base_url=ctl.url, timeout=30) as browser:
        answer = browser.post("/web/signin", data={"token": alice, "next": "/web/"})
        assert answer.status_code == 303
        session = browser.cookies["wh_session"]
        assert _works(ctl.url, session)  # a copy of the cookie, taken before sign-out
        browser.post("/web/signout")
    assert not _works(ctl.url, session)
    with httpx.Client(base_url=ctl.url, cookies={"wh_session": session}) as stolen:
        assert "Sign in" in stolen.get("/web/collections").text
    assert _works(ctl.url, alice)  # the typed token is not the session's


def test_a_session_never_outlives_the_token_signed_in_with(ctl: Controller) -> None:
    """A job's token cannot sign in (its session would outlive the job); any
    other token's session ends when that token would, so a session cannot
    renew itself by signing in with itself."""
    from warehouse.catalog.auth import JOB_TOKEN_LABEL

    ctl.user("alice")
    engine = ctl.state.engine
    as_job = catalog.create_token(engine, "alice", label=f"{JOB_TOKEN_LABEL}7", ttl=3600)
    short = catalog.create_token(engine, "alice", label="short", ttl=120)
    with httpx.Client(base_url=ctl.url, timeout=30) as browser:
        refused = browser.post("/web/signin", data={"token": as_job, "next": "/web/"})
        assert refused.status_code == 403 and "wh_session" not in browser.cookies
        assert "job" in refused.text
        answer = browser.post("/web/signin", data={"token": short, "next": "/web/"})
        assert answer.status_code == 303
        first = browser.cookies["wh_session"]
        again = browser.post("/web/signin", data={"token": first, "next": "/web/"})
        assert again.status_code == 303
        second = browser.cookies["wh_session"]
    expiry = {t.id: t.expires_at for t in list_tokens(engine, "alice")}
    assert expiry[token_id(first)] <= expiry[token_id(short)]
    assert expiry[token_id(second)] <= expiry[token_id(short)]
    assert [t.label for t in list_tokens(engine, "alice")].count("web session") == 2


def _run_leaky_job(
    ctl: Controller, run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, user: str
) -> dict[str, Any]:
    """Run, as ``user`` through the controller, a job whose step prints its
    environment and its token backwards; the job's JSON."""
    ctl.state.start_jobs(ctl.url, tmp_path / "controller-jobs", "local", cpus=1)
    _as(monkeypatch, ctl.url, ctl.user(user))
    monkeypatch.setenv("WH_HOME", str(tmp_path / "unused-home"))
    fn = tmp_path / "fn"
    fn.mkdir()
    (fn / "leak.sh").write_text(LEAKS_ITS_TOKEN)
    fn_pdh = run("put", str(fn)).output.split()[-1]
    key = run("put", str(make_text(tmp_path / "in"))).output.split()[-1]
    out = run("job", "submit", f"{fn_pdh}/leak.sh", "--input", key, "--wait", "--json").output
    job: dict[str, Any] = json.loads(out[out.index("{") : out.rindex("}") + 1])
    return job


def test_a_jobs_token_is_revoked_when_the_job_ends(
    ctl: Controller, run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _run_leaky_job(ctl, run, tmp_path, monkeypatch, "alice")
    assert job["state"] == "complete"
    log = run("job", "logs", str(job["id"])).output
    leaked = log.split("backwards: ")[1].split()[0][::-1]
    assert leaked.startswith("wh")
    deadline = time.monotonic() + 30
    while _works(ctl.url, leaked) and time.monotonic() < deadline:
        time.sleep(0.1)  # the manager forgets the job just after it is recorded complete
    assert not _works(ctl.url, leaked)


def test_a_jobs_log_never_shows_its_token(
    ctl: Controller, run: Runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every user may read every job's log, and a step printing its
    environment (a debugging `env`, `set -x`) is common: bob's log must not
    hand alice the token his job acts for him with while it runs."""
    job = _run_leaky_job(ctl, run, tmp_path, monkeypatch, "bob")
    _as(monkeypatch, ctl.url, ctl.user("alice"))
    log = run("job", "logs", str(job["id"])).output
    token = log.split("backwards: ")[1].split()[0][::-1]
    assert token.startswith("wh") and len(token) > 20, log
    assert token not in log, log
    assert "my token: [job token]" in log and "WH_TOKEN=[job token]" in log, log
    alice = httpx.Client(
        base_url=ctl.url, headers={"Authorization": f"Bearer {os.environ['WH_TOKEN']}"}
    )
    with alice:
        (step,) = alice.get(f"/api/v1/jobs/{job['id']}/steps").json()
    assert "WH_TOKEN=[job token]" in step["log_tail"] and token not in step["log_tail"], step


def _wh_web(home: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "WH_HOME": str(home), "WH_USER": "carol"}
    env.pop("WH_URL", None)
    proc = subprocess.Popen(
        [WH_BIN, "web", "--listen", "127.0.0.1:0"], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    return proc, proc.stdout.readline().split()[-1]


def _valid(home: Path, token: str) -> catalog.User | None:
    with EmbeddedWarehouse(home) as wh:
        return catalog.user_for_token(wh.engine, token)


def test_wh_web_keeps_one_short_lived_sign_in_token(tmp_path: Path) -> None:
    home = tmp_path / "h"
    first, token1 = _wh_web(home)
    first.send_signal(signal.SIGKILL)  # no chance to revoke its own
    first.communicate()
    assert _valid(home, token1) is not None
    second, token2 = _wh_web(home)
    try:
        assert _valid(home, token1) is None  # the earlier one is gone
        assert _valid(home, token2) is not None
        with EmbeddedWarehouse(home) as wh:
            (info,) = [t for t in list_tokens(wh.engine) if t.label == "wh web"]
        assert info.expires_at is not None and info.expires_at - info.created_at <= 24 * 3600
    finally:
        second.terminate()
        assert second.wait(15) == 0
        second.communicate()
    assert _valid(home, token2) is None  # revoked as it stopped


def test_no_one_makes_a_token_labelled_as_a_jobs(
    ctl: Controller, run: Runner, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What a job's token may not do is decided by its label: a token a user
    makes may not carry one (nor a label without bound), through the API, the
    CLI or the catalog directly; nothing is made."""
    alice = ctl.user("alice")
    before = len(list_tokens(ctl.state.engine, "alice"))
    headers = {"Authorization": f"Bearer {alice}"}
    for label in ("job 7", "job ", "x" * 201):
        resp = httpx.post(f"{ctl.url}/api/v1/tokens", json={"label": label}, headers=headers)
        assert resp.status_code == 400 and "label" in resp.json()["error"], resp.text
    _as(monkeypatch, ctl.url, alice)
    err = _fails(["token", "create", "--label", "job 7"])
    assert err.startswith("Error: label: ") and err.count("\n") == 1, err
    db = f"sqlite:///{tmp_path / 'controller.db'}"
    _fails(["token", "create", "alice", "--label", "job 7", "--db", db])
    assert len(list_tokens(ctl.state.engine, "alice")) == before
    # A label that only mentions a job is anyone's.
    assert run("token", "create", "--label", "jobs at night").output.strip()
