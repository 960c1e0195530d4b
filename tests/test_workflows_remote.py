"""Workflows through a controller: the same commands with WH_URL set, the API in
the OpenAPI description, and a controller process killed mid-run then restarted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from cluster import WH_BIN, Controller, KeepPool, controller
from conftest import Runner
from warehouse import catalog
from warehouse.catalog.cluster import get_setting
from warehouse.catalog.db import write
from warehouse.catalog.schema import settings
from warehouse.workflows.runstore import list_nodes
from workflow_helpers import json_out, make_lab, write_diamond


@pytest.fixture
def ctl(
    tmp_path: Path, keep_servers: KeepPool, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Controller]:
    with controller(tmp_path / "controller.db", keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=4)
        monkeypatch.setenv("WH_URL", c.url)
        monkeypatch.setenv("WH_TOKEN", c.user("alice"))
        monkeypatch.setenv("WH_HOME", str(tmp_path / "unused-home"))
        yield c


def _reads(run: Runner, tmp_path: Path) -> None:
    d = tmp_path / "reads"
    d.mkdir()
    (d / "r.fq").write_text("@r\nACGT\n+\nIIII\n")
    run("put", str(d), "--name", "reads")


@pytest.mark.slow
def test_a_diamond_through_the_controller(ctl: Controller, run: Runner, tmp_path: Path) -> None:
    make_lab(tmp_path)
    _reads(run, tmp_path)
    wf = write_diamond(tmp_path)
    first = json_out(run("workflow", "run", str(wf), "--wait", "--json").output)
    assert first["state"] == "complete" and first["owner"] == "alice"
    assert {n["state"] for n in first["nodes"]} == {"complete"}
    again = run("workflow", "run", str(wf), "--wait", "--name-outputs", "dia").output
    assert "nothing to run, all 4 jobs reused (0 steps run)" in again
    assert catalog.get_name(ctl.state.engine, "dia.final").pdh == first["outputs"]["final"]
    assert "diamond" in run("workflow", "ls").output
    assert "reused" in run("workflow", "show", str(first["id"] + 1)).output
    # Someone else may read the run but not cancel it.
    bob = {"Authorization": f"Bearer {ctl.user('bob')}"}
    got = httpx.get(f"{ctl.url}/api/v1/workflows/{first['id']}", headers=bob, verify=False)
    assert got.status_code == 200 and len(got.json()["nodes"]) == 4
    spec = httpx.get(f"{ctl.url}/openapi.json", verify=False).json()
    assert {"/api/v1/workflows", "/api/v1/workflows/{run_id}"} <= set(spec["paths"])
    bad = httpx.post(
        f"{ctl.url}/api/v1/workflows",
        headers=bob,
        json={"file": "workflow: [", "filename": "x.yml"},
        verify=False,
    )
    assert bad.status_code == 400 and "x.yml:2: (top): bad YAML" in bad.json()["error"]


@pytest.mark.slow
def test_a_run_is_cancelled_through_the_controller(
    ctl: Controller, run: Runner, tmp_path: Path
) -> None:
    make_lab(tmp_path)
    _reads(run, tmp_path)
    wf = write_diamond(tmp_path)
    started = json_out(run("workflow", "run", str(wf), "-i", "sleep=30", "--json").output)
    run_id = started["id"]
    deadline = time.monotonic() + 60
    while (
        json_out(run("workflow", "show", str(run_id), "--json").output)["nodes"][0]["state"]
        != "running"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    bob = {"Authorization": f"Bearer {ctl.user('bob')}"}
    assert (
        httpx.post(
            f"{ctl.url}/api/v1/workflows/{run_id}/cancel", headers=bob, verify=False
        ).status_code
        == 403
    )
    run("workflow", "cancel", str(run_id))
    while (view := json_out(run("workflow", "show", str(run_id), "--json").output))[
        "state"
    ] != "cancelled":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert {n["state"] for n in view["nodes"]} == {"cancelled"}
    job = json_out(run("job", "show", str(view["nodes"][0]["job_id"]), "--json").output)
    deadline = time.monotonic() + 30
    while job["state"] != "cancelled":
        assert time.monotonic() < deadline
        time.sleep(0.1)
        job = json_out(run("job", "show", str(view["nodes"][0]["job_id"]), "--json").output)


def _jobs_that_ran(db: str, tag: str) -> int:
    """Jobs of the test function with ``tag`` that ran steps (not answered by reuse)."""
    engine = catalog.open_engine(db)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT params, reused_from FROM jobs")).all()
    finally:
        engine.dispose()
    return sum(1 for params, reused in rows if json.loads(params).get("tag") == tag and not reused)


def _serve(db: str, home: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    # The test's repository is beside the home: under the one --git-root.
    argv = [WH_BIN, "serve", "--listen", "127.0.0.1:0", "--db", db, "--job-cpus", "4"]
    proc = subprocess.Popen(
        [*argv, "--git-root", str(home.parent)],
        env={**env, "WH_HOME": str(home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    assert first[:3] == ["controller", "listening", "on"], first
    return proc, first[3]


@pytest.mark.slow
@pytest.mark.timeout(300)  # two controllers or two drivers, real steps
def test_a_killed_controller_resumes_the_run_without_rerunning_finished_jobs(
    tmp_path: Path, keep_servers: KeepPool
) -> None:
    db = f"sqlite:///{tmp_path / 'ctl.db'}"
    engine = catalog.open_engine(db)
    catalog.upgrade(engine)
    if get_setting(engine, "blob_signing_key") is None:  # the keep servers' key
        with write(engine) as conn:
            conn.execute(
                settings.insert().values(
                    key="blob_signing_key", value=keep_servers.signing_key.decode()
                )
            )
    for s in keep_servers.servers:
        catalog.register_keep_service(engine, s.url)
    catalog.add_user(engine, "alice")
    token = catalog.create_token(engine, "alice")
    engine.dispose()
    make_lab(tmp_path)
    wf = write_diamond(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("WH_URL", "WH_TOKEN")}
    home = tmp_path / "ctl-home"
    proc, url = _serve(db, home, env)
    client = {**env, "WH_URL": url, "WH_TOKEN": token, "WH_HOME": str(tmp_path / "unused")}

    def wh(*args: str, url: str = url) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [WH_BIN, *args], env={**client, "WH_URL": url}, capture_output=True, text=True
        )

    try:
        d = tmp_path / "reads"
        d.mkdir()
        (d / "r.fq").write_text("@r\nACGT\n+\nIIII\n")
        assert wh("put", str(d), "--name", "reads").returncode == 0
        started = wh("workflow", "run", str(wf), "-i", "sleep=2", "--json")
        assert started.returncode == 0, started.stderr
        run_id = json_out(started.stdout)["id"]
        # Watched in the catalog itself: a `wh workflow show` per look takes seconds
        # on a loaded machine, long enough to miss b and c running (2 s).
        watch = catalog.open_engine(db)
        deadline = time.monotonic() + 90
        try:
            while True:
                nodes = {n.node: n.state for n in list_nodes(watch, run_id)}
                if nodes["a"] == "complete" and "running" in (nodes["b"], nodes["c"]):
                    break
                assert time.monotonic() < deadline, nodes
                time.sleep(0.05)
        finally:
            watch.dispose()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc2, url2 = _serve(db, home, env)
        try:
            again = wh("workflow", "run", str(wf), "-i", "sleep=2", "--wait", "--json", url=url2)
            assert again.returncode == 0, again.stderr
            view = json_out(again.stdout)
            assert view["state"] == "complete", view
            if view["id"] != run_id:
                # The restarted controller took the run up on its own and ended
                # it before this command arrived (a slow client start): the
                # command then makes a new run, in which every job is reused.
                first = wh("workflow", "show", str(run_id), "--json", url=url2)
                assert first.returncode == 0, first.stderr
                assert json_out(first.stdout)["state"] == "complete"
                assert all(n["reused"] for n in view["nodes"]), view["nodes"]
                view = json_out(first.stdout)
            else:
                assert view["resumed"], view
            # The steps are sandboxed, so the catalog counts their real runs.
            assert _jobs_that_ran(db, "a") == 1, "a finished before the kill: not run again"
            clean = wh("workflow", "run", str(wf), "-i", "sleep=0", "--wait", "--json", url=url2)
            assert clean.returncode == 0, clean.stderr
            clean_nodes = {n["node"]: n["output_pdh"] for n in json_out(clean.stdout)["nodes"]}
            assert {n["node"]: n["output_pdh"] for n in view["nodes"]} == clean_nodes
        finally:
            proc2.send_signal(signal.SIGTERM)
            proc2.wait(30)
            if proc2.stdout:
                proc2.stdout.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout:
            proc.stdout.close()
