"""What the pages draw: a workflow run's jobs, and a collection's lineage, as
``dag`` nodes and edges (pure: records in, a drawing out)."""

from __future__ import annotations

import time

from warehouse.lineage.values import Lineage, LineageCollection, LineageJob
from warehouse.web.dag import DagEdge, DagNode, Drawing, layout
from warehouse.web.pages import PREFIX
from warehouse.workflows.runrecords import NodeRecord

__all__ = ["MAX_DRAWN", "lineage_drawing", "run_drawing", "short_pdh"]

# Past this many nodes a drawing is too big to read: the pages list instead.
MAX_DRAWN = 400


def short_pdh(pdh: str) -> str:
    digest, _, size = pdh.partition("+")
    return f"{digest[:10]}…+{size}"


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def run_drawing(nodes: list[NodeRecord]) -> Drawing:
    """A workflow run's jobs, each coloured by state, reused ones marked, linked to its job."""
    drawn = []
    for n in nodes:
        detail = n.state + (" · reused" if n.reused else "")
        title = [f"{n.node}: {n.state}", n.function]
        if n.job_id is not None:
            title.append(f"job {n.job_id}")
        if n.reused:
            title.append("answered from reuse")
        if n.started_at is not None:
            title.append(f"{_when(n.started_at)} – {_when(n.finished_at)}")
        if n.error:
            title.append(n.error)
        css = f"job state-{n.state}" + (" reused" if n.reused else "")
        href = None if n.job_id is None else f"{PREFIX}/jobs/{n.job_id}"
        drawn.append(DagNode(f"node:{n.node}", n.node, detail, css, href, "\n".join(title)))
    edges = [DagEdge(f"node:{d}", f"node:{n.node}") for n in nodes for d in n.dependencies]
    return layout(drawn, edges)


def _collection_node(c: LineageCollection, asked: str) -> DagNode:
    label = c.names[0] if c.names else short_pdh(c.pdh)
    kinds = [k.replace(" ", "-") for k in c.kinds]
    css = " ".join(["collection", *kinds, *(["asked"] if c.pdh == asked else [])])
    title = [c.pdh, ", ".join(c.kinds)]
    if c.names:
        title.append("names: " + ", ".join(c.names))
    if "put" in c.kinds and c.recorded_by:
        title.append(f"put by {c.recorded_by} at {_when(c.recorded_at)}")
    if c.more:
        title.append("made from more than is drawn (depth)")
    detail = ", ".join(c.kinds) + (" · more" if c.more else "")
    return DagNode(
        f"collection:{c.pdh}", label, detail, css, f"{PREFIX}/c/{c.pdh}", "\n".join(title)
    )


def _job_node(j: LineageJob) -> DagNode:
    name = j.function_path.rsplit("/", 1)[-1]
    title = [f"job {j.id} ({j.state})", j.function, f"version {j.function_pdh}/{j.function_path}"]
    if j.function_commit:
        title.append(f"commit {j.function_commit}")
    title.append(f"params {j.params}")
    title.extend(f"workflow run {w.run}, node {w.node}" for w in j.workflows)
    return DagNode(
        f"job:{j.id}",
        f"job {j.id} · {name}",
        j.function_commit[:12] if j.function_commit else j.function,
        f"job state-{j.state}",
        f"{PREFIX}/jobs/{j.id}",
        "\n".join(title),
    )


def lineage_drawing(g: Lineage) -> Drawing:
    """Collections as boxes and jobs between them, data flowing down the page."""
    nodes = [_collection_node(c, g.pdh) for c in g.collections] + [_job_node(j) for j in g.jobs]
    edges = [
        DagEdge(e.source, e.target, e.role, None if e.dir is None else f"./{e.dir}")
        for e in g.edges
    ]
    return layout(nodes, edges)
