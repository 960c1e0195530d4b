"""A lineage graph as text for a terminal (an indented tree) or as Graphviz ``dot``."""

from __future__ import annotations

import json
import time

from warehouse.lineage.values import Lineage, LineageCollection, LineageJob

__all__ = ["to_dot", "to_text"]


def _when(t: float | None) -> str:
    # With its zone, as every command's text times (docs/cli.md, "Output").
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _collection_line(c: LineageCollection) -> str:
    text = f"{c.pdh}  {', '.join(c.kinds)}"
    if "put" in c.kinds and c.recorded_by is not None:
        text += f" by {c.recorded_by} at {_when(c.recorded_at)}"
    if c.names:
        text += f"  names: {', '.join(c.names)}"
    if c.more:
        text += "  (more beyond --depth)"
    return text


def _job_lines(j: LineageJob) -> list[str]:
    commit = f"  commit {j.function_commit}" if j.function_commit else ""
    ran = ""
    if j.started_at is not None and j.finished_at is not None:
        ran = f", ran {_when(j.started_at)} for {j.finished_at - j.started_at:.1f} s"
    params = json.loads(j.params)
    where = "".join(f", workflow run {w.run} node {w.node}" for w in j.workflows)
    return [
        f"job {j.id} ({j.state}): {j.function}{commit}",
        f"  version {j.function_pdh}/{j.function_path}",
        f"  params {json.dumps(params, sort_keys=True, ensure_ascii=False)}",
        f"  {j.executor} executor, submitted by {j.submitted_by}{ran}{where}",
    ]


def to_text(g: Lineage) -> str:
    """An indented tree from the asked-for collection; a node met again says so."""
    jobs = {j.id: j for j in g.jobs}
    below: dict[str, list[tuple[str, str]]] = {}  # node -> [(label, node)]
    for e in g.edges:
        if g.direction == "up":
            label = {
                "output": "made by",
                "input": "input",
                "part": f"part ./{e.dir}",
                "workflow file": "workflow file",
                "code": "code",
            }[e.role]
            below.setdefault(e.target, []).append((label, e.source))
        else:
            label = {
                "output": "made",
                "input": "read by",
                "part": f"part ./{e.dir} of",
                "workflow file": "workflow file of",
                "code": "code of",
            }[e.role]
            below.setdefault(e.source, []).append((label, e.target))
    lines = [f"lineage of {g.key} ({g.pdh}), {g.direction}"]
    shown: set[str] = set()

    # Depth first, with a stack of its own: a chain of thousands of jobs is
    # deeper than Python's recursion allows.
    stack = [(f"collection:{g.pdh}", "", 0)]
    while stack:
        node, label, indent = stack.pop()
        pad = "  " * min(indent, 40)  # past 40 levels, lines stop moving right
        kind, _, ident = node.partition(":")
        again = node in shown
        shown.add(node)
        if kind == "job":
            first, *rest = _job_lines(jobs[int(ident)])
            lines.append(f"{pad}{label}{first}" + ("  (see above)" if again else ""))
            if not again:
                lines.extend(pad + "  " + r for r in rest)
        else:
            text = ident if again else _collection_line(g.collection(ident))
            lines.append(f"{pad}{label}{text}" + ("  (see above)" if again else ""))
        if not again:
            for child_label, child in reversed(below.get(node, [])):
                stack.append((child, child_label + " ", indent + 1))
    return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    """A dot double-quoted string: quotes and backslashes escaped, newlines as ``\\n``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def to_dot(g: Lineage) -> str:
    """Graphviz text: collections as boxes, jobs as ellipses, data flowing downwards."""
    out = [
        f"// lineage of {g.key} ({g.pdh}), {g.direction}".replace("\n", " "),
        "digraph lineage {",
        '  graph [rankdir=TB, fontname="monospace"];',
        '  node [fontname="monospace", fontsize=10];',
        '  edge [fontname="monospace", fontsize=9];',
    ]
    for c in g.collections:
        label = "\n".join([c.pdh, ", ".join(c.kinds), *c.names])
        style = ', style="bold"' if c.pdh == g.pdh else ""
        out.append(f"  {_quote('collection:' + c.pdh)} [shape=box, label={_quote(label)}{style}];")
    for j in g.jobs:
        lines = [f"job {j.id} ({j.state})", j.function]
        if j.function_commit:
            lines.append(f"commit {j.function_commit[:12]}")
        out.append(
            f"  {_quote(f'job:{j.id}')} [shape=ellipse, label={_quote(chr(10).join(lines))}];"
        )
    for e in g.edges:
        attrs = f" [label={_quote('./' + e.dir)}]" if e.dir is not None else ""
        out.append(f"  {_quote(e.source)} -> {_quote(e.target)}{attrs};")
    out.append("}")
    return "\n".join(out) + "\n"
