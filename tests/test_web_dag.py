"""The server-side graph layout (pure): layers, order, cycles, sizes."""

from __future__ import annotations

from warehouse.web.dag import GAP_Y, LABEL_CHARS, NODE_H, DagEdge, DagNode, layout


def node(name: str, label: str | None = None) -> DagNode:
    return DagNode(name, label or name, "detail", "job", f"/web/jobs/{name}", name)


def rows(drawing: object) -> dict[str, int]:
    """Each node's layer, from its y."""
    return {p.node.id: round((p.y - 12) / (NODE_H + GAP_Y)) for p in drawing.nodes}  # type: ignore[attr-defined]


def test_a_diamond_and_a_long_edge_take_the_longest_path() -> None:
    edges = [DagEdge(*e) for e in ["AB", "AC", "BD", "CD", "AD"]]
    d = layout([node(n) for n in "DCBA"], edges)  # any order in
    assert rows(d) == {"A": 0, "B": 1, "C": 1, "D": 2}
    assert len(d.edges) == 5 and all(e.path.startswith("M") for e in d.edges)
    x = {p.node.id: p.x for p in d.nodes}
    assert x["B"] != x["C"] and d.width >= 2 * 176


def test_sweeps_untangle_crossed_pairs() -> None:
    # a1 → b2 and a2 → b1 given crossed: the sweep puts each b under its a.
    nodes = [node(n) for n in ("a1", "a2", "b1", "b2")]
    d = layout(nodes, [DagEdge("a1", "b2"), DagEdge("a2", "b1")])
    x = {p.node.id: p.x for p in d.nodes}
    assert (x["a1"] < x["a2"]) == (x["b2"] < x["b1"])


def test_cycles_self_loops_and_unknown_ends_do_not_stop_it() -> None:
    edges = [DagEdge("x", "j"), DagEdge("j", "x"), DagEdge("j", "j"), DagEdge("j", "nowhere")]
    d = layout([node("x"), node("j")], edges)
    assert rows(d) == {"x": 0, "j": 1}
    assert len(d.edges) == 2


def test_long_labels_are_cut_and_an_empty_graph_draws_nothing() -> None:
    d = layout([node("n", "x" * 100)], [])
    assert len(d.nodes[0].label) == LABEL_CHARS and d.nodes[0].label.endswith("…")
    assert d.nodes[0].node.label == "x" * 100  # the whole text stays for the title
    empty = layout([], [])
    assert empty.nodes == [] and empty.edges == [] and empty.width > 0


def test_a_wide_fan_out_is_one_layer_as_wide_as_its_nodes() -> None:
    nodes = [node("root")] + [node(f"n{i}") for i in range(200)]
    d = layout(nodes, [DagEdge("root", f"n{i}") for i in range(200)])
    assert set(rows(d).values()) == {0, 1}
    assert d.width >= 200 * 176
