"""The examples of docs/workflows.md, run as written (each in a fresh $WH_HOME),
and `warehouse.workflow(...)` from a program."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

import warehouse
from warehouse.embedded import EmbeddedWarehouse
from warehouse.workflows import runstore

ROOT = Path(__file__).resolve().parent.parent


def examples() -> dict[str, list[tuple[str, str]]]:
    """Each "### Example" of docs/workflows.md: its code blocks (language, text) in order."""
    text = (ROOT / "docs" / "workflows.md").read_text()
    section = text.split("## Examples", 1)[1]
    found = {}
    for part in re.split(r"^### ", section, flags=re.M)[1:]:
        title = part.splitlines()[0]
        found[title] = re.findall(r"^```(\w+)\n(.*?)^```", part, flags=re.M | re.S)
    return found


def test_the_docs_have_two_examples() -> None:
    assert len(examples()) == 2


@pytest.mark.slow
@pytest.mark.parametrize("title", sorted(examples()))
def test_a_documented_example_runs_as_written(title: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "WH_HOME": str(tmp_path / "home"),
        "WH_USER": "alice",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    env.pop("WH_URL", None)
    outputs = []
    for lang, body in examples()[title]:
        if lang == "yaml":
            name = body.splitlines()[0].removeprefix("# ").strip()
            (tmp_path / name).write_text(body)
            continue
        assert lang == "sh"
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", body],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (body, done.stdout, done.stderr)
        outputs.append(done.stdout + done.stderr)
    everything = "\n".join(outputs)
    assert "complete" in everything
    if title.startswith("Example 1"):
        assert "nothing to run, all 3 jobs reused (0 steps run)" in everything
        assert re.search(r"2 jobs ran \(\d+ steps\), 1 reused", everything), everything


@pytest.mark.slow
def test_a_generated_workflow_from_python(wh: EmbeddedWarehouse, tmp_path: Path) -> None:
    d = tmp_path / "reads"
    d.mkdir()
    (d / "x.txt").write_text("some words and more words\n")
    wh.put([d], name="reads")
    jobs: dict[str, dict[str, object]] = {
        f"copy{i}": {"function": "builtin:copy", "input": "$reads" if i == 0 else f"$copy{i - 1}"}
        for i in range(3)
    }
    jobs["count"] = {
        "function": "builtin:wordcount",
        "input": {f"c{i}": f"$copy{i}" for i in range(3)},
        "params": {"partitions": 1},
    }
    definition = {
        "workflow": "generated",
        "inputs": {"reads": {"default": "reads"}},
        "jobs": jobs,
        "outputs": {"count": "$count"},
    }
    run = warehouse.workflow(definition, wh=wh, name_outputs="gen")
    assert run["state"] == "complete" and not run["resumed"]
    counted = wh.reader("gen.count")
    (part,) = counted.files
    assert "words\t6\n" in counted.read_file(part).decode()
    again = warehouse.workflow(definition, wh=wh, name_outputs="gen")
    assert again["id"] != run["id"] and all(n["reused"] for n in again["nodes"])
    with pytest.raises(warehouse.UsageError, match=r"jobs\.count\.input\.c0: unknown reference"):
        bad = {**definition, "jobs": {"count": jobs["count"]}}
        warehouse.workflow(bad, wh=wh)


def test_a_mapping_or_path_python_cannot_take_is_a_usage_error(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    job = {"function": "builtin:copy", "input": "reads"}
    with pytest.raises(warehouse.UsageError, match="cannot be written as YAML"):
        warehouse.workflow(
            {"workflow": "x", "jobs": {"a": {**job, "params": {"o": object()}}}}, wh=wh
        )
    with pytest.raises(warehouse.UsageError, match=r"jobs\.a\.params\.d: a date is not a JSON"):
        warehouse.workflow(
            {"workflow": "x", "jobs": {"a": {**job, "params": {"d": date.today()}}}}, wh=wh
        )
    with pytest.raises(warehouse.UsageError, match="over 4194304 bytes"):
        warehouse.workflow(Path("/dev/zero"), wh=wh)
    assert runstore.list_runs(wh.engine) == []
