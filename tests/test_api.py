"""The controller's JSON API over real HTTP: tokens, admin rights, bad requests."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from cluster import Controller, KeepPool, controller
from jobs_helpers import job_row
from warehouse import catalog
from warehouse.regol import records as regol_records
from warehouse.regol.values import WatchRecord
from warehouse.remote.warehouse import RemoteWarehouse

OPEN = {"/api/v1/health"}
EMPTY = "d41d8cd98f00b204e9800998ecf8427e+0"


@pytest.fixture
def ctl(tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(tmp_path / "c.db", keep_servers) as c:
        yield c


def call(ctl: Controller, method: str, path: str, token: str | None = None, **kw: object):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.request(method, ctl.url + path, headers=headers, **kw, verify=False)  # type: ignore[arg-type]


def routes(ctl: Controller) -> list[tuple[str, str]]:
    spec = httpx.get(ctl.url + "/openapi.json", verify=False).json()
    out = []
    for path, methods in spec["paths"].items():
        concrete = re.sub(r"\{[^}]+\}", "x", path)
        out += [(m.upper(), concrete) for m in methods]
    return out


def test_openapi_describes_the_api(ctl: Controller) -> None:
    spec = httpx.get(ctl.url + "/openapi.json", verify=False).json()
    assert spec["openapi"].startswith("3.")
    for path in ("/api/v1/collections", "/api/v1/names/{name}", "/api/v1/users/current"):
        assert path in spec["paths"]


def test_every_request_needs_a_token(ctl: Controller) -> None:
    checked = 0
    for method, path in routes(ctl):
        if path in OPEN:
            continue
        for token in (None, "not-a-token"):
            resp = call(ctl, method, path, token, json={})
            assert resp.status_code == 401, (method, path, token, resp.text)
        checked += 1
    assert checked >= 12


def test_admin_requests_refuse_plain_users(ctl: Controller) -> None:
    alice = ctl.user("alice")
    for method, path, body in [
        ("GET", "/api/v1/users", None),
        ("POST", "/api/v1/users", {"name": "mallory", "admin": True}),
        ("POST", "/api/v1/keep_services", {"url": "http://127.0.0.1:1"}),
        ("GET", "/api/v1/cluster/keep-config", None),
        ("POST", "/api/v1/tokens", {"user": "root"}),
    ]:
        resp = call(ctl, method, path, alice, json=body)
        assert resp.status_code == 403, (method, path, resp.text)
    assert call(ctl, "GET", "/api/v1/users", ctl.admin_token).status_code == 200
    assert call(ctl, "POST", "/api/v1/tokens", alice, json={}).status_code == 200


def test_names_belong_to_their_owner(tmp_path: Path, ctl: Controller) -> None:
    a, b = ctl.user("alice"), ctl.user("bob")
    src = tmp_path / "s"
    src.mkdir()
    (src / "f").write_bytes(b"one")
    with RemoteWarehouse(ctl.url, a) as wa:
        p1 = wa.put([src], name="results").pdh
        (src / "f").write_bytes(b"two")
        p2 = wa.put([src]).pdh
    body = {"pdh": p2, "expect": p1}
    assert call(ctl, "PUT", "/api/v1/names/results", b, json=body).status_code == 403
    added = call(ctl, "POST", "/api/v1/names/results/writers", a, json={"user": "bob"})
    assert added.status_code == 204
    moved = call(ctl, "PUT", "/api/v1/names/results", b, json=body)
    assert moved.status_code == 200 and moved.json()["version"] == 2
    stale = call(ctl, "PUT", "/api/v1/names/results", a, json=body)
    assert stale.status_code == 409 and p2 in stale.json()["error"]
    assert catalog.get_name(ctl.state.engine, "results").owner == "alice"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{not json", "json"),
        (b'{"pdh": 5}', "pdh"),
        (b'{"expect": null}', "pdh"),
        (b'{"pdh": "nope"}', "pdh"),
        (b'{"pdh": "0123456789abcdef0123456789abcdef+1", "create": "maybe"}', "create"),
    ],
)
def test_malformed_json_names_the_field(ctl: Controller, body: bytes, field: str) -> None:
    resp = httpx.put(
        ctl.url + "/api/v1/names/x",
        content=body,
        headers={
            "Authorization": f"Bearer {ctl.user('carol')}",
            "Content-Type": "application/json",
        },
        verify=False,
    )
    assert resp.status_code == 400, resp.text
    assert field in resp.json()["error"].lower()


def test_bad_manifest_names_line_and_token(ctl: Controller) -> None:
    text = (
        ". d41d8cd98f00b204e9800998ecf8427e+0 0:0:a\n./x 5d41402abc4b2a76b9719d911017c592+5 0:9:b\n"
    )
    resp = call(ctl, "POST", "/api/v1/collections", ctl.user("alice"), json={"manifest_text": text})
    assert resp.status_code == 400
    assert "line 2" in resp.json()["error"] and "0:9:b" in resp.json()["error"]
    assert catalog.list_collections(ctl.state.engine) == []


def test_oversized_body_is_refused_unread(tmp_path: Path, keep_servers: KeepPool) -> None:
    from warehouse.server.controller import ControllerConfig, ControllerState, create_app
    from warehouse.server.serving import ServerThread

    config = ControllerConfig(db_url=f"sqlite:///{tmp_path / 'c.db'}", max_body=1000)
    state = ControllerState.open(config)
    catalog.add_user(state.engine, "alice")
    token = catalog.create_token(state.engine, "alice")
    with ServerThread(create_app(config, state)) as server:
        resp = httpx.post(
            server.url + "/api/v1/collections",
            json={"manifest_text": "x" * 5000},
            headers={"Authorization": f"Bearer {token}"},
            verify=False,
        )
        assert resp.status_code == 413

        def chunks() -> Iterator[bytes]:
            yield b'{"manifest_text": "'
            for _ in range(100):
                yield b"x" * 100

        chunked = httpx.post(
            server.url + "/api/v1/collections",
            content=chunks(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            verify=False,
        )
        assert chunked.status_code == 413
    state.close()


def test_a_controller_on_each_catalog_backend(
    tmp_path: Path, catalog_url: str, keep_servers: KeepPool
) -> None:
    """The same installation with its catalog on SQLite and on PostgreSQL."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(b"alpha\n")
    with controller(catalog_url, keep_servers) as ctl:
        token = ctl.user("alice")
        with RemoteWarehouse(ctl.url, token) as wh:
            pdh = wh.put([src], name="first").pdh
            assert wh.reader("first").read_file("a.txt") == b"alpha\n"
            (src / "a.txt").write_bytes(b"beta\n")
            new = wh.put([src], name="first", expect=pdh).pdh
            assert [c.new_pdh for c in wh.name_log("first")] == [pdh, new]
            assert {r.user for r in wh.accounting()} == {"alice"}


def unsigned(text: str) -> str:
    return re.sub(r"\+A[0-9a-f]{40,}@[0-9a-f]{8}", "+A<signature>", text)


def test_a_collection_is_found_by_its_pdh_with_hints(tmp_path: Path, ctl: Controller) -> None:
    """A PDH with hints (a signed +A…, a +K@cluster) names the same data: the
    routes strip them, as the PDH rule of docs/formats.md does."""
    alice = ctl.user("alice")
    (tmp_path / "a.txt").write_bytes(b"hello\n")
    with RemoteWarehouse(ctl.url, alice) as wh:
        pdh = wh.put([tmp_path / "a.txt"]).pdh
    signed = f"{pdh}+A{'0f' * 32}@6a1b2c3d+K@local"
    for suffix in ("", "/manifest", "/listing"):
        plain = call(ctl, "GET", f"/api/v1/collections/{pdh}{suffix}", alice)
        hinted = call(ctl, "GET", f"/api/v1/collections/{signed}{suffix}", alice)
        assert plain.status_code == 200, (suffix, plain.text)
        assert hinted.status_code == 200, (suffix, hinted.text)
        # The block signatures carry an expiry counted in whole seconds from
        # now: two requests may fall either side of a second.
        assert unsigned(hinted.text) == unsigned(plain.text)
    bad = call(ctl, "GET", f"/api/v1/collections/{pdh}+a-bad-hint", alice)
    assert bad.status_code == 404


def test_a_long_key_is_not_echoed_whole(ctl: Controller) -> None:
    """An error names the input it refuses, not all of it: 5,000 characters
    of key come back as a short start and a count."""
    alice = ctl.user("alice")
    long = "x" * 5000
    for method, path, body in [
        ("GET", f"/api/v1/collections/{long}", None),
        ("GET", f"/api/v1/collections/{long}/manifest", None),
        ("GET", f"/api/v1/collections/{long}/listing", None),
        ("GET", f"/api/v1/collections?kind={long}", None),
        ("GET", f"/api/v1/names/{long}", None),
        ("PUT", f"/api/v1/names/{long}", {"pdh": EMPTY, "expect": None, "create": True}),
        ("GET", f"/api/v1/lineage/{long}", None),
        ("DELETE", f"/api/v1/tokens/{long}", None),
        ("POST", "/api/v1/sql", {"query": long}),
        ("DELETE", f"/api/v1/keep_services/{long}", None),
    ]:
        admin = path.startswith(("/api/v1/sql", "/api/v1/keep_services"))
        resp = call(ctl, method, path, ctl.admin_token if admin else alice, json=body)
        assert 400 <= resp.status_code < 500, (method, path[:40], resp.status_code)
        error = resp.json()["error"]
        assert "xxxx" in error, (method, path[:40], error)  # it names what it refuses
        assert len(error) < 600, (method, path[:40], len(error))


def _pages(ctl: Controller, path: str, token: str, limit: int) -> list[list[object]]:
    """Every page of a list route, following its next links."""
    pages: list[list[object]] = []
    url = f"{ctl.url}{path}{'&' if '?' in path else '?'}limit={limit}"
    while True:
        resp = httpx.get(url, headers={"Authorization": f"Bearer {token}"})
        assert resp.status_code == 200, resp.text
        pages.append(resp.json())
        if "next" not in resp.links:
            return pages
        url = resp.links["next"]["url"]


def test_list_routes_answer_a_page_at_a_time(
    tmp_path: Path, catalog_url: str, keep_servers: KeepPool
) -> None:
    """GET /jobs, /names and /regol/watches answer at most ``limit`` rows (as
    /collections does), with a link to the next page; a client that gives no
    limit reads every page. On each catalog backend (names in code point order)."""
    with controller(catalog_url, keep_servers) as ctl:
        _pages_of_every_list(tmp_path, ctl)


def _pages_of_every_list(tmp_path: Path, ctl: Controller) -> None:
    from warehouse.jobs import jobstore
    from warehouse.remote.api import ApiClient

    engine = ctl.state.engine
    alice = ctl.user("alice")
    (tmp_path / "a.txt").write_bytes(b"named\n")
    with RemoteWarehouse(ctl.url, alice) as wh:
        pdh = wh.put([tmp_path / "a.txt"]).pdh
    names = ["B", "a", "a.b", "a_c", "n2"]  # code point order, not a locale's
    for name in names:
        catalog.set_name(engine, name, pdh, expect=None, user="alice")
    job = job_row(input_pdh=pdh)
    jobs = jobstore.insert_jobs(engine, [job] * 1001)
    for j in jobs[:5]:
        _watch(engine, j.id)
    for path, key, every in [
        ("/api/v1/names", "name", names),
        ("/api/v1/regol/watches", "id", [j.id for j in jobs[:5]]),
    ]:
        pages = _pages(ctl, path, alice, 2)
        assert [len(p) for p in pages] == [2, 2, 1], path
        assert [row[key] for p in pages for row in p] == every  # type: ignore[index]
    page = httpx.get(f"{ctl.url}/api/v1/jobs", headers={"Authorization": f"Bearer {alice}"})
    assert len(page.json()) == 1000 and "next" in page.links
    api = ApiClient(ctl.url, alice)
    try:
        assert [r["id"] for r in api.get("/jobs")] == [j.id for j in jobs]
        assert len(api.get("/jobs", limit=10)) == 10
        assert len(api.get("/jobs", limit=-5)) == 1
        assert len(api.get("/jobs", limit=10**9)) == 1001  # 10000 at most: all of these
    finally:
        api.close()


def _watch(engine: sa.Engine, job: int) -> WatchRecord:
    """alice's watch of ``job``'s (made-up) git function."""
    return regol_records.add_watch(
        engine,
        job=job,
        function="git:repo@main:f",
        repository="repo",
        path="f",
        branch="main",
        label="",
        owner="alice",
    )


def test_a_list_route_names_the_field_it_refuses(ctl: Controller) -> None:
    """Bad paging or filter values are a 400 naming the field; an unknown job
    state was taken for one no job is in (an empty list, no error)."""
    alice = ctl.user("alice")
    for path, field in [
        ("/api/v1/jobs?limit=abc", "limit"),
        ("/api/v1/jobs?after=-1", "after"),
        ("/api/v1/jobs?after=x", "after"),
        ("/api/v1/jobs?state=bogus", "state"),
        ("/api/v1/jobs?state=queued,runing", "state"),
        ("/api/v1/jobs?state=queued,,running", "state"),
        ("/api/v1/names?limit=1.5", "limit"),
        ("/api/v1/regol/watches?after=x", "after"),
    ]:
        resp = call(ctl, "GET", path, alice)
        assert resp.status_code == 400, (path, resp.status_code, resp.text)
        assert field in resp.json()["error"], (path, resp.text)
    resp = call(ctl, "GET", "/api/v1/jobs?state=queued,paused,complete", alice)
    assert resp.status_code == 200 and resp.json() == []


def test_the_other_list_routes_answer_a_page_at_a_time(
    catalog_url: str, keep_servers: KeepPool
) -> None:
    """A job's steps, accounting, users, tokens, keep services and a watch's
    runs are paged as /jobs is: ``limit`` rows, a next link on a full page,
    every row once; the Python client reads every page. On each catalog backend."""
    with controller(catalog_url, keep_servers) as ctl:
        _pages_of_the_other_lists(ctl)


def _pages_of_the_other_lists(ctl: Controller) -> None:

    from warehouse.catalog.schema import steps
    from warehouse.jobs import jobstore
    from warehouse.regol.model import Commit
    from warehouse.remote.api import ApiClient

    engine = ctl.state.engine
    alice = ctl.user("alice")
    users = [f"u{i}" for i in range(5)]
    for name in users:
        catalog.add_user(engine, name)
        catalog.record_block_writes(engine, name, [("0" * 32, 1, True)])
    for i in range(4):
        catalog.create_token(engine, "alice", label=f"t{i}")
    for i in range(5):
        catalog.register_keep_service(engine, f"http://127.0.0.1:{40000 + i}")
    job = job_row()
    made = jobstore.insert_jobs(engine, [job] * 6)
    step = {"job": made[0].id, "level": 0, "input": "", "state": "complete", "attempts": 1}
    with engine.begin() as conn:
        conn.execute(steps.insert(), [{**step, "number": n, "failures": n % 2} for n in range(5)])
    watch = _watch(engine, made[0].id)
    # Generations out of id order: the runs are listed in commit order.
    for generation, j in zip([3, 1, 5, 2, 4], made[1:], strict=True):
        commit = Commit(f"{generation:040x}", 0.0, "s", generation)
        regol_records.add_run(engine, watch.id, commit, j)
    admin = ctl.admin_token
    for path, token, key, count in [
        (f"/api/v1/jobs/{made[0].id}/steps", alice, "number", 5),
        (f"/api/v1/jobs/{made[0].id}/steps?failed=true", alice, "number", 2),
        ("/api/v1/accounting", admin, "user", 5),
        ("/api/v1/users", admin, "name", len(catalog.list_users(engine))),
        ("/api/v1/tokens", alice, "id", 5),  # with alice's first
        ("/api/v1/keep_services", alice, "id", len(catalog.list_keep_services(engine))),
        (f"/api/v1/regol/watches/{watch.id}/runs", alice, "generation", 5),
    ]:
        pages = _pages(ctl, path, token, 2)
        rows = [row[key] for p in pages for row in p]  # type: ignore[index]
        assert [len(p) for p in pages] == [2] * (count // 2) + [count % 2], path
        assert len(rows) == count == len(set(rows)), (path, rows)
        api = ApiClient(ctl.url, token)
        try:
            bare, _, query = path.removeprefix("/api/v1").partition("?")
            whole = api.get(bare, **dict([query.split("=")] if query else []))
            assert [row[key] for row in whole] == rows, path
        finally:
            api.close()
    runs = _pages(ctl, f"/api/v1/regol/watches/{watch.id}/runs", alice, 2)
    assert [row["generation"] for p in runs for row in p] == [1, 2, 3, 4, 5]  # type: ignore[index]
    # Not an admin: only one's own accounting row, still paged.
    catalog.record_block_writes(engine, "alice", [("1" * 32, 2, True)])
    assert [r["user"] for p in _pages(ctl, "/api/v1/accounting", alice, 1) for r in p] == ["alice"]  # type: ignore[index]
    for bad in ("x", "nan:0123456789abcdef", "1.5:XYZ", "1.5"):
        resp = call(ctl, "GET", f"/api/v1/tokens?after={bad}", alice)
        assert resp.status_code == 400 and "after" in resp.json()["error"], (bad, resp.text)
    resp = call(ctl, "GET", f"/api/v1/regol/watches/{watch.id}/runs?after=999999", alice)
    assert resp.status_code == 404, resp.text


def test_a_names_log_and_writers_answer_a_page_at_a_time(
    tmp_path: Path, catalog_url: str, keep_servers: KeepPool
) -> None:
    """GET /names/{name}/log (by version) and /names/{name}/writers (by user,
    in code point order) are paged as the other list routes are; the Python
    client reads every page. On each catalog backend."""
    from warehouse.remote.api import ApiClient

    with controller(catalog_url, keep_servers) as ctl:
        engine = ctl.state.engine
        alice = ctl.user("alice")
        pdhs = []
        with RemoteWarehouse(ctl.url, alice) as wh:
            for i in range(5):
                (tmp_path / "a.txt").write_bytes(b"version %d\n" % i)
                pdhs.append(wh.put([tmp_path / "a.txt"]).pdh)
        expect = None
        for pdh in pdhs:
            catalog.set_name(engine, "n", pdh, expect=expect, user="alice")
            expect = pdh
        writers = ["B", "a", "a.b", "a_c", "w2"]  # code point order, not a locale's
        for name in writers:
            catalog.add_user(engine, name)
            catalog.add_writer(engine, "n", name, user="alice")
        for path, key, every in [
            ("/api/v1/names/n/log", "version", [1, 2, 3, 4, 5]),
            ("/api/v1/names/n/writers", None, writers),
        ]:
            pages = _pages(ctl, path, alice, 2)
            assert [len(p) for p in pages] == [2, 2, 1], path
            rows = [row if key is None else row[key] for p in pages for row in p]  # type: ignore[index]
            assert rows == every, path
            api = ApiClient(ctl.url, alice)
            try:
                whole = api.get(path.removeprefix("/api/v1"))
                assert [row if key is None else row[key] for row in whole] == every, path
            finally:
                api.close()
        with RemoteWarehouse(ctl.url, alice) as wh:
            assert [c.version for c in wh.name_log("n")] == [1, 2, 3, 4, 5]
            assert wh.name_writers("n") == writers
        for path in ("/api/v1/names/n/log?after=5", "/api/v1/names/n/writers?after=w2"):
            resp = call(ctl, "GET", path, alice)
            assert (resp.status_code, resp.json()) == (200, []), (path, resp.text)
        for path in ("/api/v1/names/none/log", "/api/v1/names/none/writers?after=a"):
            resp = call(ctl, "GET", path, alice)
            assert resp.status_code == 404, (path, resp.text)
        resp = call(ctl, "GET", "/api/v1/names/n/log?after=x", alice)
        assert resp.status_code == 400 and "after" in resp.json()["error"], resp.text
