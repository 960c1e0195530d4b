"""The picture of the workflow in docs/assembly.md: the run page's drawing of a real run.

    python examples/assembly/picture.py docs/assembly-workflow.svg

Assembles a small simulated genome with `wh workflow run` in a throw-away
warehouse (``WH_HOME`` in a temporary directory), then draws the run as the
run page does (warehouse.web.graphs.run_drawing, the graph.html template)
into a standalone SVG file: the page's style for drawings inlined, links to
job pages (which point into that warehouse) left out. Run it from a checkout:
the workflow's stages are this repository's files at HEAD.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import simulate

import warehouse
from warehouse.web.graphs import run_drawing
from warehouse.web.pages import _env
from warehouse.workflows import list_nodes
from warehouse.workflows.runrecords import NodeRecord

HERE = Path(__file__).resolve().parent


def run_nodes(work: Path) -> list[NodeRecord]:
    genome = simulate.random_genome(20_000, 1)
    simulate.write(work / "sim", genome, simulate.simulate_reads(genome, 30, 100, 0.01, 1))
    env = {**os.environ, "WH_HOME": str(work / "home")}
    wh = str(Path(sys.executable).parent / "wh")
    put = [wh, "put", str(work / "sim" / "reads"), "--name", "reads"]
    subprocess.run(put, env=env, check=True, capture_output=True)
    wf = str(HERE / "assemble.wf.yml")
    done = subprocess.run(
        [wh, "workflow", "run", wf, "-i", "reads=reads", "--wait", "--json"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    view = json.loads(done.stdout)
    if view["state"] != "complete":
        raise SystemExit(f"Error: the run ended {view['state']}")
    # The nodes as the run page gets them (times in Unix seconds), from the
    # catalog: `--json` prints times as ISO 8601 text, as every command does.
    with warehouse.open(work / "home") as wh:
        return list_nodes(wh.engine, view["id"])


def style() -> str:
    """The page's rules for drawings, with its colour variables filled in."""
    css = resources.files("warehouse.web").joinpath("static/style.css").read_text()
    colours = dict(re.findall(r"--([a-z]+):\s*([^;]+);", css.split("}", 1)[0]))
    rules = [line for line in css.splitlines() if line.startswith("svg.dag")]
    text = "\n".join(rules)
    return re.sub(r"var\(--([a-z]+)\)", lambda m: colours[m.group(1)], text)


def svg(nodes: list[NodeRecord]) -> str:
    html = _env.get_template("graph.html").module.dag(  # type: ignore[attr-defined]
        run_drawing(nodes), "the assembly workflow's jobs"
    )
    found = re.search(r"<svg .*</svg>", str(html), re.S)
    assert found is not None
    out = found.group(0)
    out = re.sub(r"\s*<a href=\"[^\"]*\">|\s*</a>", "", out)
    out = out.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1)
    out = out.replace("<defs>", f"<style>\n{style()}\n</style>\n  <defs>", 1)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + out + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        text = svg(run_nodes(Path(tmp)))
    part = a.out.with_name(a.out.name + ".part")
    part.write_text(text)
    part.replace(a.out)


if __name__ == "__main__":
    main()
