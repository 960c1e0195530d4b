"""A `wh cwl run` killed outright (SIGKILL) mid-run: its run ends `failed`, its
node's job is cancelled and its step does not keep running, embedded (ended
when next looked at) and through a controller (ended once its heartbeat is
stale) (docs/cwl.md, "The run")."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import Controller, KeepPool, controller
from cwl_helpers import cwltool_installed  # noqa: F401 (autouse fixture)
from permission_helpers import api_as
from waiting import processes, wait_for
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs.jobstore import get_job
from warehouse.workflows.driver import STALE_AFTER

BIN = Path(sys.executable).parent
_PATIENCE = 180  # a guard against a hang: runners and controllers start slowly under load


def _slow_tool(d: Path) -> tuple[Path, str]:
    """A tool sleeping for a duration no other process has: found in /proc by it."""
    marker = f"{3000 + secrets.randbelow(1000)}.{secrets.randbelow(10**6):06d}"
    tool = d / "slow.cwl"
    tool.write_text(
        "cwlVersion: v1.2\nclass: CommandLineTool\n"
        f"baseCommand: [sleep, '{marker}']\ninputs: []\noutputs: []\n"
    )
    return tool, marker


def _steps(marker: str) -> list[int]:
    """The processes running the step: `sleep MARKER`."""
    return processes(marker, program="sleep")


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


@pytest.mark.timeout(400)
def test_a_killed_embedded_runner_ends_its_run_and_its_step(home: Path, tmp_path: Path) -> None:
    tool, marker = _slow_tool(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("WH_URL", "WH_TOKEN")}
    env["WH_HOME"] = str(home)
    wh_bin = str(BIN / "wh")

    def show() -> dict[str, Any]:
        out = subprocess.run(
            [wh_bin, "workflow", "show", "1", "--json"], env=env, capture_output=True, text=True
        )
        return json.loads(out.stdout) if out.returncode == 0 else {}

    runner = subprocess.Popen(
        [wh_bin, "cwl", "run", str(tool)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        wait_for(lambda: _steps(marker), "the step to run", _PATIENCE)
        wait_for(lambda: show().get("nodes"), "its node", _PATIENCE)
        assert show()["state"] == "running"  # looked at alive: kept
        _kill(runner)
    finally:
        runner.kill()
        runner.wait()
    run = show()  # looking at it ends it: nothing else would, embedded
    assert run["state"] == "failed", run
    assert "its runner" in str(run["error"]) and "stopped" in str(run["error"])
    (node,) = run["nodes"]
    assert node["state"] == "cancelled"
    wait_for(lambda: not _steps(marker), "no step process left", _PATIENCE)
    with EmbeddedWarehouse(home) as wh:
        wait_for(
            lambda: get_job(wh.engine, node["job_id"]).state == "cancelled",
            "its job cancelled",
            _PATIENCE,
        )


@pytest.fixture
def ctl(catalog_url: str, tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(catalog_url, keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=2)
        yield c


@pytest.mark.timeout(400)
def test_a_killed_runner_of_a_controller_run_ends_it_and_its_step(
    ctl: Controller, tmp_path: Path
) -> None:
    alice = ctl.user("alice")
    tool, marker = _slow_tool(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    env.update(WH_URL=ctl.url, WH_TOKEN=alice)
    runner = subprocess.Popen(
        [str(BIN / "wh"), "cwl", "run", str(tool)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    with api_as(ctl, alice) as api:

        def run() -> dict[str, Any]:
            got = api.get("/api/v1/workflows/1")
            return dict(got.json()) if got.status_code == 200 else {}

        try:
            wait_for(lambda: _steps(marker), "the step to run", _PATIENCE)
            wait_for(lambda: run().get("nodes"), "its node", _PATIENCE)
            # Alive, its heartbeat keeps its run past the time a silent one is
            # ended in (its one node changes nothing meanwhile).
            started = float(run()["started_at"])
            wait_for(
                lambda: time.time() > started + STALE_AFTER + 3, "a silent run's end", _PATIENCE
            )
            assert run()["state"] == "running"
            _kill(runner)
        finally:
            runner.kill()
            runner.wait()
        wait_for(lambda: run()["state"] != "running", "the run to end", _PATIENCE)
        ended = run()
        assert ended["state"] == "failed" and "its runner" in str(ended["error"]), ended
        (node,) = ended["nodes"]
        assert node["state"] == "cancelled"
        job = node["job_id"]
        wait_for(
            lambda: api.get(f"/api/v1/jobs/{job}").json()["state"] == "cancelled",
            "its job cancelled",
            _PATIENCE,
        )
    wait_for(lambda: not _steps(marker), "no step process left", _PATIENCE)
