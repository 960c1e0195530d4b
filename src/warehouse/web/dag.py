"""A directed graph drawn as SVG on the server: a simple layered layout.

Each node sits in the layer of the longest path reaching it (sources on
top); a few sweeps order each layer by the mean place of its neighbours,
which untangles the usual fan-out / fan-in shapes; edges are curves from a
node's bottom to the next node's top. Cycles (a job whose output is its own
input) are tolerated: a node on one goes below the nodes placed before it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DagEdge", "DagNode", "Drawing", "PlacedEdge", "PlacedNode", "layout"]

NODE_W = 176
NODE_H = 40
GAP_X = 22
GAP_Y = 56
MARGIN = 12
LABEL_CHARS = 24  # longer text is cut with "…"; the node's title has all of it
SWEEPS = 4


@dataclass(frozen=True, slots=True)
class DagNode:
    id: str
    label: str  # first line
    detail: str  # second line
    css: str  # classes of the node's group (state, kind, reused...)
    href: str | None
    title: str  # shown on hover


@dataclass(frozen=True, slots=True)
class DagEdge:
    source: str
    target: str
    css: str = ""
    label: str | None = None


@dataclass(frozen=True, slots=True)
class PlacedNode:
    node: DagNode
    x: float
    y: float
    label: str
    detail: str


@dataclass(frozen=True, slots=True)
class PlacedEdge:
    path: str  # SVG path data
    css: str
    label: str | None
    lx: float
    ly: float


@dataclass(frozen=True, slots=True)
class Drawing:
    nodes: list[PlacedNode]
    edges: list[PlacedEdge]
    width: int
    height: int
    node_w: int = NODE_W
    node_h: int = NODE_H


def _cut(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def _layers(
    ids: list[str], preds: dict[str, list[str]], succs: dict[str, list[str]]
) -> dict[str, int]:
    """Longest path from a source (Kahn's order); nodes on cycles afterwards, in order."""
    indegree = {n: len(preds[n]) for n in ids}
    ready = deque(n for n in ids if indegree[n] == 0)
    layer: dict[str, int] = {}
    while ready:
        n = ready.popleft()
        layer[n] = max((layer[p] + 1 for p in preds[n] if p in layer), default=0)
        for s in succs[n]:
            indegree[s] -= 1
            if indegree[s] == 0:
                ready.append(s)
    for n in ids:
        if n not in layer:
            layer[n] = max((layer[p] + 1 for p in preds[n] if p in layer), default=0)
    return layer


def _order(rows: list[list[str]], preds: dict[str, list[str]], succs: dict[str, list[str]]) -> None:
    """Barycentre sweeps, down then up, in place."""
    for sweep in range(SWEEPS):
        down = sweep % 2 == 0
        span = range(1, len(rows)) if down else range(len(rows) - 2, -1, -1)
        for i in span:
            near = rows[i - 1] if down else rows[i + 1]
            place = {n: k for k, n in enumerate(near)}
            links = preds if down else succs

            keys = {}
            for k, n in enumerate(rows[i]):
                seen = [place[m] for m in links[n] if m in place]
                keys[n] = sum(seen) / len(seen) if seen else float(k)
            rows[i] = sorted(rows[i], key=keys.__getitem__)


def layout(nodes: Sequence[DagNode], edges: Sequence[DagEdge]) -> Drawing:
    ids = list(dict.fromkeys(n.id for n in nodes))
    by_id = {n.id: n for n in nodes}
    kept = [e for e in edges if e.source in by_id and e.target in by_id and e.source != e.target]
    preds: dict[str, list[str]] = {n: [] for n in ids}
    succs: dict[str, list[str]] = {n: [] for n in ids}
    for e in kept:
        preds[e.target].append(e.source)
        succs[e.source].append(e.target)
    layer = _layers(ids, preds, succs)
    rows: list[list[str]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for n in ids:
        rows[layer[n]].append(n)
    _order(rows, preds, succs)
    widest = max((len(r) for r in rows), default=0)
    width = 2 * MARGIN + max(widest * (NODE_W + GAP_X) - GAP_X, NODE_W)
    height = 2 * MARGIN + max(len(rows) * (NODE_H + GAP_Y) - GAP_Y, NODE_H)
    where: dict[str, tuple[float, float]] = {}
    placed = []
    for i, row in enumerate(rows):
        row_width = len(row) * (NODE_W + GAP_X) - GAP_X
        left = (width - row_width) / 2
        for k, n in enumerate(row):
            x, y = left + k * (NODE_W + GAP_X), MARGIN + i * (NODE_H + GAP_Y)
            where[n] = (x, y)
            node = by_id[n]
            placed.append(PlacedNode(node, x, y, _cut(node.label), _cut(node.detail)))
    drawn = []
    for e in kept:
        (x1, y1), (x2, y2) = where[e.source], where[e.target]
        x1, y1 = x1 + NODE_W / 2, y1 + NODE_H
        x2, y2 = x2 + NODE_W / 2, y2
        bend = max(abs(y2 - y1) / 2, GAP_Y / 2)
        path = (
            f"M{x1:.1f},{y1:.1f} "
            f"C{x1:.1f},{y1 + bend:.1f} {x2:.1f},{y2 - bend:.1f} {x2:.1f},{y2:.1f}"
        )
        drawn.append(PlacedEdge(path, e.css, e.label, (x1 + x2) / 2, (y1 + y2) / 2))
    return Drawing(placed, drawn, int(width), int(height))
