"""Projects as folders of names (docs/permissions.md, "Projects"; docs/formats.md,
"Keys"): a name may hold "/" (``lab/run42``), a key reads as the name it
starts with, no name is also a project, and a grant on a project reaches
the names in it, on both catalog backends, embedded and through a controller."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
import sqlalchemy as sa
from click.testing import CliRunner, Result

from cluster import Controller, KeepPool, controller
from warehouse import catalog
from warehouse.catalog import grants
from warehouse.cli import cli
from warehouse.errors import ConflictError, UsageError
from warehouse.keys import Key
from warehouse.permissions import Level, Mode

FIRST, SECOND = (f"{c * 32}+{i}" for i, c in enumerate("ab", 1))


@pytest.fixture
def engine(catalog_engine: sa.Engine) -> sa.Engine:
    for user in ("alice", "bob"):
        catalog.add_user(catalog_engine, user)
    for pdh in (FIRST, SECOND):
        catalog.add_collection(catalog_engine, pdh, "", 0, 0, "alice")
    return catalog_engine


def test_a_name_in_a_project_is_set_read_and_split_from_a_path(engine: sa.Engine) -> None:
    made = catalog.set_name(engine, "lab/run42", FIRST, expect=None, user="alice")
    assert (made.name, made.pdh) == ("lab/run42", FIRST)
    assert catalog.get_name(engine, "lab/run42").pdh == FIRST
    # A key reads as the name it starts with; the rest is a path inside it.
    assert catalog.split_key(engine, "lab/run42/sub/f.txt") == Key("lab/run42", "sub/f.txt")
    assert catalog.split_key(engine, "lab/run42") == Key("lab/run42", "")
    # No name begins the key: its first segment is the name, as before.
    assert catalog.split_key(engine, "lab/run43/f") == Key("lab", "run43/f")
    catalog.set_name(engine, "run7", SECOND, expect=None, user="alice")
    assert catalog.split_key(engine, "run7/a/b") == Key("run7", "a/b")
    assert catalog.split_key(engine, f"{FIRST}/a") == Key(FIRST, "a")


def test_no_name_is_also_a_project(engine: sa.Engine) -> None:
    catalog.set_name(engine, "lab/run42", FIRST, expect=None, user="alice")
    # `lab/run42/x` would be a path inside lab/run42, `lab` a name over it.
    for taken in ("lab", "lab/run42/x"):
        with pytest.raises(ConflictError, match="project"):
            catalog.set_name(engine, taken, SECOND, expect=None, user="bob")
    assert [n.name for n in catalog.list_names(engine)] == ["lab/run42"]
    catalog.set_name(engine, "labs/run42", SECOND, expect=None, user="bob")
    catalog.set_name(engine, "lab/run43", SECOND, expect=None, user="bob")
    catalog.set_name(engine, "run", FIRST, expect=None, user="alice")
    with pytest.raises(ConflictError, match="project"):
        catalog.set_name(engine, "run/1", SECOND, expect=None, user="alice")
    # Once the name is gone, the project may be made.
    catalog.remove_name(engine, "run", expect=FIRST, user="alice")
    catalog.set_name(engine, "run/1", SECOND, expect=None, user="alice")


@pytest.mark.parametrize(
    "bad", ["lab/", "/lab", "lab//run", "lab/.hidden", "lab/../x", "lab/run 1", "a" * 256]
)
def test_a_bad_project_name_is_bad_input(engine: sa.Engine, bad: str) -> None:
    with pytest.raises(UsageError, match="bad name"):
        catalog.set_name(engine, bad, FIRST, expect=None, user="alice")
    assert catalog.list_names(engine) == []


def test_users_and_groups_hold_no_slash(engine: sa.Engine) -> None:
    with pytest.raises(UsageError):
        catalog.add_user(engine, "lab/carol")
    root = grants.principal_of(engine, "root", admin=True)
    with pytest.raises(UsageError):
        grants.add_group(engine, "lab/team", root)


def test_a_grant_on_a_project_reaches_its_names(engine: sa.Engine) -> None:
    root = grants.principal_of(engine, "root", admin=True)
    grants.set_mode(engine, Mode.PRIVATE, root)
    catalog.set_name(engine, "lab/run42", FIRST, expect=None, user="alice")
    catalog.set_name(engine, "labs/run42", SECOND, expect=None, user="alice")
    grants.add_group(engine, "team", root)
    grants.add_member(engine, "team", "bob", root)
    bob = grants.principal_of(engine, "bob", admin=False)
    assert grants.key_level(engine, bob, "lab/run42") is Level.NONE
    grants.share(engine, "lab", "team", Level.READ, root)
    bob = grants.principal_of(engine, "bob", admin=False)
    assert grants.key_level(engine, bob, "lab/run42") is Level.READ
    assert grants.key_level(engine, bob, FIRST) is Level.READ  # through the name
    assert grants.key_level(engine, bob, "labs/run42") is Level.NONE
    assert grants.key_level(engine, bob, SECOND) is Level.NONE
    grants.unshare(engine, "lab", "team", root)
    assert grants.key_level(engine, bob, "lab/run42") is Level.NONE
    assert grants.key_level(engine, bob, FIRST) is Level.NONE


def _env(home: Path) -> dict[str, str | None]:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("WH_")}
    env["WH_HOME"] = str(home)
    return env


def _run(env: dict[str, str | None], *args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == code, (args, result.exit_code, result.output, result.stderr)
    return result


def test_embedded_commands_take_a_name_in_a_project(tmp_path: Path) -> None:
    env = _env(tmp_path / "home")
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "f.txt").write_text("hello\n")
    pdh = _run(env, "put", str(data), "--name", "lab/run42").output.split()[-1]
    assert _run(env, "name", "get", "lab/run42").output.strip() == pdh
    assert _run(env, "cat", "lab/run42/sub/f.txt").output == "hello\n"
    assert "f.txt" in _run(env, "ls", "lab/run42/sub").output
    _run(env, "get", "lab/run42/sub", str(tmp_path / "got"))
    assert (tmp_path / "got" / "f.txt").read_text() == "hello\n"
    assert _run(env, "manifest", "lab/run42").output.startswith(".")
    # A name whose last segment reads as a route's (log, writers) is a name.
    _run(env, "name", "set", "lab/log", pdh)
    assert _run(env, "name", "get", "lab/log").output.strip() == pdh
    # The project cannot be a name: exit 3, nothing changed.
    result = _run(env, "name", "set", "lab", pdh, code=3)
    assert "project" in result.stderr
    _run(env, "name", "get", "lab", code=4)


@pytest.fixture
def ctl(catalog_url: str, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(catalog_url, keep_servers) as c:
        yield c


def _wh(ctl: Controller, token: str, *args: str, code: int = 0) -> Result:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("WH_")}
    env.update(WH_URL=ctl.url, WH_TOKEN=token)
    return _run(env, *args, code=code)


def _api(ctl: Controller, token: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.Client(base_url=ctl.url, headers=headers, timeout=60)


def test_sharing_a_project_through_a_controller(ctl: Controller, tmp_path: Path) -> None:
    ctl.state.start_jobs(ctl.url, tmp_path / "controller-jobs", "local", cpus=1)
    alice, bob = ctl.user("alice"), ctl.user("bob")
    _wh(ctl, ctl.admin_token, "perms-mode", "private")
    data = tmp_path / "data"
    data.mkdir()
    (data / "reads.txt").write_text("acgt\n")
    pdh = _wh(ctl, alice, "put", str(data), "--name", "lab/run42").output.split()[-1]
    assert _wh(ctl, alice, "cat", "lab/run42/reads.txt").output == "acgt\n"
    _wh(ctl, alice, "name", "set", "lab/log", pdh)
    assert _wh(ctl, alice, "name", "get", "lab/log").output.strip() == pdh
    with _api(ctl, alice) as api:
        assert [c["new_pdh"] for c in api.get("/api/v1/names/lab/log/log").json()] == [pdh]
        assert api.get("/api/v1/names/lab/log").json()["pdh"] == pdh

    # Before any grant bob's answers are those for a project that does not exist.
    hidden = _wh(ctl, bob, "cat", "lab/run42/reads.txt", code=4).stderr
    absent = _wh(ctl, bob, "cat", "lav/run42/reads.txt", code=4).stderr
    assert hidden.replace("lab", "lav") == absent
    with _api(ctl, bob) as api:
        for path in ("lab/run42", "lab%2Frun42", "lab/run42/log", "lab/run42/writers"):
            r, none = api.get(f"/api/v1/names/{path}"), api.get(f"/api/v1/names/{path}x")
            assert r.status_code == none.status_code == 404, (path, r.text)
        r = api.post("/api/v1/jobs", json={"function": "builtin:wordcount", "input": "lab/run42"})
        assert r.status_code == 404, r.text

    # An admin gives alice the project; she shares it with bob's group.
    _wh(ctl, alice, "share", "lab", "alice", "--level", "manage", code=4)
    _wh(ctl, ctl.admin_token, "share", "lab", "alice", "--level", "manage")
    _wh(ctl, alice, "group", "add", "team")
    _wh(ctl, alice, "group", "member", "team", "--add", "bob")
    _wh(ctl, alice, "share", "lab", "team")
    assert _wh(ctl, bob, "cat", "lab/run42/reads.txt").output == "acgt\n"
    assert "reads.txt" in _wh(ctl, bob, "ls", "lab/run42").output
    assert _wh(ctl, bob, "name", "get", "lab/run42").output.strip() == pdh
    assert "group team\tread\ton lab" in _wh(ctl, bob, "perms", "lab/run42").output
    with _api(ctl, bob) as api:
        assert api.get(f"/api/v1/names/{quote('lab/run42', safe='')}").json()["pdh"] == pdh
        names = {n["name"] for n in api.get("/api/v1/names", params={"prefix": "lab/"}).json()}
        assert names == {"lab/run42", "lab/log"}
        r = api.post("/api/v1/jobs", json={"function": "builtin:wordcount", "input": "lab/run42"})
        assert r.status_code in (200, 201), r.text
        r = api.post(
            "/api/v1/jobs", json={"function": "builtin:wordcount", "input": "lab/run42/reads.txt"}
        )
        assert r.status_code == 400 and "inside a collection" in r.text, r.text
    # Reading is not writing: bob may not move alice's name.
    _wh(ctl, bob, "name", "set", "lab/run42", pdh, "--expect", pdh, code=6)
    # Nor make a name that would turn one of alice's into a project.
    _wh(ctl, bob, "name", "set", "lab/run42/mine", pdh, code=3)

    with httpx.Client(base_url=ctl.url, timeout=60) as browser:
        answer = browser.post("/web/signin", data={"token": bob, "next": "/web/"})
        assert answer.status_code == 303, answer.text
        page = browser.get(f"/web/names/{quote('lab/run42', safe='')}")
        assert page.status_code == 200 and pdh in page.text, page.text[:300]
        listing = browser.get("/web/collections")
        assert f"/web/names/{quote('lab/run42', safe='')}" in listing.text

    _wh(ctl, alice, "unshare", "lab", "team")
    with httpx.Client(base_url=ctl.url, timeout=60) as browser:
        browser.post("/web/signin", data={"token": bob, "next": "/web/"})
        assert browser.get("/web/names/lab/run42").status_code == 404
    hidden = _wh(ctl, bob, "cat", "lab/run42/reads.txt", code=4).stderr
    assert hidden.replace("lab", "lav") == absent
