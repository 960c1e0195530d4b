"""Pages in a real browser (Debian's chromium through Playwright).

The OpenAPI page works offline: every request it makes goes to the controller.
A job page: a failed job's bar and log tail; the step table and timeline
follow a running job. A text and an image previewed, a folder downloaded as zip.
"""

from __future__ import annotations

import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from browser_helpers import CHROMIUM, playwright_or_skip
from cluster import Controller, KeepPool, controller
from jobs_helpers import make_text, put_function, run_job
from test_web_preview import PNG
from warehouse import jobs
from warehouse.cli.web import sign_in_token
from warehouse.embedded import EmbeddedWarehouse
from warehouse.server.serving import ServerThread
from warehouse.web import create_web_app

playwright = playwright_or_skip()

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]

pytestmark = [pytest.mark.slow]


@pytest.fixture
def ctl(tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(tmp_path / "c.db", keep_servers) as c:
        yield c


def test_openapi_page_loads_swagger_ui_from_the_controller(ctl: Controller) -> None:
    html = httpx.get(ctl.url + "/docs", verify=False).text
    assert "swagger-ui-bundle.js" in html
    assert "https://" not in html and "http://" not in html  # no CDN, no external favicon
    hosts: set[str] = set()
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(20_000)
            page.on("request", lambda r: hosts.add(urlsplit(r.url).netloc))
            page.goto(ctl.url + "/docs")
            # Swagger UI ran: it fetched the description and drew its operations.
            page.wait_for_selector(".swagger-ui .opblock")
            assert "/api/v1/collections" in page.content()
            assert (
                page.locator(".swagger-ui .info .title")
                .inner_text()
                .startswith("Free Factory warehouse")
            )
        finally:
            browser.close()
    assert hosts == {urlsplit(ctl.url).netloc}
    assert httpx.get(ctl.url + "/docs/static/core.py", verify=False).status_code == 404


FAILS = """#!/bin/sh
echo "boom: cannot read $WH_STEP_INPUT" >&2
exit 7
"""

# Step 0 queues three steps; the one named "slow-c" outlasts the others (it waits
# until the test has seen the page mid-job with some steps done, and says so by
# creating the file RELEASE; at most 60 s), so the page is seen mid-job.
FANS_OUT = """#!/bin/sh
set -e
if [ "$WH_STEP" = 0 ]; then
    wh step queue --level 1 fast-a fast-b slow-c
    exit 0
fi
case "$WH_STEP_INPUT" in
slow-*) i=0; while [ ! -e 'RELEASE' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done ;;
esac
printf '%s\\n' "$WH_STEP_INPUT" > "$WH_SCRATCH/$WH_STEP.txt"
pdh=$(wh put "$WH_SCRATCH/$WH_STEP.txt")
wh manifest "$pdh" | wh step output -
"""


@pytest.fixture
def pages(tmp_path: Path) -> Iterator[tuple[str, str, EmbeddedWarehouse]]:
    """The pages over an embedded warehouse; (url, sign-in token, warehouse)."""
    with EmbeddedWarehouse(tmp_path / "home", user="alice") as wh:
        token = sign_in_token(wh)
        with ServerThread(create_web_app(wh)) as server:
            yield server.url, token, wh


def _signed_in(browser: Any, url: str, token: str) -> Any:
    page = browser.new_page()
    page.set_default_timeout(20_000)
    page.goto(url + "/web/signin")
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    return page


def test_a_failed_job_shows_a_short_red_bar_and_the_failing_log(
    pages: tuple[str, str, EmbeddedWarehouse], tmp_path: Path
) -> None:
    url, token, wh = pages
    fn = put_function(wh, tmp_path, "fails.sh", FAILS)
    job = run_job(wh, fn, wh.put([make_text(tmp_path / "in")]).pdh, max_attempts=1)
    assert job.state == "failed"
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = _signed_in(browser, url, token)
            page.goto(f"{url}/web/jobs/{job.id}")
            bar = page.locator(".progress progress")
            assert int(bar.get_attribute("value") or 0) < int(bar.get_attribute("max") or 0)
            assert page.locator(".progress.progress-short").count() == 1
            assert "boom: cannot read" in page.locator("pre.failed-tail").inner_text()
        finally:
            browser.close()


def test_the_step_table_and_timeline_follow_a_running_job(
    pages: tuple[str, str, EmbeddedWarehouse], tmp_path: Path
) -> None:
    url, token, wh = pages
    release = tmp_path / "release"
    fn = put_function(wh, tmp_path, "fans.sh", FANS_OUT.replace("RELEASE", str(release)))
    job = jobs.submit(wh, jobs.JobRequest(fn, wh.put([make_text(tmp_path / "in")]).pdh, {}))
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = _signed_in(browser, url, token)
            page.goto(f"{url}/web/jobs/{job.id}")
            row = page.locator("table.steps tbody tr").first
            assert "queued" in row.inner_text()
            assert row.locator("a:text-is('log')").count() == 0  # nothing to show yet
            manager = threading.Thread(
                target=jobs.run_manager, args=(wh, "local"), kwargs={"until_job": job.id}
            )
            manager.start()
            try:
                # Without a reload: a fast step is done while the job still runs.
                done = page.locator("table.steps tbody tr", has_text="fast-a")
                done.locator(".state-done").wait_for(timeout=45_000)
                assert page.locator(".progress .state").inner_text() == "running"
                assert page.locator("svg.timeline text", has_text="fast-a").count() == 1
                assert done.locator("a:text-is('log')").count() == 1
                assert "left" in page.locator("p.eta").inner_text()
            finally:
                release.touch()
                manager.join(60)
            page.wait_for_selector(".progress .state-complete", timeout=30_000)
        finally:
            browser.close()


def test_preview_a_text_and_an_image_and_download_a_folder_as_zip(
    pages: tuple[str, str, EmbeddedWarehouse], tmp_path: Path
) -> None:
    url, token, wh = pages
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "notes.txt").write_text("<b>not bold</b>\n")
    (tree / "d" / "pic.png").write_bytes(PNG)
    pdh = wh.put([tree / "d"]).pdh
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = _signed_in(browser, url, token)
            page.goto(f"{url}/web/c/{pdh}")
            page.click("a.preview:text-is('notes.txt')")
            assert page.locator("pre.preview").inner_text() == "<b>not bold</b>\n"
            assert page.locator("pre.preview b").count() == 0
            page.go_back()
            page.click("a.preview:text-is('pic.png')")
            img = page.locator("img.preview")
            img.wait_for()
            # Polled through the element, not a predicate string: the pages'
            # policy (no 'unsafe-eval') refuses the string's eval.
            playwright.expect(img).to_have_js_property("complete", True)
            assert img.evaluate("i => i.naturalWidth") == 1  # the browser drew it
            page.go_back()
            with page.expect_download() as fetched:
                page.click("a.archive:text-is('zip')")
            saved = tmp_path / "got.zip"
            fetched.value.save_as(saved)
            with zipfile.ZipFile(saved) as z:
                assert z.read("notes.txt") == b"<b>not bold</b>\n"
                assert z.read("pic.png") == PNG
        finally:
            browser.close()
