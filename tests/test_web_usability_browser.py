"""A job page names the input as it was submitted; the cluster page charts the
last hour's throughput (real chromium through Playwright, as test_web_pages_browser)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from browser_helpers import playwright_or_skip
from jobs_helpers import make_text, run_job
from test_web_pages_browser import ARGS, CHROMIUM, _signed_in, pages  # noqa: F401 (fixture)
from warehouse import catalog
from warehouse.embedded import EmbeddedWarehouse
from warehouse.web.pages import human_size

playwright = playwright_or_skip()

pytestmark = [pytest.mark.slow]


def test_a_job_page_shows_the_name_its_input_was_submitted_under(
    pages: tuple[str, str, EmbeddedWarehouse],  # noqa: F811
    tmp_path: Path,
) -> None:
    url, token, wh = pages
    first = wh.put([make_text(tmp_path / "in")]).pdh
    wh.set_name("reads", first, expect=None, create=True)
    by_name = run_job(wh, "builtin:zhash", "reads")
    by_pdh = run_job(wh, "builtin:zhash", first, reuse=False)
    assert (by_name.input_name, by_pdh.input_name) == ("reads", None)
    # The name moves on; the job page still says what it was submitted as.
    (tmp_path / "in2").mkdir()
    (tmp_path / "in2" / "x.txt").write_text("other\n")
    wh.set_name("reads", wh.put([tmp_path / "in2"]).pdh, expect=first)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = _signed_in(browser, url, token)
            page.goto(f"{url}/web/jobs/{by_name.id}")
            facts = page.locator("dl.facts")
            assert facts.locator(".input-name").inner_text() == "reads"
            link = facts.locator(f"a.pdh[href$='/c/{first}']")
            assert link.count() == 1 and link.inner_text() == first
            assert "which held" in facts.inner_text()
            page.goto(f"{url}/web/jobs/{by_pdh.id}")
            assert page.locator("dl.facts .input-name").count() == 0
            assert page.locator(f"dl.facts a.pdh[href$='/c/{first}']").count() == 1
        finally:
            browser.close()


def test_the_cluster_page_charts_the_last_hour(
    pages: tuple[str, str, EmbeddedWarehouse],  # noqa: F811
    tmp_path: Path,
) -> None:
    url, token, wh = pages
    put = wh.put([make_text(tmp_path / "in")])
    job = run_job(wh, "builtin:zhash", put.pdh)
    assert job.state == "complete" and job.steps_done >= 1
    # Every block write of this fresh warehouse happened within the hour.
    written = sum(r.bytes_written for r in catalog.accounting(wh.engine, 0.0))
    assert written >= put.write.bytes_read
    hosts: set[str] = set()
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = _signed_in(browser, url, token)
            page.on("request", lambda r: hosts.add(urlsplit(r.url).netloc))
            page.goto(f"{url}/web/cluster")
            assert "per second" not in page.content()
            data = page.locator("figure.bytes-chart")
            steps = page.locator("figure.steps-chart")
            assert data.locator("svg rect.bar").count() >= 1
            assert steps.locator("svg rect.bar").count() >= 1
            # The bars add up to what the catalog holds for the hour.
            caption = data.locator("figcaption").inner_text()
            assert caption == f"Bytes written per minute: {human_size(written)} in the hour"
            total = page.locator("figure.steps-chart figcaption").inner_text()
            assert int(re.search(r": (\d+) in the hour", total).group(1)) >= job.steps_done  # type: ignore[union-attr]
            titles = data.locator("svg rect.bar title").all_text_contents()
            assert all(re.fullmatch(r"\d\d:\d\d UTC: .* written", t) for t in titles)
            # Drawn by the server and shown in the browser at a real size.
            box = data.locator("svg").bounding_box()
            assert box is not None and box["width"] > 300 and box["height"] > 30
            assert page.locator("figure.throughput svg text", has_text="now").count() == 2
        finally:
            browser.close()
    assert hosts == {urlsplit(url).netloc}  # no CDN
