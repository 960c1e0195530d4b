"""The web pages against requests no browser sends: bad ranges, page numbers
out of range, forms from other sites, bad form input, unknown addresses."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from warehouse.cli.web import sign_in_token
from warehouse.embedded import EmbeddedWarehouse
from warehouse.server.serving import ServerThread
from warehouse.web import create_web_app
from warehouse.web.download import Unsatisfiable, parse_range

HUGE = "9" * 30  # past any 64-bit integer


class Site:
    def __init__(self, url: str, token: str, wh: EmbeddedWarehouse) -> None:
        self.url, self.token, self.wh = url, token, wh
        self.client = httpx.Client(base_url=url, timeout=60)
        answer = self.client.post("/web/signin", data={"token": token})
        assert answer.status_code == 303, answer.text


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("hostile")
    tree = root / "in"
    tree.mkdir()
    (tree / "empty").write_bytes(b"")
    (tree / "page.html").write_bytes(b"<script>alert(1)</script>")
    (tree / "data.bin").write_bytes(os.urandom(1000))
    with EmbeddedWarehouse(root / "home", user="alice") as wh:
        wh.put([tree], name="sample")
        with ServerThread(create_web_app(wh)) as server:
            made = Site(server.url, sign_in_token(wh), wh)
            yield made
            made.client.close()


def test_the_last_bytes_of_an_empty_file_are_not_satisfiable(site: Site) -> None:
    """``bytes=-5`` of an empty file has no byte to send: 416, never a 206
    with ``Content-Range: bytes 0--1/0``."""
    with pytest.raises(Unsatisfiable):
        parse_range("bytes=-5", 0)
    pdh = site.wh.resolve("sample")
    answer = site.client.get(f"/web/c/{pdh}/f/empty", headers={"Range": "bytes=-5"})
    assert answer.status_code == 416
    assert answer.headers["Content-Range"] == "bytes */0"
    whole = site.client.get(f"/web/c/{pdh}/f/empty")
    assert whole.status_code == 200 and whole.content == b""


def test_a_downloaded_page_never_runs_as_one(site: Site) -> None:
    pdh = site.wh.resolve("sample")
    for path in ("f/page.html", "f/page.html?inline=1"):
        answer = site.client.get(f"/web/c/{pdh}/{path}")
        assert answer.status_code == 200
        assert answer.headers["Content-Type"] == "application/octet-stream"
        assert answer.headers["Content-Disposition"].startswith("attachment;")
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
