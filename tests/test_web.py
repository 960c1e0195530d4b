"""The web pages without a browser: httpx against real servers (embedded and controller).

Sign-in, escaping, downloads with Range, pagination and the server's own
timing of a request (the ``Server-Timing`` header) on a collection of 10,000
files and a job of 2,000 steps.
"""

from __future__ import annotations

import contextlib
import hashlib
import html
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from cluster import WH_BIN, KeepPool, controller
from warehouse import jobs
from warehouse.catalog.db import write
from warehouse.catalog.schema import steps
from warehouse.cli.web import sign_in_token
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs.jobstore import insert_job
from warehouse.manifest import Manifest
from warehouse.server.serving import ServerThread
from warehouse.web import create_web_app
from warehouse.web.download import Unsatisfiable, parse_range

EVIL = "<script>alert(1)</script>"
BLOCKS = [os.urandom(1000), os.urandom(2000), os.urandom(500)]
SPANNING = b"".join(BLOCKS)


def sign_in(url: str, token: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=30)
    answer = client.post("/web/signin", data={"token": token, "next": "/web/collections"})
    assert answer.status_code == 303, answer.text
    return client


class Site:
    def __init__(self, url: str, token: str, wh: EmbeddedWarehouse) -> None:
        self.url, self.token, self.wh = url, token, wh
        self.client = sign_in(url, token)
        self.closing = [self.client]

    def get(self, path: str, **kw: object) -> httpx.Response:
        return self.client.get(path, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("web")
    tree = root / "in"
    (tree / "<script>alert(1)<").mkdir(parents=True)
    (tree / EVIL).write_bytes(b"evil\n")
    (tree / "<img src=x onerror=alert(1)>").write_bytes(b"img\n")
    (tree / "data.bin").write_bytes(os.urandom(300_000))
    with EmbeddedWarehouse(root / "home", user="alice") as wh:
        wh.put([tree], name="sample")
        # A file over three blocks, and a collection of 10,000 files in one directory.
        locs = [str(wh.store.put(b).locator) for b in BLOCKS]
        wh.store.flush()
        wh.put_manifest(Manifest.parse(f". {' '.join(locs)} 0:3500:spanning\n"), name="spanning")
        data = os.urandom(10_000)
        loc = wh.store.put(data).locator
        wh.store.flush()
        segments = " ".join(f"{i}:1:f{i:05d}" for i in range(10_000))
        wh.put_manifest(Manifest.parse(f"./big {loc} {segments}\n"), name="big")
        token = sign_in_token(wh)
        with ServerThread(create_web_app(wh)) as server:
            made = Site(server.url, token, wh)
            yield made
            for client in made.closing:
                client.close()


def test_without_a_sign_in_every_page_is_the_sign_in_page(site: Site) -> None:
    pdh = site.wh.resolve("sample")
    bodies = set()
    with httpx.Client(base_url=site.url) as anonymous:
        for path in (
            "/web/collections",
            f"/web/c/{pdh}",
            f"/web/c/{pdh}/f/data.bin",
            f"/web/c/{pdh}/manifest",
            "/web/jobs",
            "/web/jobs/progress.json",
            "/web/cluster",
            "/web/submit",
            "/web/names/sample",
            "/web/regol",
            "/web/regol/1",
        ):
            answer = anonymous.get(path)
            assert answer.status_code == 401, path
            assert 'name="token"' in answer.text
            # The same page everywhere, but for where to go after signing in.
            bodies.add(answer.text.replace(html.escape(path), "NEXT"))
    assert len(bodies) == 1
    assert "data.bin" not in bodies.pop()
    with httpx.Client(base_url=site.url, cookies={"wh_session": "whforged"}) as forged:
        assert forged.get("/web/collections").status_code == 401


def test_a_bad_address_is_a_page_saying_which_part(site: Site) -> None:
    """/web/jobs/abc is an HTML page (400) naming the part, not the API's JSON;
    signed out, it is the sign-in page like any other."""
    for path, part in (
        ("/web/jobs/abc", "job_id"),
        ("/web/workflows/abc", "run_id"),
        ("/web/regol/x1", "watch_id"),
        ("/web/jobs/1/steps/abc", "number"),
        ("/web/jobs?page=abc", "page"),
    ):
        answer = site.get(path)
        assert answer.status_code == 400, path
        assert answer.headers["content-type"].startswith("text/html"), path
        assert f"bad address: {part}: " in html.unescape(answer.text), path
    with httpx.Client(base_url=site.url) as anonymous:
        assert anonymous.get("/web/jobs/abc").status_code == 401


def test_a_bad_token_is_refused_and_a_good_one_sets_a_strict_cookie(site: Site) -> None:
    client = httpx.Client(base_url=site.url)
    site.closing.append(client)
    bad = client.post("/web/signin", data={"token": "whnot-a-token"})
    assert bad.status_code == 401 and "not valid" in bad.text
    assert "set-cookie" not in bad.headers
    good = client.post("/web/signin", data={"token": site.token, "next": "https://evil.test/"})
    assert good.status_code == 303 and good.headers["location"] == "/web/"
    cookie = good.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/web" in cookie
    assert site.token.lower() not in cookie  # a session token of its own
    assert client.get("/web/collections").status_code == 200
    foreign = client.post("/web/signout", headers={"Origin": "https://evil.test"})
    assert foreign.status_code == 403
    client.post("/web/signout")
    assert client.get("/web/collections").status_code == 401


def test_every_name_is_escaped(site: Site) -> None:
    pdh = site.wh.resolve("sample")
    root = site.get(f"/web/c/{pdh}").text
    assert "&lt;img src=x onerror=alert(1)&gt;" in root
    assert "&lt;script&gt;alert(1)&lt;/" in root
    inner = site.get(f"/web/c/{pdh}", params={"path": "<script>alert(1)<"}).text
    assert "script&gt;" in inner
    for text in (root, inner):
        assert "<script>alert" not in text and "<img src=x" not in text
    link = "/web/c/" + pdh + "/f/%3Cscript%3Ealert%281%29%3C/script%3E"
    assert link in inner
    assert site.get(link).content == b"evil\n"


def test_download_whole_and_ranges(site: Site) -> None:
    pdh = site.wh.resolve("spanning")
    url = f"/web/c/{pdh}/f/spanning"
    whole = site.get(url)
    assert whole.status_code == 200 and whole.content == SPANNING
    assert whole.headers["accept-ranges"] == "bytes"
    for header, first, last in (
        ("bytes=10-99", 10, 99),
        ("bytes=900-3100", 900, 3100),  # across all three blocks
        ("bytes=3000-", 3000, 3499),
        ("bytes=-7", 3493, 3499),
        ("bytes=3400-9999", 3400, 3499),
    ):
        part = site.get(url, headers={"Range": header})
        assert part.status_code == 206, header
        assert part.content == SPANNING[first : last + 1], header
        assert part.headers["content-range"] == f"bytes {first}-{last}/3500"
    refused = site.get(url, headers={"Range": "bytes=3500-"})
    assert refused.status_code == 416 and refused.headers["content-range"] == "bytes */3500"
    stale = site.get(url, headers={"Range": "bytes=0-9", "If-Range": '"other"'})
    assert stale.status_code == 200 and stale.content == SPANNING
    manifest = site.get(f"/web/c/{pdh}/manifest")
    assert Manifest.parse(manifest.text).pdh == pdh


def test_parse_range() -> None:
    assert parse_range(None, 10) is None
    assert parse_range("bytes=2-4", 10) == (2, 4)
    assert parse_range("bytes=5-2", 10) is None
    assert parse_range("bytes=0-1,4-5", 10) is None  # several ranges: the whole file
    assert parse_range("items=0-1", 10) is None
    for bad in ("bytes=10-", "bytes=-0"):
        with pytest.raises(Unsatisfiable):
            parse_range(bad, 10)


def test_a_collection_of_10000_files_is_paginated(site: Site) -> None:
    pdh = site.wh.resolve("big")
    first = site.get(f"/web/c/{pdh}", params={"path": "big"})
    later = site.get(f"/web/c/{pdh}", params={"path": "big", "page": 37})
    for answer in (first, later):
        assert answer.status_code == 200
        # A page lists 200 entries, not 10,000 (speed is for benchmarks/).
        # Counted by their names: the PDH, of random data, may itself begin "f0".
        assert len(re.findall(r">f\d{5}<", answer.text)) == 200
    assert "page 37 of 50" in later.text
    assert ">f07200<" in later.text and ">f07399<" in later.text
    assert ">f07400<" not in later.text and ">f07199<" not in later.text
    listing = site.get("/web/collections")
    assert "big" in listing.text and "10000" in listing.text


def test_a_job_of_2000_steps_is_paginated(site: Site) -> None:
    wh = site.wh
    job = insert_job(
        wh.engine,
        {
            "function": "builtin:zhash",
            "function_pdh": wh.resolve("sample"),
            "function_path": "zhash.py",
            "function_commit": None,
            "input_pdh": wh.resolve("big"),
            "params": "{}",
            "cpus": 1,
            "memory": 0,
            "max_attempts": 3,
            "priority": 0,
            "executor": "nowhere",
            "reuse_key": "x" * 64,
            "submitted_by": "alice",
            "state": "running",
            "steps_done": 1500,
            "steps_running": 20,
            "steps_queued": 480,
        },
    )
    t0 = time.time() - 100
    rows = [
        {
            "job": job.id,
            "number": n,
            "level": 0 if n == 0 else 1,
            "input": f"<b>in {n}</b>",
            "state": "done" if n < 1500 else "running" if n < 1520 else "queued",
            "attempts": 1,
            "failures": 0,
            "exit_status": 0 if n < 1500 else None,
            "started_at": t0 + n * 0.03 if n < 1520 else None,
            "finished_at": t0 + n * 0.03 + 1 if n < 1500 else None,
            "host": "node-1",
        }
        for n in range(2000)
    ]
    with write(wh.engine) as conn:
        conn.execute(sa.insert(steps), rows)
    for params in ({}, {"page": 16}, {"state": "running"}):
        answer = site.get(f"/web/jobs/{job.id}", params=params)
        assert answer.status_code == 200
        assert "<svg" in answer.text and "&lt;b&gt;in" in answer.text
        # One page of steps (their rows and timeline bars), not all 2,000.
        assert answer.text.count("&lt;b&gt;in") <= 3 * 100
    assert "page 16 of 20" in site.get(f"/web/jobs/{job.id}", params={"page": 16}).text
    live = site.get("/web/jobs/progress.json", params={"ids": str(job.id)}).json()
    assert live[str(job.id)]["steps_done"] == 1500
    listed = site.get("/web/jobs", params={"state": "running"})
    assert f"/web/jobs/{job.id}" in listed.text
    assert f"/web/jobs/{job.id}" not in site.get("/web/jobs", params={"state": "queued"}).text


def test_the_controller_serves_the_pages_over_keep_servers(
    tmp_path: Path, keep_servers: KeepPool
) -> None:
    closing: list[httpx.Client] = []
    with contextlib.ExitStack() as stack:
        stack.callback(lambda: [c.close() for c in closing])
        _controller_pages(tmp_path, keep_servers, closing)


def _controller_pages(tmp_path: Path, pool: KeepPool, closing: list[httpx.Client]) -> None:
    with controller(tmp_path / "c.db", pool) as ctl:
        token = ctl.user("bob")
        src = tmp_path / "src"
        src.mkdir()
        data = os.urandom(200_000)
        (src / "f.bin").write_bytes(data)
        env = {**os.environ, "WH_URL": ctl.url, "WH_TOKEN": token, "WH_HOME": str(tmp_path)}
        put = subprocess.run(
            [WH_BIN, "put", str(src), "--name", "remote-one"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        pdh = put.stdout.split()[-1]
        assert httpx.get(f"{ctl.url}/web/collections", verify=False).status_code == 401
        client = sign_in(ctl.url, token)
        closing.append(client)
        assert "remote-one" in client.get("/web/collections").text
        got = client.get(f"/web/c/{pdh}/f/f.bin")
        assert hashlib.md5(got.content).digest() == hashlib.md5(data).digest()
        part = client.get(f"/web/c/{pdh}/f/f.bin", headers={"Range": "bytes=100-199"})
        assert part.status_code == 206 and part.content == data[100:200]
        client.get("/web/cluster")
        page = client.get("/web/cluster").text
        for server in pool.servers:
            assert server.url in page
        assert "free" in page and "error" not in page.split("<h2>Accounting")[0]
        assert "runs no job manager" in client.get("/web/submit").text
        assert client.get("/api/v1/health").json() == {"status": "ok"}
        # With its job manager running, the controller takes jobs from the form.
        ctl.state.start_jobs(ctl.url, tmp_path / "controller-jobs", "local")
        form = {"function": "builtin:zhash", "input": "remote-one", "reuse": "on"}
        answer = client.post("/web/submit", data=form, headers={"Origin": ctl.url})
        assert answer.status_code == 303, answer.text
        job_page = answer.headers["location"]
        job_id = int(job_page.rstrip("/").rsplit("/", 1)[1])
        deadline = time.monotonic() + 60
        while (job := jobs.get_job(ctl.state.engine, job_id)).state != "complete":
            assert time.monotonic() < deadline and job.state != "failed", job.error
            time.sleep(0.2)
        assert job.submitted_by == "bob" and job.output_pdh
        assert "state-complete" in client.get(job_page).text


def test_wh_web_prints_its_address_and_a_token(tmp_path: Path) -> None:
    env = {**os.environ, "WH_HOME": str(tmp_path / "h"), "WH_USER": "carol"}
    env.pop("WH_URL", None)
    proc = subprocess.Popen(
        [WH_BIN, "web", "--listen", "127.0.0.1:0"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1]
        token = proc.stdout.readline().split()[-1]
        assert url.endswith("/web/")
        client = sign_in(url.removesuffix("/web/"), token)
        try:
            assert "carol" in client.get("/web/collections").text
        finally:
            client.close()
    finally:
        proc.terminate()
        assert proc.wait(15) == 0
        if proc.stdout:
            proc.stdout.close()


def test_a_bad_submission_shows_the_form_again_with_the_reason(site: Site) -> None:
    answer = site.client.post(
        "/web/submit", data={"function": "spec", "spec": "", "input": "sample", "params": "x"}
    )
    assert answer.status_code == 400 and "choose a function" in answer.text
    answer = site.client.post(
        "/web/submit", data={"function": "builtin:zhash", "input": "sample", "params": "novalue"}
    )
    assert answer.status_code == 400 and "is not KEY=VALUE" in answer.text
    assert 'value="sample"' in answer.text  # what was typed stays
