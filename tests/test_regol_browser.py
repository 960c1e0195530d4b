"""The Regol chart in a real browser (Debian's chromium through Playwright):
one mark per run, filled for a success and hollow for a failure, a new colour
where the output changed, and a dashed line with hash and subject at each
commit. Screenshots go to test-artifacts/web/."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from browser_helpers import playwright_or_skip
from cluster import WH_BIN
from regol_helpers import make_repo
from test_web_browser import ARGS, ARTIFACTS, CHROMIUM

playwright = playwright_or_skip()

pytestmark = [pytest.mark.slow]


def wh(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([WH_BIN, *args], env=env, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture
def regol_web(tmp_path: Path) -> Iterator[tuple[str, str, list[str]]]:
    """`wh web` on a warehouse with one watch run at all 8 commits; (url, token, commits)."""
    env = {**os.environ, "WH_HOME": str(tmp_path / "home"), "WH_USER": "alice"}
    env.pop("WH_URL", None)
    commits = make_repo(tmp_path / "repo")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.txt").write_text("input\n")
    wh(env, "put", str(tmp_path / "in"), "--name", "input")
    spec = f"git:{tmp_path / 'repo'}@{commits[0]}:fn.py"
    wh(env, "job", "submit", spec, "--input", "input", "--attempts", "1", "--wait")
    wh(env, "regol", "watch", "1", "--label", "fn.py value")
    wh(env, "regol", "run", "--wait")
    proc = subprocess.Popen([WH_BIN, "web"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1]
        token = proc.stdout.readline().split()[-1]
        yield url, token, commits
    finally:
        proc.terminate()
        proc.wait(15)
        if proc.stdout:
            proc.stdout.close()


def test_the_chart_has_a_mark_per_run_with_the_right_fill_and_the_commit_lines(
    regol_web: tuple[str, str, list[str]],
) -> None:
    url, token, commits = regol_web
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
            page.set_default_timeout(20_000)
            page.goto(url + "regol")
            page.fill("input[name=token]", token)
            page.click("button[type=submit]")
            page.wait_for_url("**/web/regol")
            page.screenshot(path=str(ARTIFACTS / "regol-all.png"), full_page=True)
            page.click("svg.regol-history a")  # the row's label: the watch's own page
            page.wait_for_url("**/web/regol/1")
            page.screenshot(path=str(ARTIFACTS / "regol-watch.png"), full_page=True)

            marks = page.locator("svg.regol-history circle.mark")
            assert marks.count() == len(commits)
            by_commit = {
                marks.nth(i).get_attribute("data-commit"): marks.nth(i) for i in range(len(commits))
            }
            assert list(by_commit) == commits
            fills = [by_commit[c].evaluate("e => getComputedStyle(e).fill") for c in commits]
            strokes = [by_commit[c].evaluate("e => getComputedStyle(e).stroke") for c in commits]
            assert fills[6] == fills[7] == "none"  # commits 7 and 8 failed: hollow
            assert all(f.startswith("rgb(") for f in fills[:6])  # the rest succeeded: filled
            assert len(set(fills[:4])) == 1 and fills[4] == fills[5] != fills[0]  # new colour at 5
            assert strokes[6] == fills[5]  # a failure keeps the colour of the output before it
            assert page.locator("svg.regol-history circle.mark.changed").count() == 1
            assert by_commit[commits[4]].get_attribute("class") == "mark ok changed"
            assert "c5 changes the value" in (
                by_commit[commits[4]].locator("title").text_content() or ""
            )

            lines = page.locator("svg.regol-history g.commit")
            assert lines.count() == len(commits)
            assert lines.nth(0).locator("line.commit-line").get_attribute("stroke-dasharray")
            titles = [lines.nth(i).locator("title").text_content() for i in range(len(commits))]
            assert titles[6] == f"{commits[6][:10]} c7 breaks it"
            # Hash and subject show on hover: the line is the element under the pointer.
            box = lines.nth(2).locator("line.commit-hit").bounding_box()
            assert box is not None
            hit = page.evaluate(
                "([x, y]) => document.elementFromPoint(x, y).closest('g.commit').dataset.commit",
                [box["x"] + box["width"] / 2, box["y"] + 6],
            )
            assert hit == commits[2]
            assert page.locator("svg.regol-runtime circle.runtime-point").count() == len(commits)
            assert page.locator("table.runs tr.run.changed").count() == 1
        finally:
            browser.close()
