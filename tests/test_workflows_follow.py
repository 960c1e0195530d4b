"""Following a workflow run cheaply (docs/workflows.md, "Following a run"):
versions in the catalog, ``GET /api/v1/workflows/{id}?since=&wait=`` on a
real controller, and ``wh workflow run --wait`` through it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result

from cluster import Controller, KeepPool, controller
from waiting import wait_for
from warehouse.cli import cli
from warehouse.server.controller import workflows as controller_workflows
from warehouse.workflows import runstore
from workflow_helpers import json_out, make_lab, write_diamond


def _run_with_nodes(engine: sa.Engine, names: list[str]) -> int:
    run = runstore.insert_run(
        engine,
        {
            "workflow": "w",
            "file_pdh": "d41d8cd98f00b204e9800998ecf8427e+0",
            "inputs": "{}",
            "pins": "{}",
            "state": "running",
            "owner": "alice",
            "run_key": "k",
        },
        [{"node": n, "function": "f", "depends_on": []} for n in names],
    )
    return run.id


def test_versions_name_what_changed_and_a_heartbeat_is_no_change(
    catalog_engine: sa.Engine,
) -> None:
    run_id = _run_with_nodes(catalog_engine, ["a", "b", "c"])
    whole = runstore.run_view(catalog_engine, run_id)
    assert whole["version"] == 0 and len(whole["nodes"]) == 3
    assert runstore.run_changes(catalog_engine, run_id, 0)["nodes"] == []
    runstore.update_nodes(catalog_engine, run_id, {}, {"heartbeat_at": time.time()})
    assert runstore.get_run(catalog_engine, run_id).version == 0
    runstore.update_nodes(catalog_engine, run_id, {"a": {"state": "queued"}})
    runstore.update_nodes(catalog_engine, run_id, {"b": {"state": "queued"}, "c": {}})
    changes = runstore.run_changes(catalog_engine, run_id, 0)
    assert changes["version"] == 2 and changes["since"] == 0
    assert [(n["node"], n["version"]) for n in changes["nodes"]] == [("a", 1), ("b", 2)]
    assert [n["node"] for n in runstore.run_changes(catalog_engine, run_id, 1)["nodes"]] == ["b"]
    runstore.add_nodes(
        catalog_engine, run_id, [{"node": "d", "function": "f", "depends_on": []}], first_position=3
    )
    assert [n["node"] for n in runstore.run_changes(catalog_engine, run_id, 2)["nodes"]] == ["d"]
    runstore.request_cancel(catalog_engine, run_id)
    assert runstore.get_run(catalog_engine, run_id).version == 4
    # Once ended, the answer is whole whatever was asked.
    runstore.update_nodes(catalog_engine, run_id, {}, {"state": "cancelled"})
    ended = runstore.run_changes(catalog_engine, run_id, 5)
    assert ended["state"] == "cancelled" and len(ended["nodes"]) == 4


class Lab:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.url = ctl.url
        self.alice = ctl.user("alice")
        self.bob = ctl.user("bob")


@pytest.fixture
def lab(tmp_path: Path, keep_servers: KeepPool) -> Iterator[Lab]:
    with controller(tmp_path / "controller.db", keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=4)
        yield Lab(c)


def _wh(lab: Lab, token: str, *args: str) -> Result:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("WH_")}
    env.update(WH_URL=lab.url, WH_TOKEN=token)
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, (args, result.output, result.stderr)
    return result


def _diamond(lab: Lab, tmp_path: Path) -> Path:
    make_lab(tmp_path)
    reads = tmp_path / "reads"
    reads.mkdir()
    (reads / "r.fq").write_text("@r\nACGT\n+\nIIII\n")
    _wh(lab, lab.alice, "put", str(reads), "--name", "reads")
    return write_diamond(tmp_path)


def _start(lab: Lab, tmp_path: Path, sleep: int) -> int:
    wf = _diamond(lab, tmp_path)
    out = _wh(lab, lab.alice, "workflow", "run", str(wf), "-i", f"sleep={sleep}", "--json").output
    run_id: int = json_out(out)["id"]
    return run_id


def _until(api: httpx.Client, run_id: int, ok: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while not ok(view := api.get(f"/api/v1/workflows/{run_id}").json()):
        assert time.monotonic() < deadline, view
        time.sleep(0.1)
    got: dict[str, Any] = view
    return got


def test_a_follower_gets_what_changed_and_its_wait_ends_with_the_run(
    lab: Lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One request of a user held at a time (16 by default): her second is
    # answered at once, and another user's is still held.
    monkeypatch.setattr(controller_workflows, "MAX_WAITING_EACH", 1)
    run_id = _start(lab, tmp_path, sleep=120)
    alice = {"Authorization": f"Bearer {lab.alice}"}
    bob = {"Authorization": f"Bearer {lab.bob}"}
    with (
        httpx.Client(base_url=lab.url, headers=alice, timeout=120) as api,
        httpx.Client(base_url=lab.url, headers=bob, timeout=120) as other,
    ):
        # a runs (for two minutes); b, c, d wait for it: nothing else changes.
        view = _until(api, run_id, lambda v: v["nodes"][0]["state"] == "running")
        url = f"/api/v1/workflows/{run_id}"
        changed = api.get(url, params={"since": 0}).json()
        assert [n["node"] for n in changed["nodes"]] == ["a"]
        assert changed["nodes"][0]["job_id"] == view["nodes"][0]["job_id"]
        now = view["version"]
        same = api.get(url, params={"since": now, "wait": 0.5}).json()
        assert (same["version"], same["nodes"], same["state"]) == (now, [], "running")
        with ThreadPoolExecutor(2) as pool:
            waiting = pool.submit(api.get, url, params={"since": now, "wait": 60})
            wait_for(lambda: _held("alice") == 1, "alice's request held", 60, 0.05)
            time.sleep(1.0)
            assert not waiting.done()  # nothing changed: still held
            # Her second is answered, unchanged, while her first is still held.
            again = api.get(url, params={"since": now, "wait": 60}).json()
            assert not waiting.done() and (again["version"], again["nodes"]) == (now, [])
            bobs = pool.submit(other.get, url, params={"since": now, "wait": 60})
            wait_for(lambda: _held("bob") == 1, "bob's request held", 60, 0.05)
            assert api.post(f"{url}/cancel").status_code == 200
            # The cancel asked is a change: both are answered (the run may not
            # have ended yet on a busy machine).
            first = waiting.result(timeout=120).json()
            assert first["version"] > now and bobs.result(timeout=120).json()["version"] > now
            ended = first
            deadline = time.monotonic() + 120
            while ended["state"] == "running":
                assert time.monotonic() < deadline, ended
                params = {"since": ended["version"], "wait": 60}
                ended = api.get(url, params=params).json()
    # The run's end is answered whole.
    assert ended["state"] == "cancelled"
    assert [n["state"] for n in ended["nodes"]] == ["cancelled"] * 4


def _held(user: str) -> int:
    # The controller runs in this process: its count of a user's held requests.
    return controller_workflows._waiting_by.get(user, 0)


def test_a_user_who_may_not_read_the_run_is_told_as_before_and_not_held(
    lab: Lab, tmp_path: Path
) -> None:
    _wh(lab, lab.ctl.admin_token, "perms-mode", "private")
    run_id = _start(lab, tmp_path, sleep=120)
    url = f"/api/v1/workflows/{run_id}"
    bob = {"Authorization": f"Bearer {lab.bob}"}
    with httpx.Client(base_url=lab.url, headers=bob, timeout=120) as api:
        plain = api.get(url)
        followed = api.get(url, params={"since": 0, "wait": 60})
        for r in (plain, followed):
            assert r.status_code == 404 and r.json()["error"] == f"no workflow run {run_id}"
        for bad in ({"since": -1}, {"since": 0, "wait": 61}, {"since": 2**31}):
            assert api.get(url, params=bad).status_code == 400, bad
        _wh(lab, lab.alice, "share", f"run:{run_id}", "bob")
        view = _until(api, run_id, lambda v: v["nodes"][0]["state"] == "running")
        changed = api.get(url, params={"since": 0, "wait": 60}).json()
        assert [n["node"] for n in changed["nodes"]] == ["a"]
        _wh(lab, lab.alice, "workflow", "cancel", str(view["id"]))


def test_wh_workflow_run_wait_follows_the_run_to_its_end(lab: Lab, tmp_path: Path) -> None:
    wf = _diamond(lab, tmp_path)
    done = _wh(lab, lab.alice, "workflow", "run", str(wf), "--wait")
    # A line per job as it ends (steps done), then the summary from the whole run.
    for node in "abcd":
        assert any(
            line.split()[:2] == [node, "complete"] and line.endswith("1 step")
            for line in done.stderr.splitlines()
        ), done.stderr
    assert "4 jobs ran (4 steps), 0 reused, of 4" in done.stdout
    assert "final: " in done.stdout
