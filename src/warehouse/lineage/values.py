"""A lineage graph as plain values, and its JSON form (docs/lineage.md).

No database library here: a client of a controller rebuilds the graph from
the API's JSON with ``Lineage.from_dict``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FORMAT",
    "Edge",
    "FunctionUse",
    "Lineage",
    "LineageCollection",
    "LineageJob",
    "Part",
    "WorkflowPlace",
    "collection_node",
    "job_node",
]

FORMAT = 1  # bumped when a key changes meaning or goes away; new keys do not bump it

# What a collection is; one collection may be several of these.
KINDS = ("put", "job output", "job log", "function", "combined", "workflow file")


def collection_node(pdh: str) -> str:
    return f"collection:{pdh}"


def job_node(job_id: int) -> str:
    return f"job:{job_id}"


@dataclass(frozen=True, slots=True)
class Part:
    """One part of a combined collection: ``pdh`` re-rooted under ``./dir``."""

    dir: str
    pdh: str


@dataclass(frozen=True, slots=True)
class WorkflowPlace:
    """A node of a workflow run that this job ran (or answered from reuse)."""

    run: int
    node: str
    file: str | None = None  # the run's workflow file (a collection); not in the JSON of a job


@dataclass(frozen=True, slots=True)
class LineageCollection:
    pdh: str
    kinds: tuple[str, ...]
    size: int | None  # None: not recorded in this catalog
    file_count: int | None
    recorded_at: float | None  # when the catalog first recorded it
    recorded_by: str | None  # who recorded it first: for a put, who stored it
    names: tuple[str, ...]
    made_by: tuple[int, ...]  # jobs that output it (in this graph)
    parts: tuple[Part, ...]  # a combined collection's parts, in order
    more: bool = False  # made by something --depth did not follow

    def as_dict(self) -> dict[str, Any]:
        return {
            "pdh": self.pdh,
            "kinds": list(self.kinds),
            "size": self.size,
            "file_count": self.file_count,
            "recorded_at": self.recorded_at,
            "recorded_by": self.recorded_by,
            "names": list(self.names),
            "made_by": list(self.made_by),
            "parts": [{"dir": p.dir, "pdh": p.pdh} for p in self.parts],
            "more": self.more,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LineageCollection:
        return cls(
            d["pdh"],
            tuple(d["kinds"]),
            d["size"],
            d["file_count"],
            d["recorded_at"],
            d["recorded_by"],
            tuple(d["names"]),
            tuple(d["made_by"]),
            tuple(Part(p["dir"], p["pdh"]) for p in d["parts"]),
            d["more"],
        )


@dataclass(frozen=True, slots=True)
class LineageJob:
    id: int
    state: str
    function: str  # the spec as given
    function_pdh: str
    function_path: str
    function_commit: str | None
    input: str
    output: str | None
    log: str | None
    params: str  # canonical JSON
    executor: str
    submitted_by: str
    created_at: float
    started_at: float | None
    finished_at: float | None
    cpu_seconds: float
    steps_done: int
    workflows: tuple[WorkflowPlace, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "function": {
                "spec": self.function,
                "pdh": self.function_pdh,
                "path": self.function_path,
                "commit": self.function_commit,
            },
            "input": self.input,
            "output": self.output,
            "log": self.log,
            "params": json.loads(self.params),
            "executor": self.executor,
            "submitted_by": self.submitted_by,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "cpu_seconds": self.cpu_seconds,
            "steps_done": self.steps_done,
            "workflows": [{"run": w.run, "node": w.node} for w in self.workflows],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LineageJob:
        f = d["function"]
        return cls(
            d["id"],
            d["state"],
            f["spec"],
            f["pdh"],
            f["path"],
            f["commit"],
            d["input"],
            d["output"],
            d["log"],
            json.dumps(d["params"], sort_keys=True, separators=(",", ":"), ensure_ascii=False),
            d["executor"],
            d["submitted_by"],
            d["created_at"],
            d["started_at"],
            d["finished_at"],
            d["cpu_seconds"],
            d["steps_done"],
            tuple(WorkflowPlace(w["run"], w["node"]) for w in d["workflows"]),
        )


@dataclass(frozen=True, slots=True)
class FunctionUse:
    """A function version and the jobs of the graph that ran it."""

    spec: str
    pdh: str
    path: str
    commit: str | None
    jobs: tuple[int, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "pdh": self.pdh,
            "path": self.path,
            "commit": self.commit,
            "jobs": list(self.jobs),
        }


@dataclass(frozen=True, slots=True)
class Edge:
    """``source`` → ``target`` between node ids (``collection:PDH``, ``job:ID``).

    role: ``input`` (a collection a job read), ``output`` (what a job made),
    ``part`` (a part of a combined collection, with its ``dir``), ``workflow file``
    (the file of the workflow run a job ran for, walking up), ``code`` (the
    collection a job's ``code`` parameter pinned, walking up).
    """

    source: str
    target: str
    role: str
    dir: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"from": self.source, "to": self.target, "role": self.role}
        if self.dir is not None:
            out["dir"] = self.dir
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Edge:
        return cls(d["from"], d["to"], d["role"], d.get("dir"))


@dataclass(frozen=True)
class Lineage:
    """What made a collection (``up``) or what was made from it (``down``)."""

    key: str  # as asked for: a name or a PDH
    pdh: str
    direction: str  # "up" or "down"
    depth: int | None
    collections: tuple[LineageCollection, ...]  # ``pdh`` first, then as found
    jobs: tuple[LineageJob, ...]  # by id
    edges: tuple[Edge, ...]
    _by_pdh: dict[str, LineageCollection] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_pdh", {c.pdh: c for c in self.collections})

    def collection(self, pdh: str) -> LineageCollection:
        return self._by_pdh[pdh]

    @property
    def functions(self) -> tuple[FunctionUse, ...]:
        """Each function version the graph's jobs ran, in order of first use."""
        found: dict[tuple[str, str], list[LineageJob]] = {}
        for job in self.jobs:
            found.setdefault((job.function_pdh, job.function_path), []).append(job)
        return tuple(
            FunctionUse(js[0].function, pdh, path, js[0].function_commit, tuple(j.id for j in js))
            for (pdh, path), js in found.items()
        )

    @property
    def puts(self) -> tuple[LineageCollection, ...]:
        """The raw data: collections of the graph that nothing in the catalog made."""
        return tuple(c for c in self.collections if "put" in c.kinds)

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "key": self.key,
            "pdh": self.pdh,
            "direction": self.direction,
            "depth": self.depth,
            "collections": [c.as_dict() for c in self.collections],
            "jobs": [j.as_dict() for j in self.jobs],
            "functions": [f.as_dict() for f in self.functions],
            "puts": [
                {"pdh": c.pdh, "by": c.recorded_by, "at": c.recorded_at, "names": list(c.names)}
                for c in self.puts
            ],
            "edges": [e.as_dict() for e in self.edges],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Lineage:
        return cls(
            d["key"],
            d["pdh"],
            d["direction"],
            d["depth"],
            tuple(LineageCollection.from_dict(c) for c in d["collections"]),
            tuple(LineageJob.from_dict(j) for j in d["jobs"]),
            tuple(Edge.from_dict(e) for e in d["edges"]),
        )
