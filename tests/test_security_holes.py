"""Holes a hostile or careless user found, each refused as documented: a
YAML tag in a workflow file (docs/workflows.md), and one limit for
--name-outputs on the command line and through a controller."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cluster import Controller, KeepPool, controller
from conftest import Runner
from warehouse.embedded import EmbeddedWarehouse
from warehouse.workflows import runstore
from warehouse.workflows.spec import parse_workflow

WORKFLOW = """\
workflow: tagged
jobs:
  a:
    function: builtin:copy
    input: reads
    params:
      p: {value}
outputs:
  copied: $a
"""


def _reads(wh: EmbeddedWarehouse, tmp_path: Path) -> None:
    d = tmp_path / "reads"
    d.mkdir()
    (d / "x").write_text("x")
    wh.put([d], name="reads")


@pytest.mark.parametrize(
    ("value", "tag"),
    [
        ('!!python/object/apply:os.system ["touch pwned"]', "!!python/object/apply:os.system"),
        ("!!python/object:collections.OrderedDict {a: 1}", "!!python/object:collections"),
        ("!local [1, 2]", "!local"),
        ("!!set {a, b}", "!!set"),
        ("{!!python/name:os.system k: 1}", "!!python/name:os.system"),
    ],
)
def test_an_unknown_yaml_tag_is_refused_naming_line_and_tag(
    run: Runner, wh: EmbeddedWarehouse, tmp_path: Path, value: str, tag: str
) -> None:
    _reads(wh, tmp_path)
    wf = tmp_path / "tagged.yml"
    wf.write_text(WORKFLOW.format(value=value))
    said = run("workflow", "run", str(wf), code=2).stderr
    assert said.startswith("Error: tagged.yml:7: jobs.a.params") and said.count("\n") == 1, said
    assert f"unknown YAML tag {tag}" in said
    assert runstore.list_runs(wh.engine) == []  # nothing recorded
    assert not (tmp_path / "pwned").exists()


def test_json_s_own_tags_are_still_read() -> None:
    text = WORKFLOW.format(value="!!map {n: !!int '3', s: !!str 4, l: !!seq [!!null '']}")
    assert parse_workflow(text, "x.yml").jobs["a"].params == {"p": {"n": 3, "s": "4", "l": [None]}}


# -- --name-outputs: one limit --------------------------------------------------

# The longest prefix the workflow above takes: PREFIX.copied is a name (255).
LONGEST = "p" * (255 - len(".copied"))


def test_the_longest_prefix_is_taken_and_one_more_refused_on_the_command_line(
    run: Runner, wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    _reads(wh, tmp_path)
    wf = tmp_path / "named.yml"
    wf.write_text(WORKFLOW.format(value="1"))
    said = run("workflow", "run", str(wf), "--name-outputs", LONGEST + "p", code=2).stderr
    assert said.startswith("Error: --name-outputs: ") and said.count("\n") == 1, said
    assert "256 characters: PREFIX.OUTPUT holds at most 255" in said
    assert runstore.list_runs(wh.engine) == []
    run("workflow", "run", str(wf), "--name-outputs", LONGEST, "--wait")
    assert wh.get_name(f"{LONGEST}.copied").pdh


@pytest.fixture
def ctl(tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(tmp_path / "controller.db", keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=2)
        yield c


def test_the_api_takes_what_the_command_line_takes(ctl: Controller, tmp_path: Path) -> None:
    token = ctl.user("alice")
    alice = {"Authorization": f"Bearer {token}"}
    d = tmp_path / "reads"
    d.mkdir()
    (d / "x").write_text("x")
    body = {"file": WORKFLOW.format(value="1"), "filename": "named.yml"}
    with httpx.Client(base_url=ctl.url, headers=alice, verify=False, timeout=60) as http:
        put = Runner()
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("WH_URL", ctl.url)
            mp.setenv("WH_TOKEN", token)
            mp.setenv("WH_HOME", str(tmp_path / "unused-home"))
            put("put", str(d), "--name", "reads")
        over = http.post("/api/v1/workflows", json={**body, "name_outputs": LONGEST + "p"})
        assert over.status_code == 400, over.text
        assert "256 characters: PREFIX.OUTPUT holds at most 255" in over.json()["error"]
        too_long = http.post("/api/v1/workflows", json={**body, "name_outputs": "p" * 256})
        assert too_long.status_code == 400 and "255" in too_long.json()["error"]
        taken = http.post("/api/v1/workflows", json={**body, "name_outputs": LONGEST})
        assert taken.status_code == 200, taken.text
        assert taken.json()["name_outputs"] == LONGEST
        http.post(f"/api/v1/workflows/{taken.json()['id']}/cancel")
