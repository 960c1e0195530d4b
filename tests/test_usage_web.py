"""The usage section of a job's page: the same figures as ``wh usage`` (docs/usage.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from conftest import Runner
from jobs_helpers import make_text, run_job
from warehouse import jobs
from warehouse.cli.web import sign_in_token
from warehouse.embedded import EmbeddedWarehouse
from warehouse.server.serving import ServerThread
from warehouse.web import create_web_app


def sign_in(url: str, token: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=30)
    answer = client.post("/web/signin", data={"token": token, "next": "/web/jobs"})
    assert answer.status_code == 303, answer.text
    return client


def test_a_jobs_page_shows_its_usage_as_wh_usage_sums_it(
    wh: EmbeddedWarehouse, tmp_path: Path, run: Runner
) -> None:
    job = run_job(wh, "builtin:wordcount", wh.put([make_text(tmp_path / "in")]).pdh)
    assert job.state == "complete"
    total = json.loads(run("usage", "--job", str(job.id), "--json").stdout)["total"]
    levels = {s.level for s in jobs.list_steps(wh.engine, job.id)}
    with ServerThread(create_web_app(wh)) as server:
        client = sign_in(server.url, sign_in_token(wh))
        try:
            page = client.get(f"/web/jobs/{job.id}").text
            unmeasured = client.get("/web/jobs/999999")
        finally:
            client.close()
    assert "<h2>Usage</h2>" in page
    assert f"{total['cpu_seconds']:.2f} CPU seconds" in page
    assert f"{total['wall_seconds']:.2f} wall seconds" in page
    chart = page[
        page.index('<svg class="usage-chart"') : page.index("</svg>", page.index("usage-chart"))
    ]
    # Two bars a level: its wall seconds and its CPU seconds.
    assert len(re.findall(r'<rect class="wall"', chart)) == len(levels)
    assert len(re.findall(r'<rect class="cpu"', chart)) == len(levels)
    assert unmeasured.status_code == 404
