"""Workflow runs and lineage in a real browser: Playwright drives Debian's chromium
against `wh web` over a warehouse where `wh workflow run` ran a diamond twice.

The diamond A → B, A → C, {B, C} → D runs a git function; a fifth job,
`broken`, fails on purpose, so one run shows two states and the second run
shows A to D answered from reuse. Screenshots go to test-artifacts/web/.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from browser_helpers import playwright_or_skip
from cluster import WH_BIN
from lineage_helpers import function_repo, git
from test_web_browser import ARGS, ARTIFACTS, CHROMIUM

playwright = playwright_or_skip()

pytestmark = [pytest.mark.slow]

FAILS = "import sys\nprint('this job fails on purpose')\nsys.exit(3)\n"


def workflow_file(tmp: Path, repo: Path) -> Path:
    fn = f"git:{repo}@main"
    text = f"""workflow: diamond
inputs:
  raw: {{default: raw}}
jobs:
  A: {{function: "{fn}:tag.py", input: $raw, params: {{tag: A}}}}
  B: {{function: "{fn}:tag.py", input: $A, params: {{tag: B}}}}
  C: {{function: "{fn}:tag.py", input: $A, params: {{tag: C}}}}
  D: {{function: "{fn}:tag.py", input: {{b: $B, c: $C}}, params: {{tag: D}}}}
  broken: {{function: "{fn}:fails.py", input: $raw, resources: {{attempts: 1}}}}
outputs:
  d: $D
"""
    path = tmp / "diamond.wf.yml"
    path.write_text(text)
    return path


@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[str, str, dict[str, str]]]:
    """`wh web` over a warehouse with two runs of the diamond; its URL, token and env."""
    env = {**os.environ, "WH_HOME": str(tmp_path / "home"), "WH_USER": "alice"}
    env.pop("WH_URL", None)
    repo, _, _ = function_repo(tmp_path)
    (repo / "fails.py").write_text(FAILS)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "a function that fails")
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "reads.txt").write_text("acgt\n" * 50)
    subprocess.run([WH_BIN, "put", str(raw), "--name", "raw"], env=env, check=True)
    wf = workflow_file(tmp_path, repo)
    for _ in range(2):  # the second run reuses A to D; `broken` fails both times
        done = subprocess.run(
            [WH_BIN, "workflow", "run", str(wf), "--wait"], env=env, capture_output=True, text=True
        )
        assert done.returncode != 0 and "broken" in done.stderr, done.stderr
    proc = subprocess.Popen([WH_BIN, "web"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1]
        token = proc.stdout.readline().split()[-1]
        yield url, token, env
    finally:
        proc.terminate()
        proc.wait(15)
        if proc.stdout:
            proc.stdout.close()


def node_states(page: object) -> dict[str, tuple[str, str]]:
    """Each drawn job: (its state from the node's classes, the text it shows)."""
    out = {}
    for g in page.locator("svg.dag g.node").all():  # type: ignore[attr-defined]
        name = g.get_attribute("data-node").removeprefix("node:")
        state = re.search(r"state-(\w+)", g.get_attribute("class")).group(1)
        out[name] = (state, g.locator("text.detail").text_content())
    return out


def test_a_run_page_draws_the_dag_and_leads_to_jobs_and_lineage(
    web: tuple[str, str, dict[str, str]],
) -> None:
    url, token, env = web
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_context().new_page()
            page.set_default_timeout(20_000)
            page.goto(url + "workflows")
            page.fill("input[name=token]", token)
            page.click("button[type=submit]")
            page.wait_for_url("**/web/workflows")
            rows = page.locator("table.runs tbody tr")
            assert rows.count() == 2
            assert "4 reused" in rows.first.text_content()  # newest first
            page.screenshot(path=str(ARTIFACTS / "w1-runs.png"), full_page=True)

            page.click("table.runs a:text-is('1')")
            page.wait_for_url("**/web/workflows/1")
            first = node_states(page)
            assert first == {
                "A": ("complete", first["A"][1]),
                "B": ("complete", first["B"][1]),
                "C": ("complete", first["C"][1]),
                "D": ("complete", first["D"][1]),
                "broken": ("failed", first["broken"][1]),
            }
            assert all(text.startswith(state) for state, text in first.values())
            assert not any("reused" in text for _, text in first.values())
            assert page.locator("svg.dag path.edge").count() == 4  # A→B, A→C, B→D, C→D
            page.screenshot(path=str(ARTIFACTS / "w2-run.png"), full_page=True)

            page.goto(url + "workflows/2")
            second = node_states(page)
            for name in "ABCD":
                assert second[name][0] == "complete" and "reused" in second[name][1], second
            assert page.locator("svg.dag g.node.reused").count() == 4
            assert second["broken"][0] == "failed"
            page.screenshot(path=str(ARTIFACTS / "w3-run-reused.png"), full_page=True)

            page.goto(url + "workflows/1")
            page.click("svg.dag g.node[data-node='node:D']")
            page.wait_for_url("**/web/jobs/*")
            assert "run 1 (diamond), job D" in page.locator("dd.workflow-run").text_content()
            page.screenshot(path=str(ARTIFACTS / "w4-job.png"), full_page=True)

            page.click("a.output-lineage")
            page.wait_for_url("**/web/lineage/*")
            assert page.locator("svg.dag g.node.job").count() == 4  # A, B, C, D
            assert page.locator("svg.dag g.node.combined").count() == 1
            assert page.locator("table.lineage-jobs tbody tr").count() == 4
            page.screenshot(path=str(ARTIFACTS / "w5-lineage.png"), full_page=True)
            d_output = page.url.rsplit("/", 1)[-1]
            traced = subprocess.run(
                [WH_BIN, "lineage", d_output, "--json"], env=env, capture_output=True, check=True
            )
            places = [
                (w["run"], w["node"])
                for j in json.loads(traced.stdout)["jobs"]
                for w in j["workflows"]
            ]
            assert sorted(places) == [(1, "A"), (1, "B"), (1, "C"), (1, "D")]
            raw = page.locator("svg.dag g.node.put")
            assert raw.count() == 1 and raw.locator("text.label").text_content() == "raw"
            raw.click()  # the put: its collection page
            page.wait_for_url("**/web/c/*")
            assert "reads.txt" in page.content()
            page.click("a.lineage-down")
            page.wait_for_url("**/web/lineage/*direction=down")
            assert page.locator("svg.dag g.node.job").count() == 5  # A to D, and broken
        finally:
            browser.close()
