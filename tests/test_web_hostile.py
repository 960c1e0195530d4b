"""The web pages against requests a real browser seldom sends: bad ranges,
HEAD, page numbers out of range, forms from other sites, bad or huge form
input, NUL characters (on both catalogs), unknown addresses, ``next=`` off
the pages; and, over every route, the sign-in page for a signed-out user."""

from __future__ import annotations

import html
import os
import re
from collections.abc import Iterable, Iterator

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from fastapi.routing import APIRoute

from warehouse.catalog.auth import add_user, create_token
from warehouse.catalog.db import write
from warehouse.catalog.schema import steps
from warehouse.cli.web import sign_in_token
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs.jobstore import insert_job
from warehouse.server.serving import ServerThread
from warehouse.web import create_web_app, web_router
from warehouse.web.auth import FORM_LIMIT
from warehouse.web.download import Unsatisfiable, parse_range
from warehouse.web.pages import paginate
from warehouse.web.queries import page_number
from warehouse.web.site import Site as WebSite
from warehouse.web.submitting import parse_params

HUGE = "9" * 30  # past any 64-bit integer
JOBS = 51  # one more than a page of the job list
STEPS = 10_000  # of the newest job


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
    (tree / "draw.svg").write_bytes(b'<svg xmlns="http://www.w3.org/2000/svg"><script/></svg>')
    (tree / "data.bin").write_bytes(os.urandom(1000))
    with EmbeddedWarehouse(root / "home", user="alice") as wh:
        wh.put([tree], name="sample")
        _jobs(wh)
        with ServerThread(create_web_app(wh)) as server:
            made = Site(server.url, sign_in_token(wh), wh)
            yield made
            made.client.close()


def _jobs(wh: EmbeddedWarehouse) -> None:
    pdh = wh.resolve("sample")
    for n in range(JOBS):
        job = insert_job(
            wh.engine,
            {
                "function": f"builtin:zhash<i>{n}</i>",
                "function_pdh": pdh,
                "function_path": "zhash.py",
                "function_commit": None,
                "input_pdh": pdh,
                "params": '{"p": "<script>alert(1)</script>"}',
                "cpus": 1,
                "memory": 0,
                "max_attempts": 3,
                "priority": 0,
                "executor": "nowhere",
                "reuse_key": f"{n:064d}",
                "submitted_by": "alice",
                "state": "complete",
                "steps_done": STEPS if n == JOBS - 1 else 0,
                "steps_running": 0,
                "steps_queued": 0,
            },
        )
    rows = [
        {
            "job": job.id,
            "number": n,
            "level": 1,
            "input": f"<b>in {n}</b>",
            "state": "done",
            "attempts": 1,
            "failures": 0,
            "exit_status": 0,
            "started_at": 1_700_000_000.0 + n,
            "finished_at": 1_700_000_001.0 + n,
            "host": "<i>node</i>",
            "log_tail": "</pre><script>alert(1)</script>",
        }
        for n in range(STEPS)
    ]
    with write(wh.engine) as conn:
        conn.execute(sa.insert(steps), rows)


def test_a_page_past_the_last_shows_the_last(site: Site) -> None:
    """A page number past the end (or past any integer) shows the last page,
    as the collection pages do: never an error, never an empty list."""
    for page in ("3", HUGE):
        answer = site.client.get("/web/jobs", params={"page": page})
        assert answer.status_code == 200, answer.text
        assert "page 2 of 2 (51)" in answer.text
        assert answer.text.count('class="progress') == 1  # the oldest job alone
    for page in ("0", "-" + HUGE):
        assert "page 1 of 2 (51)" in site.client.get("/web/jobs", params={"page": page}).text
    for path in ("/web/workflows", "/web/collections"):
        answer = site.client.get(path, params={"page": HUGE})
        assert answer.status_code == 200, (path, answer.text)
    # A job of 10,000 steps: its last page, and past it.
    newest = site.client.get("/web/jobs").text
    job = newest.split('href="/web/jobs/', 2)[1].split('"')[0]
    for page in ("100", HUGE):
        answer = site.client.get(f"/web/jobs/{job}", params={"page": page})
        assert answer.status_code == 200
        assert "page 100 of 100 (10000)" in answer.text
        assert "&lt;b&gt;in 9999&lt;/b&gt;" in answer.text
        assert "<b>" not in answer.text and "<i>" not in answer.text
    step = site.client.get(f"/web/jobs/{job}/steps/9999")
    assert step.status_code == 200 and "<script>" not in step.text


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
    for path in ("f/page.html", "f/page.html?inline=1", "f/draw.svg?inline=1"):
        answer = site.client.get(f"/web/c/{pdh}/{path}")
        assert answer.status_code == 200
        assert answer.headers["Content-Type"] == "application/octet-stream"
        assert answer.headers["Content-Disposition"].startswith("attachment;")
        assert answer.headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Referer": "https://evil.example/page"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site", "Referer": "https://other.example/"},
    ],
)
def test_a_form_from_another_site_is_refused(site: Site, headers: dict[str, str]) -> None:
    """Without an ``Origin`` a form is judged by ``Sec-Fetch-Site`` and
    ``Referer``: a submission, a sign-in (to a session of the attacker's) or
    a sign-out from another site does nothing."""
    form = {"function": "builtin:zhash", "input": "sample"}
    before = site.client.get("/web/jobs").text
    answer = site.client.post("/web/submit", data=form, headers=headers)
    assert answer.status_code == 403, answer.text
    assert site.client.get("/web/jobs").text.count('class="progress') == before.count(
        'class="progress'
    )
    with httpx.Client(base_url=site.url) as victim:
        signin = victim.post("/web/signin", data={"token": site.token}, headers=headers)
        assert signin.status_code == 403 and "wh_session" not in signin.cookies
    assert site.client.post("/web/signout", headers=headers).status_code == 403
    assert site.client.get("/web/jobs").status_code == 200  # still signed in


def test_a_form_from_our_own_pages_passes(site: Site) -> None:
    here = {
        "Origin": site.url,
        "Referer": f"{site.url}/web/signin",
        "Sec-Fetch-Site": "same-origin",
    }
    for headers in (here, {"Referer": f"{site.url}/web/signin"}, {"Sec-Fetch-Site": "none"}):
        with httpx.Client(base_url=site.url) as other:
            answer = other.post("/web/signin", data={"token": site.token}, headers=headers)
            assert answer.status_code == 303, (headers, answer.text)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"cpus": "--5"}, "cpus must be a whole number"),
        ({"cpus": "٣"}, "cpus must be a whole number"),  # a digit, but not 0-9
        ({"priority": "1_000"}, "priority must be a whole number"),
        ({"cpus": HUGE}, "must be within"),
        ({"attempts": "0"}, "at least 1"),
        ({"params": "a=" + "[" * 100_000}, "parameter 'a' is nested too deeply"),
        ({"params": "=1"}, "is not KEY=VALUE"),
        ({"input": ""}, "choose an input"),
        ({"function": ""}, "choose a function"),
    ],
)
def test_a_bad_submission_is_one_message_and_submits_nothing(
    site: Site, fields: dict[str, str], reason: str
) -> None:
    form = {"function": "builtin:zhash", "input": "sample", **fields}
    before = site.client.get("/web/jobs").text
    answer = site.client.post("/web/submit", data=form)
    assert answer.status_code == 400, answer.text
    messages = answer.text.count('class="error"')
    assert messages == 1 and reason in html.unescape(answer.text), answer.text[-2000:]
    assert site.client.get("/web/jobs").text == before


def test_parameters_are_strict_json_or_strings() -> None:
    parsed = parse_params('a=NaN\nb=1e999\nc=[1, Infinity]\nd=1.5\ne="x"\nf=plain')
    assert parsed == {
        "a": "NaN",
        "b": "1e999",
        "c": "[1, Infinity]",
        "d": 1.5,
        "e": "x",
        "f": "plain",
    }


def test_an_unknown_address_is_a_page(site: Site) -> None:
    for path in ("/web/nosuch", "/web/c", "/web/jobs/1/steps", "/web/<script>alert(1)</script>"):
        answer = site.client.get(path)
        assert answer.status_code == 404, path
        assert answer.headers["Content-Type"].startswith("text/html")
        assert "<script>alert" not in answer.text
        assert answer.headers["X-Frame-Options"] == "DENY"
    with httpx.Client(base_url=site.url) as anonymous:
        answer = anonymous.get("/web/nosuch")
        assert answer.status_code == 401 and 'name="token"' in answer.text
    # A page's address with a slash added still leads to the page (on this server).
    for path, target in (
        ("/web/jobs/?page=2", "/web/jobs?page=2"),
        ("/web/collections/", "/web/collections"),
        ("/web//evil.example/", "/web/evil.example"),
    ):
        answer = site.client.get(path)
        assert answer.status_code == 307 and answer.headers["Location"] == target, path


def test_no_page_is_kept_by_a_cache(site: Site) -> None:
    """After signing out, Back must not show a page from the browser's cache."""
    pdh = site.wh.resolve("sample")
    for path in ("/web/collections", f"/web/c/{pdh}", "/web/jobs", "/web/submit", "/web/nosuch"):
        answer = site.client.get(path)
        assert answer.headers["Cache-Control"] == "no-store", path
    # The stylesheet and script hold nothing private: they may be kept.
    assert "no-store" not in site.client.get("/web/static/style.css").headers["Cache-Control"]


def _routes(routes: Iterable[object]) -> Iterator[APIRoute]:
    """The pages' routes, through the routers they are included from."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        inner = getattr(route, "original_router", None) or getattr(route, "router", None)
        if inner is not None:
            yield from _routes(inner.routes)


def _addresses(site: Site) -> list[tuple[str, str]]:
    """Every page's method and address, its parts filled in."""
    pdh = site.wh.resolve("sample")
    fill = {
        "{pdh}": pdh,
        "{path:file_path}": "data.bin",
        "{name}": "sample",
        "{name:path}": "sample",
        "{job_id}": "1",
        "{number}": "1",
        "{action}": "cancel",
        "{run_id}": "1",
        "{watch_id}": "1",
        "{rest:path}": "nosuch",
    }
    found = []
    for route in _routes(web_router().routes):
        address = route.path
        for part, value in fill.items():
            address = address.replace(part, value)
        assert "{" not in address, route.path  # a new part: name a value for it above
        found.extend((method, address) for method in route.methods)
    return found


def test_signed_out_every_page_and_form_is_the_sign_in_page(site: Site) -> None:
    """Every route of the app, found from its table (a new page is checked
    without being listed here), answers a signed-out request, or a forged
    cookie, with the sign-in page: nothing else shows, nothing is done."""
    addresses = _addresses(site)
    assert len(addresses) > 20
    before = site.client.get("/web/jobs").text
    for cookies in ({}, {"wh_session": "whforged"}):
        with httpx.Client(base_url=site.url, cookies=cookies) as anonymous:
            for method, address in addresses:
                if address in ("/web/signin", "/web/signout") or "/static/" in address:
                    continue  # open to all: they show nothing private
                answer = anonymous.request(
                    method, address, data={"function": "builtin:zhash", "input": "sample"}
                )
                assert answer.status_code == 401, (method, address, answer.status_code)
                if method == "HEAD":
                    continue  # no body to look into
                shown = re.sub(r'name="next" value="[^"]*"', "", answer.text)
                assert 'name="token"' in shown and "data.bin" not in shown
    assert site.client.get("/web/jobs").text == before


def test_every_page_loads_only_our_own_assets(site: Site) -> None:
    """No CDN, no font or script from elsewhere: every address a page names
    (links, scripts, styles, images, forms) is on this server."""
    pdh = site.wh.resolve("sample")
    job = site.client.get("/web/jobs").text.split('href="/web/jobs/', 2)[1].split('"')[0]
    pages = [
        "/web/collections",
        f"/web/c/{pdh}",
        f"/web/c/{pdh}/preview/page.html",
        f"/web/lineage/{pdh}",
        "/web/names/sample",
        "/web/jobs",
        f"/web/jobs/{job}",
        f"/web/jobs/{job}/steps/1",
        "/web/submit",
        "/web/workflows",
        "/web/regol",
        "/web/cluster",
        "/web/signin",
    ]
    css = site.client.get("/web/static/style.css").text
    assert "url(" not in css.replace("url(data:", "") and "@import" not in css
    for page in pages:
        answer = site.client.get(page)
        assert answer.status_code == 200, page
        named = re.findall(r'(?:src|href|action|xlink:href)="([^"]*)"', answer.text)
        assert named, page
        for address in named:
            assert address.startswith(("/web/", "#")), (page, address)


def test_a_nul_character_is_a_bad_address_on_both_catalogs(catalog_engine: sa.Engine) -> None:
    """PostgreSQL refuses text holding NUL: a query string, an address or a
    form field with one is a 400 page on either backend, never a 500."""
    app = FastAPI()
    app.state.web_site = WebSite(catalog_engine, lambda: None, "controller")  # type: ignore[arg-type,return-value]
    app.include_router(web_router())
    add_user(catalog_engine, "alice")
    token = create_token(catalog_engine, "alice")
    with ServerThread(app) as server, httpx.Client(base_url=server.url) as client:
        assert client.post("/web/signin", data={"token": token}).status_code == 303
        for path in (
            "/web/collections?q=%00",
            "/web/collections?q=a%00b",
            "/web/jobs?function=%00",
            "/web/workflows?state=%00",
            "/web/names/%00",
            "/web/nosuch%00",
        ):
            answer = client.get(path)
            assert answer.status_code == 400, (path, answer.text)
            assert "NUL" in answer.text and answer.headers["Content-Type"].startswith("text/html")
        answer = client.post("/web/submit", data={"function": "builtin:zhash", "input": "a\0"})
        assert answer.status_code == 400 and "NUL" in answer.text
        assert client.get("/web/collections?q=a").status_code == 200


def test_a_huge_form_is_refused_before_it_is_held(site: Site) -> None:
    """The sign-in form takes posts from anyone: a body past the limit is
    refused, whether it says its length or streams without one."""
    big = b"token=" + b"x" * (FORM_LIMIT + 1)
    with httpx.Client(base_url=site.url) as anyone:
        answer = anyone.post("/web/signin", content=big)
        assert answer.status_code == 400 and "MiB is refused" in answer.text

        def chunks() -> Iterator[bytes]:
            yield b"token="
            for _ in range(FORM_LIMIT // 65536 + 2):
                yield b"x" * 65536

        answer = anyone.post("/web/signin", content=chunks())
        assert answer.status_code == 400 and "MiB is refused" in answer.text
    # A form of a fair size passes: parameters of hundreds of KiB.
    params = "text=" + "y" * 300_000
    answer = site.client.post(
        "/web/submit", data={"function": "builtin:nosuch", "input": "sample", "params": params}
    )
    assert answer.status_code == 400 and "no built-in function" in answer.text


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example/",
        "https://evil.example/web/",
        "/\\evil.example",
        "/web\\@evil.example",
        "\t//evil.example",
        "javascript:alert(1)",
        "/webevil",
        "",
    ],
)
def test_after_signing_in_no_next_leads_off_the_pages(site: Site, target: str) -> None:
    with httpx.Client(base_url=site.url) as other:
        form = other.get("/web/signin", params={"next": target})
        assert 'name="next" value="/web/"' in form.text
        answer = other.post("/web/signin", data={"token": site.token, "next": target})
        assert answer.status_code == 303 and answer.headers["Location"] == "/web/"


def test_a_next_on_the_pages_is_kept_and_cannot_split_the_header(site: Site) -> None:
    with httpx.Client(base_url=site.url) as other:
        target = "/web/jobs?state=running\r\nSet-Cookie: a=b"
        answer = other.post("/web/signin", data={"token": site.token, "next": target})
        assert answer.status_code == 303
        assert answer.headers["Location"].startswith("/web/jobs?state=running")
        assert "a" not in answer.cookies and "\n" not in answer.headers["Location"]


def test_head_of_a_download_answers_its_headers(site: Site) -> None:
    """``curl -I`` and download managers ask HEAD first: the same headers as
    GET (size, ranges, the attachment), no body; signed out, the sign-in page."""
    pdh = site.wh.resolve("sample")
    got = site.client.get(f"/web/c/{pdh}/f/data.bin")
    head = site.client.head(f"/web/c/{pdh}/f/data.bin")
    assert head.status_code == 200 and head.content == b""
    for name in ("Content-Length", "Content-Type", "Content-Disposition", "Accept-Ranges", "ETag"):
        assert head.headers[name] == got.headers[name], name
    part = site.client.head(f"/web/c/{pdh}/f/data.bin", headers={"Range": "bytes=10-19"})
    assert part.status_code == 206 and part.headers["Content-Range"] == "bytes 10-19/1000"
    assert part.headers["Content-Length"] == "10"
    with httpx.Client(base_url=site.url) as anonymous:
        assert anonymous.head(f"/web/c/{pdh}/f/data.bin").status_code == 401


@pytest.mark.parametrize(
    ("count", "asked", "number", "shown"),
    [
        (0, 1, 1, 0),  # empty: one page, with nothing on it
        (0, 5, 1, 0),
        (10, 1, 1, 10),  # exactly one page
        (10, 2, 1, 10),
        (11, 2, 2, 1),  # the last page holds the rest
        (20, 2, 2, 10),
        (20, 3, 2, 10),
        (20, -1, 1, 10),
    ],
)
def test_pages_at_the_edges(count: int, asked: int, number: int, shown: int) -> None:
    page = paginate(list(range(count)), asked, 10)
    assert (page.number, len(page.items)) == (number, shown)
    assert page.pages == max(1, -(-count // 10))
    assert page_number(asked, count, 10) == number
