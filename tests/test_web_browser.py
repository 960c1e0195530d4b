"""The web pages in a real browser: Playwright drives Debian's chromium against `wh web`.

Sign in, open a collection, download a file (the bytes must equal the
original), submit a zhash job from the form, watch it finish, open its steps
and its output. Screenshots are kept in test-artifacts/web/.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from browser_helpers import CHROMIUM, playwright_or_skip
from cluster import WH_BIN
from jobs_helpers import make_compressed

playwright = playwright_or_skip()

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "web"

pytestmark = [pytest.mark.slow]


@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """`wh web` on a warehouse holding one collection named `sample`; (url, token, tree)."""
    home = tmp_path / "home"
    env = {**os.environ, "WH_HOME": str(home), "WH_USER": "alice"}
    env.pop("WH_URL", None)
    tree = make_compressed(tmp_path / "in")
    subprocess.run(
        [WH_BIN, "put", str(tree), "--name", "sample"], env=env, check=True, capture_output=True
    )
    proc = subprocess.Popen([WH_BIN, "web"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1]
        token = proc.stdout.readline().split()[-1]
        yield url, token, tree
    finally:
        proc.terminate()
        proc.wait(15)
        if proc.stdout:
            proc.stdout.close()
        # The job manager `wh web` started leaves once no job is left; wait for it.
        lock = home / "jobs" / "manager-local.lock"
        if lock.exists():
            import fcntl
            import time

            with open(lock, "ab") as f:
                deadline = time.monotonic() + 20
                while True:
                    try:
                        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        assert time.monotonic() < deadline, "the job manager did not stop"
                        time.sleep(0.1)


def test_sign_in_browse_download_submit_and_follow_a_job(
    web: tuple[str, str, Path], tmp_path: Path
) -> None:
    url, token, tree = web
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_context(accept_downloads=True).new_page()
            page.set_default_timeout(20_000)

            page.goto(url + "collections")
            assert page.locator("input[name=token]").count() == 1
            assert page.locator("text=sample").count() == 0  # nothing but the sign-in form
            page.screenshot(path=str(ARTIFACTS / "1-sign-in.png"))
            page.fill("input[name=token]", token)
            page.click("button[type=submit]")
            page.wait_for_url("**/web/collections")

            page.click("a:text-is('sample')")  # the name's page
            page.click("a.pdh")  # the collection it holds
            page.click("a:text-is('a/')")
            page.screenshot(path=str(ARTIFACTS / "2-collection.png"), full_page=True)
            row = page.locator("tr.file", has_text="one.gz")
            with page.expect_download() as fetched:
                row.locator("a:text-is('download')").click()
            saved = tmp_path / "downloaded"
            fetched.value.save_as(saved)
            assert saved.read_bytes() == (tree / "a" / "one.gz").read_bytes()

            page.click("nav >> text=Submit")
            page.select_option("select[name=function]", "builtin:zhash")
            page.fill("input[name=input]", "sample")
            page.fill("textarea[name=params]", "algorithm=sha256")
            page.screenshot(path=str(ARTIFACTS / "3-submit.png"), full_page=True)
            page.click("form.submit button[type=submit]")
            page.wait_for_url("**/web/jobs/*")
            # The page polls and reloads itself once the job has finished.
            page.wait_for_selector(".progress .state-complete", timeout=45_000)
            page.screenshot(path=str(ARTIFACTS / "4-job.png"), full_page=True)
            assert page.locator("table.steps tbody tr").count() >= 2
            assert page.locator("svg.timeline rect").count() >= 2

            page.locator("table.steps a:text-is('log')").first.click()
            assert page.locator("pre.log").count() == 1
            page.screenshot(path=str(ARTIFACTS / "5-step.png"), full_page=True)
            page.go_back()
            page.click("a.output")
            assert "sha256sum.txt" in page.content()
            page.screenshot(path=str(ARTIFACTS / "6-output.png"), full_page=True)
        finally:
            browser.close()
