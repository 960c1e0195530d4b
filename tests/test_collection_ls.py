"""`wh collection ls [--mine] [--kind]`: collections found, named or not."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from conftest import Runner
from installations import Installation
from warehouse.cli import cli
from warehouse.embedded import EmbeddedWarehouse


def tree(root: Path, text: str) -> Path:
    root.mkdir(parents=True)
    (root / "f.txt").write_text(text)
    return root


def listed(run: Runner, *args: str) -> list[dict[str, object]]:
    rows = json.loads(run("collection", "ls", "--json", *args).output)
    assert isinstance(rows, list)
    return rows


def test_mine_and_kind(installation: Installation, tmp_path: Path) -> None:
    run = Runner()
    alice = run("put", str(tree(tmp_path / "a", "alice's\n"))).output.strip()
    other = dict(installation.env)
    if installation.controller is not None:
        other["WH_TOKEN"] = installation.controller.user("bob")
    else:
        other["WH_USER"] = "bob"
    done = CliRunner().invoke(cli, ["put", str(tree(tmp_path / "b", "bob's\n"))], env=other)
    assert done.exit_code == 0, done.stderr
    bob = done.output.strip()
    everyone = listed(run)
    assert [r["pdh"] for r in everyone] == [bob, alice]  # newest first
    assert everyone[0]["kinds"] == ["put"] and everyone[0]["created_by"] == "bob"
    assert str(everyone[0]["created_at"]).endswith("Z")
    assert [r["pdh"] for r in listed(run, "--mine")] == [alice]
    assert [r["pdh"] for r in listed(run, "--kind", "put", "--limit", "1")] == [bob]
    assert listed(run, "--kind", "output") == []
    # Piped: a header, then tab-separated rows.
    text = run("collection", "ls").output.splitlines()
    assert text[0] == "pdh\tkind\tfiles\tbytes\tcreated_at\tcreated_by"
    assert text[1].split("\t")[:4] == [bob, "put", "1", "6"]
    bad = run("collection", "ls", "--kind", "nope", code=2)
    assert "nope" in bad.stderr


def test_a_jobs_output_and_log_are_found_by_kind(
    wh: EmbeddedWarehouse, tmp_path: Path, run: Runner
) -> None:
    key = wh.put([tree(tmp_path / "in", "data\n")]).pdh
    out = run("job", "submit", "builtin:zhash", "--input", key, "--wait").output
    assert "complete" in out, out
    outputs = listed(run, "--kind", "output")
    logs = listed(run, "--kind", "log")
    assert len(outputs) == 1 and "job output" in outputs[0]["kinds"]
    assert len(logs) == 1 and logs[0]["kinds"] == ["job log"]
    assert key in [r["pdh"] for r in listed(run, "--kind", "put")]
