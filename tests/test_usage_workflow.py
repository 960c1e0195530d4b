"""Issue 34's must-holds, checked as a new user would (docs/usage.md): a
workflow of three jobs run through a real ``wh serve``, its usage by
``wh usage --workflow R --json`` against what each step measured of itself,
its cost by the shipped EC2 table against a figure computed here by hand,
the same after the controller is restarted, through the CLI, the API and
the run's page."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster import WH_BIN
from test_serve_restart import wh
from warehouse.remote.api import ApiClient

PRICES = Path(__file__).resolve().parent.parent / "examples" / "prices"
EC2 = PRICES / "ec2-2010.toml"

# Reads every file of its input whole, burns the CPU seconds it is asked
# for, writes one file of the size asked, and reports what it measured of
# itself: its CPU time (the process's own clock: a forked or exec'd step
# starts at 0) and its wall time from its process's start (/proc), in ms.
# It burns 4 s so that its exit, which it cannot time itself (0.3 s on a
# loaded machine), stays well inside the 10% the usage must agree to.
_WORK = """
import os, time
from warehouse import step

params = step.params()
reader = step.reader()
for path in sorted(reader.files):
    reader.read_file(path)
start = time.process_time()
while time.process_time() - start < float(params["burn"]):
    sum(i * i for i in range(1000))
out = step.StreamWriter(".")
out.add_file(params["name"], [os.urandom(int(params["size"]))])
step.output(out.finish())
with open("/proc/self/stat") as f:
    began = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
with open("/proc/uptime") as f:
    wall = float(f.read().split()[0]) - began
step.counters(own_cpu_ms=int(time.process_time() * 1000), own_wall_ms=int(wall * 1000))
"""

_FLOW = """
workflow: three
inputs:
  data:
jobs:
  first:
    function: {fn}
    input: $data
    params: {{burn: 4.0, name: first.bin, size: 300000}}
  second:
    function: {fn}
    input: $first
    params: {{burn: 4.0, name: second.bin, size: 200000}}
  third:
    function: {fn}
    input: {{a: $first, b: $second}}
    params: {{burn: 4.0, name: third.bin, size: 1000}}
"""


@contextmanager
def serving(env: dict[str, str], log: Path) -> Iterator[str]:
    """``wh serve`` with one keep server and a local job manager; its URL."""
    with open(log, "a") as err:
        proc = subprocess.Popen(
            [WH_BIN, "serve", "--listen", "127.0.0.1:0", "--keep", "1", "--job-cpus", "2"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().split()
        assert first[:3] == ["controller", "listening", "on"], (first, log.read_text())
        assert proc.stdout.readline().startswith("keepd listening on ")
        yield first[3]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        if proc.stdout:
            proc.stdout.close()


def api_steps(url: str, token: str, job: int) -> list[dict[str, Any]]:
    api = ApiClient(url, token)
    try:
        found = api.get(f"/jobs/{job}/steps")
    finally:
        api.close()
    return list(found["steps"] if isinstance(found, dict) else found)


def _serve_env(tmp_path: Path) -> dict[str, str]:
    # The pages price with the shipped EC2 table.
    env = {**os.environ, "WH_HOME": str(tmp_path / "home"), "WH_PRICES": str(EC2)}
    env.pop("WH_URL", None)
    return env


def _usage_page_figures(page: str) -> tuple[str, str, str]:
    """A job page's usage section: its CPU and wall seconds, its input bytes."""
    cpu = re.search(r'<span class="usage-cpu">([0-9.]+) CPU seconds', page)
    wall = re.search(r'<span class="usage-wall">([0-9.]+) wall seconds', page)
    given = re.search(r'<span class="usage-input">([0-9]+) bytes', page)
    assert cpu and wall and given, page[:2000]
    return cpu.group(1), wall.group(1), given.group(1)


@pytest.mark.slow
def test_a_three_job_workflows_usage_and_cost_hold_across_a_restart(tmp_path: Path) -> None:
    env = _serve_env(tmp_path)
    log = tmp_path / "serve.log"
    admin = wh(env, "user", "add", "admin", "--admin").strip()
    fn_dir = tmp_path / "fn"
    fn_dir.mkdir()
    (fn_dir / "work.py").write_text(_WORK)
    data = tmp_path / "data"
    data.mkdir()
    sizes = {"a.bin": 1_000_000, "b.bin": 70_000, "c.txt": 0}
    for name, size in sizes.items():
        (data / name).write_bytes(os.urandom(size))
    flow = tmp_path / "three.wf.yml"
    with serving(env, log) as url:
        remote = {**env, "WH_URL": url, "WH_TOKEN": admin}
        fn = wh(remote, "put", str(fn_dir)).strip() + "/work.py"
        wh(remote, "put", str(data), "--name", "data")
        flow.write_text(_FLOW.format(fn=fn))
        ran = json.loads(
            wh(remote, "workflow", "run", str(flow), "-i", "data=data", "--wait", "--json")
        )
        assert ran["state"] == "complete", ran
        run_id = ran["id"]
        before = json.loads(wh(remote, "usage", "--workflow", str(run_id), "--json"))
    jobs_of_run = before["jobs"]
    assert len(jobs_of_run) == 3
    with serving(env, log) as url:
        remote = {**env, "WH_URL": url, "WH_TOKEN": admin}
        after = json.loads(wh(remote, "usage", "--workflow", str(run_id), "--json"))
        api = ApiClient(url, admin)
        try:
            through_api = api.get("/usage", workflow=run_id)
            runs_api = api.get("/usage/runs", user="admin")
        finally:
            api.close()
        steps = {j["job"]: api_steps(url, admin, j["job"]) for j in jobs_of_run}
        ec2 = json.loads(
            wh(remote, "cost", "--prices", str(EC2), "--workflow", str(run_id), "--json")
        )
        per_second_table = tmp_path / "ec2-per-second.toml"
        per_second_table.write_text(
            EC2.read_text().replace('billing = "hour"', 'billing = "second"')
        )
        per_second = json.loads(
            wh(
                remote,
                "cost",
                "--prices",
                str(per_second_table),
                "--months",
                "1",
                "--workflow",
                str(run_id),
                "--json",
            )
        )
        with httpx.Client(base_url=url, timeout=30) as web:
            signed = web.post("/web/signin", data={"token": admin, "next": "/web/jobs"})
            assert signed.status_code == 303, signed.text
            pages = {j["job"]: web.get(f"/web/jobs/{j['job']}").text for j in jobs_of_run}
            run_page = web.get(f"/web/workflows/{run_id}").text
            user_page = web.get("/web/users/admin").text
    # Usage survives the restart, and the API gives what the CLI does.
    assert after == before
    assert {k: through_api[k] for k in ("jobs", "total")} == {
        k: before[k] for k in ("jobs", "total")
    }
    for job in jobs_of_run:
        (step,) = steps[job["job"]]
        own = json.loads(step["counters"])
        assert job["cpu_seconds"] == pytest.approx(own["own_cpu_ms"] / 1000, rel=0.1)
        assert job["wall_seconds"] == pytest.approx(own["own_wall_ms"] / 1000, rel=0.1)
        assert _usage_page_figures(pages[job["job"]]) == (
            f"{job['cpu_seconds']:.2f}",
            f"{job['wall_seconds']:.2f}",
            str(job["input_bytes"]),
        )
    # The run's page: its total as `wh usage` and `wh cost` give it, one
    # row of bars (CPU, bytes, cost) per job; the user's page: the run.
    assert _usage_page_figures(run_page) == (
        f"{before['total']['cpu_seconds']:.2f}",
        f"{before['total']['wall_seconds']:.2f}",
        str(before["total"]["input_bytes"]),
    )
    assert f'<span class="usage-cost">{Decimal(ec2["total"]):.6f} USD</span>' in run_page
    for kind in ("cpu", "bytes", "cost"):
        assert run_page.count(f'<rect class="{kind}"') == 3, kind
    assert run_page.count('<tr class="usage-row">') == 3
    assert f"run {run_id}: three" in user_page
    assert user_page.count('<rect class="cost"') == 2  # all the jobs; the one run
    (row,) = runs_api["runs"]
    assert row["run"] == run_id and row["workflow"] == "three"
    assert {k: row[k] for k in before["total"]} == before["total"] == runs_api["total"]
    # Bytes read are the inputs' sizes: the data, then each job's output.
    by_order = sorted(jobs_of_run, key=lambda j: j["job"])
    assert [j["input_bytes"] for j in by_order] == [
        sum(sizes.values()),
        300_000,
        300_000 + 200_000,
    ]
    # The cost by hand: c1.xlarge, 8 cpus, $0.68 an hour begun; each job
    # held 1 cpu for its wall seconds.
    node_seconds = Decimal(repr(before["total"]["wall_seconds"])) / 8
    hours = math.ceil(node_seconds / 3600)
    assert ec2["billing"] == "hour" and ec2["node"] == "c1.xlarge"
    assert Decimal(ec2["total"]) == hours * Decimal("0.68") == Decimal("0.68")
    # Per second, with what the steps wrote kept a month at $0.15 a GB-month.
    written = sum(j["written_bytes"] for j in jobs_of_run)
    by_hand = node_seconds / 3600 * Decimal("0.68") + Decimal(written) / 10**9 * Decimal("0.15")
    assert Decimal(per_second["total"]) == by_hand
