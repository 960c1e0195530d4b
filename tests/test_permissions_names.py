"""Names and permissions: a removed name takes its grants with it, a re-created
one moves as any other, and nothing a user may not read shows through the
names list's paging or the writers' routes (docs/permissions.md)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from cluster import Controller, KeepPool, controller
from warehouse import catalog
from warehouse.catalog import grants
from warehouse.cli import cli
from warehouse.permissions import Level

FIRST, SECOND, THIRD = (f"{c * 32}+{i}" for i, c in enumerate("abc", 1))


@pytest.fixture
def engine(catalog_engine: sa.Engine) -> sa.Engine:
    for user in ("alice", "bob"):
        catalog.add_user(catalog_engine, user)
    for pdh in (FIRST, SECOND, THIRD):
        catalog.add_collection(catalog_engine, pdh, "", 0, 0, "alice")
    return catalog_engine


def test_a_recreated_name_moves_on_from_its_history(engine: sa.Engine) -> None:
    catalog.set_name(engine, "run", FIRST, expect=None, user="alice")
    catalog.remove_name(engine, "run", expect=FIRST, user="alice")
    again = catalog.set_name(engine, "run", SECOND, expect=None, user="alice")
    assert again.version == 3
    moved = catalog.set_name(engine, "run", THIRD, expect=SECOND, user="alice")
    assert (moved.pdh, moved.version) == (THIRD, 4)
    assert catalog.get_name(engine, "run").version == 4
    log = catalog.name_log(engine, "run")
    assert [(c.version, c.old_pdh, c.new_pdh) for c in log] == [
        (1, None, FIRST),
        (2, FIRST, None),
        (3, None, SECOND),
        (4, SECOND, THIRD),
    ]


def test_removing_a_name_drops_its_grants(engine: sa.Engine) -> None:
    bob = grants.principal_of(engine, "bob", admin=False)
    catalog.set_name(engine, "results", FIRST, expect=None, user="bob")
    grants.share(engine, "results", "bob", Level.MANAGE, bob)
    grants.share(
        engine, "results-old", "bob", Level.MANAGE, grants.principal_of(engine, "root", admin=True)
    )
    catalog.remove_name(engine, "results", expect=FIRST, user="bob")
    catalog.set_name(engine, "results", SECOND, expect=None, user="alice")
    grants.set_mode(engine, grants.Mode.PRIVATE, grants.principal_of(engine, "root", admin=True))
    assert grants.key_level(engine, bob, "results") is Level.NONE
    # Only the grants on that very name go.
    assert [g.target for g in grants.perms(engine, "results-old", bob).grants] == ["results-old"]


@pytest.fixture
def ctl(tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(tmp_path / "controller.db", keep_servers) as c:
        yield c


def _api(ctl: Controller, token: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=ctl.url, headers=headers, timeout=60)


def _collection(ctl: Controller, token: str, root: Path, text: str) -> str:
    data = root / text
    data.mkdir()
    (data / "f.txt").write_text(text)
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("WH_")}
    env.update(WH_URL=ctl.url, WH_TOKEN=token)
    result = CliRunner().invoke(cli, ["put", str(data)], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output.split()[-1]


def test_private_names_stay_hidden_in_paging_and_writers(ctl: Controller, tmp_path: Path) -> None:
    alice, bob = ctl.user("alice"), ctl.user("bob")
    with _api(ctl, ctl.admin_token) as root:
        assert root.put("/api/v1/permission-mode", json={"mode": "private"}).status_code == 200
    with _api(ctl, alice) as a, _api(ctl, bob) as b:
        apdh = _collection(ctl, alice, tmp_path, "alice")
        bpdh = _collection(ctl, bob, tmp_path, "bob")
        for name in ("secret-merger", "secret-mz"):
            assert a.put(f"/api/v1/names/{name}", json={"pdh": apdh}).status_code == 200
        for name in ("secret-ma", "secret-mb"):
            assert b.put(f"/api/v1/names/{name}", json={"pdh": bpdh}).status_code == 200

        # The link names the last row shown, and only under a full page.
        r = b.get("/api/v1/names", params={"prefix": "secret-m", "limit": 1})
        assert [n["name"] for n in r.json()] == ["secret-ma"]
        assert "after=secret-ma&" in r.headers["link"] + "&"
        r = b.get("/api/v1/names", params={"prefix": "secret-m", "limit": 2})
        assert [n["name"] for n in r.json()] == ["secret-ma", "secret-mb"]
        assert "secret-merger" not in r.headers.get("link", "")
        r = b.get("/api/v1/names", params={"prefix": "secret-m", "after": "secret-mb"})
        assert r.json() == [] and "link" not in r.headers
        r = b.get("/api/v1/names", params={"prefix": "secret-me", "limit": 1})
        assert r.json() == [] and "link" not in r.headers

        # The writers' routes answer a hidden name as a missing one.
        for hidden, absent in (
            (
                b.post("/api/v1/names/secret-merger/writers", json={"user": "bob"}),
                b.post("/api/v1/names/secret-mx/writers", json={"user": "bob"}),
            ),
            (
                b.delete("/api/v1/names/secret-merger/writers/bob"),
                b.delete("/api/v1/names/secret-mx/writers/bob"),
            ),
        ):
            assert hidden.status_code == absent.status_code == 404, hidden.text
            assert (
                hidden.json()["error"].replace("secret-merger", "secret-mx")
                == (absent.json()["error"])
            )

        # A grant bob gave himself on his own name goes with the name.
        assert b.put("/api/v1/names/results", json={"pdh": bpdh}).status_code == 200
        r = b.post("/api/v1/grants", json={"key": "results", "who": "bob", "level": "manage"})
        assert r.status_code in (200, 201), r.text
        assert b.delete("/api/v1/names/results", params={"expect": bpdh}).status_code == 200
        assert a.put("/api/v1/names/results", json={"pdh": apdh}).status_code == 200
        assert b.get("/api/v1/names/results").status_code == 404
        r = b.post("/api/v1/grants", json={"key": "results", "who": "bob", "level": "write"})
        assert r.status_code == 404, r.text
        # And alice moves her re-created name.
        again = _collection(ctl, alice, tmp_path, "again")
        r = a.put("/api/v1/names/results", json={"pdh": again, "expect": apdh})
        assert r.status_code == 200, r.text


def test_the_jobs_list_pages_over_hidden_jobs(ctl: Controller, tmp_path: Path) -> None:
    ctl.state.start_jobs(ctl.url, tmp_path / "controller-jobs", "local", cpus=1)
    alice, bob = ctl.user("alice"), ctl.user("bob")
    with _api(ctl, ctl.admin_token) as root:
        assert root.put("/api/v1/permission-mode", json={"mode": "private"}).status_code == 200
    with _api(ctl, alice) as a, _api(ctl, bob) as b:
        apdh = _collection(ctl, alice, tmp_path, "alice")
        bpdh = _collection(ctl, bob, tmp_path, "bob")
        ids = []
        for api, pdh in ((a, apdh), (a, apdh), (b, bpdh)):
            r = api.post("/api/v1/jobs", json={"function": "builtin:wordcount", "input": pdh})
            assert r.status_code in (200, 201), r.text
            ids.append(r.json()["id"])
        r = b.get("/api/v1/jobs", params={"limit": 1})
        assert [j["id"] for j in r.json()] == [ids[2]]
        assert f"after={ids[2]}&" in r.headers["link"] + "&"
        r = b.get("/api/v1/jobs", params={"limit": 1, "after": ids[2]})
        assert r.json() == [] and "link" not in r.headers
