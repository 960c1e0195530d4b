"""``wh usage`` and ``wh cost``, embedded and through a controller (docs/usage.md)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from cluster import Controller, KeepPool, controller
from conftest import Runner
from jobs_helpers import job_row, make_text, run_job
from warehouse import jobs
from warehouse.catalog.db import write
from warehouse.catalog.schema import steps, workflow_nodes, workflow_runs
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs import jobstore

PRICES = Path(__file__).resolve().parent.parent / "examples" / "prices"
EC2 = str(PRICES / "ec2-2010.toml")
FREE_FACTORY = str(PRICES / "free-factory-2008.toml")


def _step(job: int, number: int, wall: float, cpu: float, **more: Any) -> dict[str, Any]:
    return {
        "job": job,
        "number": number,
        "level": 0 if number == 0 else 1,
        "input": "",
        "state": "done",
        "attempts": 1,
        "failures": 0,
        "exit_status": 0,
        "started_at": 1000.0 * (number + 1),
        "finished_at": 1000.0 * (number + 1) + wall,
        "cpu_seconds": cpu,
        "wall_seconds": wall,
        "peak_memory": 100 * (number + 1),
        "read_bytes": 10,
        "written_bytes": 10**9,
        **more,
    }


def _known(engine: sa.Engine) -> tuple[int, int]:
    """Two finished jobs with known usage: alice's asked 4 cpus, two steps of
    an hour each (1 node-hour on an 8-cpu node); bob's 8 cpus, one step of
    half an hour (0.5 node-hour). Alice's is a workflow run's."""
    a, b = (
        r.id
        for r in jobstore.insert_jobs(
            engine, [job_row(cpus=4, submitted_by="alice"), job_row(cpus=8, submitted_by="bob")]
        )
    )
    with write(engine) as conn:
        conn.execute(
            steps.insert(),
            [
                _step(a, 0, 3600.0, 3000.0),
                _step(a, 1, 3600.0, 3500.5, attempts=2, peak_memory=7000),
                _step(b, 0, 1800.0, 1700.0),
                # Never run: not measured, not counted.
                {**_step(b, 1, 0.0, 0.0), "state": "queued", "wall_seconds": None},
            ],
        )
        run = conn.execute(
            workflow_runs.insert().values(
                workflow="w",
                file_pdh="d41d8cd98f00b204e9800998ecf8427e+0",
                inputs="{}",
                pins="{}",
                state="complete",
                owner="alice",
                created_at=1.0,
                run_key="k",
            )
        ).inserted_primary_key[0]  # type: ignore[index]
        conn.execute(
            workflow_nodes.insert().values(
                run_id=run,
                node="n",
                position=0,
                function="builtin:copy",
                job_id=a,
                state="complete",
                reused=False,
                depends_on="[]",
            )
        )
    return a, b


def _json(run: Runner, *args: str) -> Any:
    return json.loads(run(*args, "--json").stdout)


def _check_sums(run: Runner, a: int, b: int) -> None:
    found = _json(run, "usage")
    assert [j["job"] for j in found["jobs"]] == [a, b]
    total = found["total"]
    assert total["steps"] == 3 and total["attempts"] == 4
    assert total["cpu_seconds"] == 8200.5
    assert total["wall_seconds"] == 9000.0
    assert total["reserved_seconds"] == 4 * 7200.0 + 8 * 1800.0
    assert total["peak_memory"] == 7000
    assert total["read_bytes"] == 30 and total["written_bytes"] == 3 * 10**9
    assert _json(run, "usage", "--user", "bob")["total"]["cpu_seconds"] == 1700.0
    assert _json(run, "usage", "--job", str(a))["total"]["steps"] == 2
    assert [j["job"] for j in _json(run, "usage", "--workflow", "1")["jobs"]] == [a]
    # Steps finished at 5000 s or later: alice's second, at 5600 s.
    assert _json(run, "usage", "--since", "5000")["total"]["cpu_seconds"] == 3500.5

    # EC2, hourly: 1.5 node-hours of c1.xlarge billed as 2, at $0.68.
    ec2 = _json(run, "cost", "--prices", EC2)
    assert ec2["node"] == "c1.xlarge" and ec2["total"] == "1.36"
    # With the 3 GB written kept a month, at $0.15 per GB-month.
    assert Decimal(_json(run, "cost", "--prices", EC2, "--months", "1")["total"]) == Decimal(
        "1.36"
    ) + 3 * Decimal("0.15")
    # The Free Factory, per second: 1.5 node-hours at its derived price.
    per_hour = (Decimal(170000) / 3 + 102000) / (48 * 8760)
    assert (
        Decimal(_json(run, "cost", "--prices", FREE_FACTORY)["total"]) == Decimal("1.5") * per_hour
    )
    text = run("cost", "--prices", EC2).stdout
    assert "compute" in text and "total: 1.36 USD" in text


def test_usage_and_cost_sum_and_price_known_steps(wh: EmbeddedWarehouse, run: Runner) -> None:
    a, b = _known(wh.engine)
    _check_sums(run, a, b)


@pytest.fixture
def ctl(
    tmp_path: Path, keep_servers: KeepPool, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Controller]:
    with controller(tmp_path / "controller.db", keep_servers) as c:
        monkeypatch.setenv("WH_URL", c.url)
        monkeypatch.setenv("WH_TOKEN", c.user("alice"))
        monkeypatch.setenv("WH_HOME", str(tmp_path / "unused-home"))
        yield c


def test_usage_and_cost_through_a_controller_are_the_same(ctl: Controller, run: Runner) -> None:
    a, b = _known(ctl.state.engine)
    _check_sums(run, a, b)


def test_a_real_jobs_usage_is_its_steps_summed(
    wh: EmbeddedWarehouse, tmp_path: Path, run: Runner
) -> None:
    job = run_job(wh, "builtin:wordcount", wh.put([make_text(tmp_path / "in")]).pdh)
    assert job.state == "complete"
    found = jobs.list_steps(wh.engine, job.id)
    total = _json(run, "usage", "--job", str(job.id))["total"]
    assert total["steps"] == len(found) > 1
    assert total["cpu_seconds"] == pytest.approx(sum(s.cpu_seconds or 0 for s in found))
    assert total["wall_seconds"] == pytest.approx(sum(s.wall_seconds or 0 for s in found))
    assert total["peak_memory"] == max(s.peak_memory or 0 for s in found) > 0
    assert total["read_bytes"] == sum(s.read_bytes or 0 for s in found) > 0
    # Its wall seconds are within its steps' own start and end times (the
    # manager's, which hold each attempt's: a window on how much longer they
    # are would only measure how busy the machine was).
    spans = [s.finished_at - s.started_at for s in found if s.finished_at and s.started_at]
    assert len(spans) == len(found)
    assert 0 < total["wall_seconds"] <= sum(spans)


def test_a_bad_price_table_is_one_error_line(run: Runner, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(Path(EC2).read_text().replace("per_hour = 0.68", 'per_hour = "cheap"'))
    err = run("cost", "--prices", str(bad), code=2).stderr
    assert err == f"Error: {bad} line 16: nodes.c1.xlarge.per_hour: must be a number, not 'cheap'\n"
    err = run("cost", "--prices", str(tmp_path / "none.toml"), code=2).stderr
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    assert "cannot read the price table" in err
    err = run("cost", "--prices", EC2, "--node", "m9", code=2).stderr
    assert err.startswith("Error: node: 'm9' is not a node kind"), err
    err = run("usage", "--since", "soon", code=2).stderr
    assert err.startswith("Error: since: 'soon' is no time"), err


def test_in_private_mode_a_user_sums_only_the_jobs_they_may_read(
    ctl: Controller, run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = _known(ctl.state.engine)
    bob = ctl.user("bob")
    monkeypatch.setenv("WH_TOKEN", ctl.admin_token)
    run("perms-mode", "private")
    assert [j["job"] for j in _json(run, "usage")["jobs"]] == [a, b]  # an admin reads all
    monkeypatch.setenv("WH_TOKEN", bob)
    found = _json(run, "usage")
    assert [j["job"] for j in found["jobs"]] == [b]
    assert found["total"]["cpu_seconds"] == 1700.0
    assert _json(run, "usage", "--job", str(a))["jobs"] == []
    assert _json(run, "cost", "--prices", EC2, "--user", "alice")["total"] == "0.00"


def test_a_controllers_sandboxed_steps_are_measured(
    tmp_path: Path, keep_servers: KeepPool, monkeypatch: pytest.MonkeyPatch, run: Runner
) -> None:
    with controller(tmp_path / "controller.db", keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=2)
        monkeypatch.setenv("WH_URL", c.url)
        monkeypatch.setenv("WH_TOKEN", c.user("alice"))
        monkeypatch.setenv("WH_HOME", str(tmp_path / "unused-home"))
        run("put", str(make_text(tmp_path / "in")), "--name", "text")
        out = run("job", "submit", "builtin:wordcount", "--input", "text", "--wait", "--json")
        job = json.loads(out.stdout[out.stdout.index("{") :])
        assert job["state"] == "complete"
        found = _json(run, "usage", "--job", str(job["id"]))
        steps_run = run("job", "show", str(job["id"]), "--json").stdout
        assert found["total"]["steps"] == json.loads(steps_run)["steps_done"] > 1
        assert found["total"]["cpu_seconds"] > 0
        assert found["total"]["peak_memory"] > 0
        assert found["total"]["read_bytes"] > 0


def test_in_private_mode_run_usage_and_the_user_page_show_only_what_one_may_read(
    ctl: Controller, run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx

    from warehouse.remote.api import ApiClient

    _known(ctl.state.engine)
    alice, bob = os.environ["WH_TOKEN"], ctl.user("bob")  # the fixture made alice
    monkeypatch.setenv("WH_TOKEN", ctl.admin_token)
    run("perms-mode", "private")
    monkeypatch.setenv("WH_PRICES", EC2)

    def runs_of(token: str) -> Any:
        api = ApiClient(ctl.url, token)
        try:
            return api.get("/usage/runs", user="alice")
        finally:
            api.close()

    def user_page(token: str) -> str:
        with httpx.Client(base_url=ctl.url, timeout=30) as web:
            signed = web.post("/web/signin", data={"token": token, "next": "/web/jobs"})
            assert signed.status_code == 303, signed.text
            return web.get("/web/users/alice").text

    (row,) = runs_of(alice)["runs"]
    # Alice's run ran job a: two steps of an hour, 4 cpus each.
    assert row["run"] == 1 and row["user"] == "alice" and row["steps"] == 2
    assert row["reserved_seconds"] == 4 * 7200.0
    assert runs_of(ctl.admin_token)["runs"] == [row]
    assert runs_of(bob) == {"runs": [], "total": runs_of(bob)["total"]}
    assert runs_of(bob)["total"]["steps"] == 0
    mine = user_page(alice)
    assert "run 1: w" in mine and mine.count('<tr class="usage-row">') == 2  # jobs; the run
    # c1.xlarge: 2 hours of 4 cpus are 1 node-hour of 8 cpus, at $0.68: in
    # the jobs' chart and in the runs'.
    assert mine.count('<span class="usage-cost">0.680000 USD</span>') == 2
    theirs = user_page(bob)
    assert "run 1: w" not in theirs and '<tr class="usage-row">' not in theirs
    assert "0 jobs with measured steps" in theirs and theirs.count("No measured steps.") == 2
