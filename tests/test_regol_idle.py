"""A controller runs Regol by itself only while no job waits: with a user job
running and another queued it submits nothing; once they are gone it runs
every commit of the watched branch, at the lowest priority."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from cluster import KeepPool, controller
from jobs_helpers import put_function
from regol_helpers import make_repo
from waiting import wait_for
from warehouse.errors import ForbiddenError
from warehouse.jobs import JobRequest
from warehouse.jobs.jobsview import RemoteJobs
from warehouse.regol.client import RemoteRegol
from warehouse.regol.model import REGOL_PRIORITY
from warehouse.remote.warehouse import RemoteWarehouse

SLEEPS = """#!/bin/sh
sleep 60
"""


def test_a_controller_starts_no_regol_run_while_a_user_job_is_queued(
    tmp_path: Path, keep_servers: KeepPool
) -> None:
    commits = make_repo(tmp_path / "repo")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.txt").write_text("input\n")
    with controller(tmp_path / "controller.db", keep_servers, regol_interval=0.1) as ctl:
        ctl.state.start_jobs(ctl.url, tmp_path / "controller-jobs", "local", cpus=1)
        assert ctl.state.regol_runner is not None
        with RemoteWarehouse(ctl.url, ctl.user("alice")) as wh:
            jobs, regol = RemoteJobs(wh), RemoteRegol(wh)
            key = wh.put([tmp_path / "in"]).pdh
            spec = f"git:{tmp_path / 'repo'}@{commits[0]}:fn.py"
            base = jobs.submit(JobRequest(spec, key, {}, max_attempts=1), executor=None)
            wait_for(lambda: jobs.get(base.id).state == "complete", "the first job to complete", 60)

            sleeper = put_function(wh, tmp_path, "sleeps.sh", SLEEPS)  # type: ignore[arg-type]
            running = jobs.submit(JobRequest(sleeper, key, {}), executor=None)
            queued = jobs.submit(JobRequest(sleeper, key, {"n": 2}), executor=None)
            wait_for(lambda: jobs.get(running.id).state == "running", "the user's job to run", 30)
            watch = regol.watch(base.id, "main", None)
            time.sleep(1.5)  # fifteen looks of the runner
            assert jobs.get(queued.id).state == "queued"
            assert regol.history(watch.id) == []
            assert {j.id for j in jobs.all()} == {base.id, running.id, queued.id}

            jobs.control(running.id, "cancel")
            jobs.control(queued.id, "cancel")
            # Pinning 8 commits' trees takes a while on a busy machine.
            wait_for(
                lambda: len(regol.history(watch.id)) == len(commits), "a regol run per commit", 120
            )
            runs = regol.history(watch.id)
            assert [r.commit for r in runs] == commits
            assert {jobs.get(r.job).priority for r in runs} == {REGOL_PRIORITY}
            assert {jobs.get(r.job).submitted_by for r in runs} == {"alice"}

            # The API is described, and only the owner (or an admin) may unwatch.
            spec = httpx.get(ctl.url + "/openapi.json", verify=False).json()
            assert "/api/v1/regol/watches/{watch_id}/bisect" in spec["paths"]
            bob = RemoteWarehouse(ctl.url, ctl.user("bob"))
            with bob, pytest.raises(ForbiddenError):
                RemoteRegol(bob).unwatch(watch.id)
            assert regol.unwatch(watch.id).active is False
