"""Pages of issue 17 in a real browser (Debian's chromium through Playwright).

The OpenAPI page works offline: every request it makes goes to the controller.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from cluster import Controller, KeepPool, controller

playwright = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no chromium (make test installs it)"),
]


@pytest.fixture
def ctl(tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(tmp_path / "c.db", keep_servers) as c:
        yield c


def test_openapi_page_loads_swagger_ui_from_the_controller(ctl: Controller) -> None:
    html = httpx.get(ctl.url + "/docs").text
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
    assert httpx.get(ctl.url + "/docs/static/core.py").status_code == 404
