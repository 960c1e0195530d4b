"""The sharing commands on the embedded warehouse: its user is its admin, and
what it records is the catalog a controller would serve (docs/permissions.md)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Runner
from warehouse import catalog
from warehouse.embedded import EmbeddedWarehouse
from warehouse.permissions import Level, Mode


def test_groups_grants_and_the_mode_on_the_embedded_catalog(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("x\n")
    pdh = run("put", str(tmp_path / "d"), "--name", "run42").output.split()[-1]
    with EmbeddedWarehouse(home) as wh:
        catalog.add_user(wh.engine, "bob")
    assert run("perms-mode").output == "open\n"
    assert run("perms-mode", "private").output == "private\n"
    run("group", "add", "lab")
    assert run("group", "member", "lab", "--add", "bob").output == "bob\n"
    run("group", "member", "lab", "--remove", "nobody", code=4)
    groups = json.loads(run("group", "ls", "--json").output)
    assert groups == [{"name": "lab", "owner": groups[0]["owner"], "members": ["bob"]}]
    run("share", "run42", "lab", "--level", "write")
    run("share", pdh, "bob")
    shown = json.loads(run("perms", "run42", "--json").output)
    assert shown["level"] == "manage" and shown["mode"] == "private"
    assert shown["grants"] == [
        {"target": "run42", "grantee_kind": "group", "grantee": "lab", "level": "write"}
    ]
    run("unshare", "run42", "lab")
    run("unshare", "run42", "lab", code=4)
    with EmbeddedWarehouse(home) as wh:
        assert wh.permission_mode() is Mode.PRIVATE
        assert [g.grantee for g in wh.perms(pdh).grants] == ["bob"]
        assert wh.perms(pdh).level is Level.MANAGE
