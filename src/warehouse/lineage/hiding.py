"""A lineage graph with what its reader may not read shown as "hidden"
(docs/permissions.md). Pure: the controller says what is readable."""

from __future__ import annotations

import dataclasses
from collections.abc import Set

from warehouse.lineage.values import Edge, Lineage, LineageCollection, LineageJob

__all__ = ["HIDDEN", "function_pdhs", "hide"]

HIDDEN = "hidden"


def hide(graph: Lineage, pdhs: Set[str], jobs: Set[int], functions: Set[str]) -> Lineage:
    """``graph`` with every collection not in ``pdhs`` and every job not in
    ``jobs`` stripped to a bare node: a collection's PDH becomes ``hidden-N``
    (N counts hidden collections in the graph's order, so edges still join
    the same nodes), a job keeps its id and state and says nothing else.
    The graph's shape stays: a reader sees that something it may not read
    lies between, not what. A job shown whose function's collection is not
    in ``functions`` shows that collection as ``hidden`` (a job shared is
    not its function shared); a built-in's is public code."""
    alias: dict[str, str] = {}
    for c in graph.collections:
        if c.pdh not in pdhs:
            alias[c.pdh] = f"{HIDDEN}-{len(alias) + 1}"
    if not alias and all(j.id in jobs and _readable(j, functions) for j in graph.jobs):
        return graph

    def pdh(p: str | None) -> str | None:
        return None if p is None else alias.get(p, p)

    def node(n: str) -> str:
        kind, _, rest = n.partition(":")
        return f"{kind}:{alias.get(rest, rest)}" if kind == "collection" else n

    collections = tuple(_collection(c, alias) for c in graph.collections)
    shown_jobs = tuple(
        _job(j) if j.id not in jobs else j if _readable(j, functions) else _function_hidden(j)
        for j in graph.jobs
    )
    shown_jobs = tuple(
        dataclasses.replace(j, input=pdh(j.input) or "", output=pdh(j.output), log=pdh(j.log))
        for j in shown_jobs
    )
    edges = tuple(Edge(node(e.source), node(e.target), e.role, e.dir) for e in graph.edges)
    return Lineage(
        graph.key if graph.pdh not in alias else HIDDEN,
        pdh(graph.pdh) or "",
        graph.direction,
        graph.depth,
        collections,
        shown_jobs,
        edges,
    )


def _collection(c: LineageCollection, alias: dict[str, str]) -> LineageCollection:
    parts = tuple(dataclasses.replace(p, pdh=alias.get(p.pdh, p.pdh)) for p in c.parts)
    if c.pdh not in alias:
        return dataclasses.replace(c, parts=parts)
    return LineageCollection(alias[c.pdh], (), None, None, None, None, (), c.made_by, (), c.more)


def function_pdhs(graph: Lineage) -> list[str]:
    """The function collections of ``graph``'s jobs that are not built-ins'."""
    return [j.function_pdh for j in graph.jobs if not j.function.startswith("builtin:")]


def _readable(j: LineageJob, functions: Set[str]) -> bool:
    return j.function.startswith("builtin:") or j.function_pdh in functions


def _function_hidden(j: LineageJob) -> LineageJob:
    return dataclasses.replace(
        j, function=j.function.replace(j.function_pdh, HIDDEN), function_pdh=HIDDEN
    )


def _job(j: LineageJob) -> LineageJob:
    return dataclasses.replace(
        j,
        function=HIDDEN,
        function_pdh=HIDDEN,
        function_path="",
        function_commit=None,
        params="{}",
        executor="",
        submitted_by=HIDDEN,
        cpu_seconds=0.0,
        workflows=(),
    )
