"""The controller's /metrics (prometheus_client): latencies, jobs and steps, the process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster import Controller, KeepPool, controller
from warehouse.jobs.jobstore import insert_job


@pytest.fixture
def ctl(tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(tmp_path / "c.db", keep_servers) as c:
        yield c


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_count_requests_jobs_and_the_process(ctl: Controller) -> None:
    for _ in range(3):
        assert httpx.get(ctl.url + "/api/v1/health", verify=False).status_code == 200
    assert httpx.get(ctl.url + "/api/v1/jobs/12345", verify=False).status_code == 401
    insert_job(
        ctl.state.engine,
        {
            "function": "builtin:zhash",
            "function_pdh": "d41d8cd98f00b204e9800998ecf8427e+0",
            "function_path": "zhash.py",
            "function_commit": None,
            "input_pdh": "d41d8cd98f00b204e9800998ecf8427e+0",
            "params": "{}",
            "cpus": 1,
            "memory": 0,
            "max_attempts": 3,
            "priority": 0,
            "executor": "nowhere",
            "reuse_key": "x" * 64,
            "submitted_by": "root",
            "state": "running",
        },
    )
    answer = httpx.get(ctl.url + "/metrics", verify=False)  # open, as keepd's is
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    got = _samples(answer.text)
    health = (("code", "200"), ("method", "GET"), ("route", "/api/v1/health"))
    assert got["wh_controller_request_seconds_count", health] == 3
    inf = (("code", "200"), ("le", "+Inf"), ("method", "GET"), ("route", "/api/v1/health"))
    assert got["wh_controller_request_seconds_bucket", inf] == 3
    refused = (("code", "401"), ("method", "GET"), ("route", "/api/v1/jobs/{job_id}"))
    assert got["wh_controller_request_seconds_count", refused] == 1  # the template, not the id
    assert got["wh_controller_jobs", (("state", "running"),)] == 1
    assert got["process_resident_memory_bytes", ()] > 0
    assert "/metrics" not in httpx.get(ctl.url + "/openapi.json", verify=False).json()["paths"]
