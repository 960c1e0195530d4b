"""Building a lineage graph (DESIGN §5.7): a breadth-first walk over what the
catalog says made what, one query per kind of fact and layer.

The walk is pure: it asks a ``Facts`` reader (``reads.CatalogFacts`` over a
real catalog) and decides what belongs in the graph.

- Up: a collection was made by the complete jobs that output it and, if it
  is combined, from its parts; each job read its input, and the file of each
  workflow run it ran for. The walk stops at collections nothing made: the
  puts.
- Down: a collection was read by the jobs whose input it is, and is a part
  of the combined collections that hold it; each job made its output.

A job counted once: of the jobs with one reuse key (the same function
version, input and parameters), the graph keeps the first complete one that
really ran (answers from reuse are the same job, not another maker).
``depth`` counts making links followed: a job, or a combining.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from warehouse.errors import NotFoundError
from warehouse.jobs.jobrecords import JobRecord
from warehouse.keys import is_pdh
from warehouse.lineage.values import (
    Edge,
    Lineage,
    LineageCollection,
    LineageJob,
    Part,
    WorkflowPlace,
    collection_node,
    job_node,
)

__all__ = ["MAX_JOBS", "Described", "Facts", "build"]

# A walk down from a collection every analysis reads could reach most of the
# catalog: past this many jobs it stops, and the edge of the graph says so.
MAX_JOBS = 5000


@dataclass(frozen=True, slots=True)
class Described:
    """What the catalog records of one collection."""

    kinds: tuple[str, ...]
    size: int | None
    file_count: int | None
    recorded_at: float | None
    recorded_by: str | None
    names: tuple[str, ...]


class Facts(Protocol):
    def exists(self, pdh: str) -> bool: ...

    def jobs_making(self, pdhs: Collection[str]) -> list[JobRecord]:
        """Complete jobs that really ran (not reused) with one of these outputs."""

    def jobs_reading(self, pdhs: Collection[str]) -> list[JobRecord]:
        """Jobs that really ran or will (not reused) with one of these inputs."""

    def parts_of(self, pdhs: Collection[str]) -> Mapping[str, Sequence[Part]]: ...

    def combined_containing(self, pdhs: Collection[str]) -> list[tuple[str, Part]]:
        """(combined PDH, the part) for each combined collection holding one of these."""

    def describe(self, pdhs: Collection[str]) -> Mapping[str, Described]: ...

    def workflow_places(
        self, job_ids: Collection[int]
    ) -> Mapping[int, Sequence[WorkflowPlace]]: ...


def _first_of_each_job(
    found: Iterable[JobRecord], chosen: set[tuple[str, str | None]]
) -> list[JobRecord]:
    """The jobs not yet ``chosen``, one per reuse key and output.

    Of jobs with one reuse key, the oldest complete one for each output they
    made (one, unless the function is not deterministic) stands for them;
    with none complete, the oldest, unless one of the key is in already.
    ``chosen`` holds (reuse key, output) and (reuse key, None) of those taken.
    """
    groups: dict[str, list[JobRecord]] = {}
    for job in sorted(found, key=lambda j: j.id):
        groups.setdefault(job.reuse_key, []).append(job)
    new: list[JobRecord] = []
    for key, group in groups.items():
        complete = [j for j in group if j.state == "complete"]
        if not complete and (key, None) in chosen:
            continue
        for job in complete or group[:1]:
            ident = (key, job.output_pdh if complete else None)
            if ident not in chosen:
                chosen.update({ident, (key, None)})
                new.append(job)
    return sorted(new, key=lambda j: j.id)


class _Walk:
    def __init__(self, facts: Facts, pdh: str, max_jobs: int = MAX_JOBS) -> None:
        self.facts = facts
        self.max_jobs = max_jobs
        self.pdhs: dict[str, None] = {pdh: None}  # in the order found
        self.jobs: dict[int, JobRecord] = {}
        self.chosen: set[tuple[str, str | None]] = set()
        self.edges: dict[Edge, None] = {}
        self.more: set[str] = set()

    def collection(self, pdh: str, found: list[str]) -> None:
        if pdh not in self.pdhs:
            self.pdhs[pdh] = None
            found.append(pdh)

    def edge(self, source: str, target: str, role: str, dir: str | None = None) -> None:
        self.edges[Edge(source, target, role, dir)] = None

    def within_bound(self, jobs: list[JobRecord], down: bool) -> list[JobRecord]:
        """As many of ``jobs`` as the bound leaves room for: one layer can be
        wider than the bound itself (a collection every analysis reads); the
        collections whose jobs are left out say there is more."""
        room = max(self.max_jobs - len(self.jobs), 0)
        for job in jobs[room:]:
            self.more.add(job.input_pdh if down else (job.output_pdh or ""))
        return jobs[:room]

    def up(self, frontier: list[str]) -> list[str]:
        found: list[str] = []
        makers = _first_of_each_job(self.facts.jobs_making(frontier), self.chosen)
        for job in self.within_bound(makers, down=False):
            self.jobs[job.id] = job
            assert job.output_pdh is not None
            self.edge(collection_node(job.input_pdh), job_node(job.id), "input")
            self.edge(job_node(job.id), collection_node(job.output_pdh), "output")
            self.collection(job.input_pdh, found)
            code = _code_of(job)
            if code is not None:  # read by the job as surely as its input
                self.edge(collection_node(code), job_node(job.id), "code")
                self.collection(code, found)
        parts = self.facts.parts_of(frontier)
        for pdh in frontier:
            for part in parts.get(pdh, ()):
                self.edge(collection_node(part.pdh), collection_node(pdh), "part", part.dir)
                self.collection(part.pdh, found)
        return found

    def down(self, frontier: list[str]) -> list[str]:
        found: list[str] = []
        readers = _first_of_each_job(self.facts.jobs_reading(frontier), self.chosen)
        for job in self.within_bound(readers, down=True):
            self.jobs[job.id] = job
            self.edge(collection_node(job.input_pdh), job_node(job.id), "input")
            if job.output_pdh is not None:
                self.edge(job_node(job.id), collection_node(job.output_pdh), "output")
                self.collection(job.output_pdh, found)
        for combined, part in self.facts.combined_containing(frontier):
            self.edge(collection_node(part.pdh), collection_node(combined), "part", part.dir)
            self.collection(combined, found)
        return found

    def unfollowed(self, frontier: list[str], down: bool) -> set[str]:
        """Those of ``frontier`` with makers (up) or readers (down) left out."""
        if down:
            readers = {j.input_pdh for j in self.facts.jobs_reading(frontier)}
            holders = {part.pdh for _, part in self.facts.combined_containing(frontier)}
            return readers | holders
        makers = {j.output_pdh for j in self.facts.jobs_making(frontier)}
        combined = {pdh for pdh, parts in self.facts.parts_of(frontier).items() if parts}
        return {p for p in makers | combined if p is not None}


def _code_of(job: JobRecord) -> str | None:
    """The collection a job's ``code`` parameter pinned (e.g. a MapReduce's mapper)."""
    try:
        code = json.loads(job.params).get("code")
    except (ValueError, AttributeError):
        return None
    return code if isinstance(code, str) and is_pdh(code) else None


def build(
    facts: Facts,
    key: str,
    pdh: str,
    *,
    down: bool = False,
    depth: int | None = None,
    max_jobs: int = MAX_JOBS,
) -> Lineage:
    """The lineage of collection ``pdh`` (asked for as ``key``)."""
    if not facts.exists(pdh):
        raise NotFoundError(f"no collection {pdh}")
    walk = _Walk(facts, pdh, max_jobs)
    frontier = [pdh]
    hops = 0
    while frontier:
        if (depth is not None and hops >= depth) or len(walk.jobs) >= max_jobs:
            walk.more |= walk.unfollowed(frontier, down)
            break
        frontier = walk.down(frontier) if down else walk.up(frontier)
        hops += 1
    return _assemble(walk, key, pdh, down, depth)


def _assemble(walk: _Walk, key: str, pdh: str, down: bool, depth: int | None) -> Lineage:
    facts = walk.facts
    places = facts.workflow_places(list(walk.jobs))
    if not down:  # what the jobs ran for: a workflow file is a put, nothing above it
        for job_id, where in sorted(places.items()):
            for w in where:
                if w.file is not None:
                    walk.collection(w.file, [])
                    walk.edge(collection_node(w.file), job_node(job_id), "workflow file")
    described = facts.describe(list(walk.pdhs))
    made_by: dict[str, list[int]] = {}
    for e in walk.edges:
        if e.role == "output":
            made_by.setdefault(e.target.partition(":")[2], []).append(int(e.source.split(":")[1]))
    # Every part of a combined collection, also those a walk down did not come through.
    combined = [p for p in walk.pdhs if p in described and "combined" in described[p].kinds]
    parts = facts.parts_of(combined) if combined else {}
    collections = []
    for p in walk.pdhs:
        d = described.get(p) or Described(("put",), None, None, None, None, ())
        collections.append(
            LineageCollection(
                p,
                d.kinds,
                d.size,
                d.file_count,
                d.recorded_at,
                d.recorded_by,
                d.names,
                tuple(sorted(made_by.get(p, ()))),
                tuple(parts.get(p, ())),
                p in walk.more,
            )
        )
    jobs = tuple(_job(j, places.get(j.id, ())) for _, j in sorted(walk.jobs.items()))
    return Lineage(
        key, pdh, "down" if down else "up", depth, tuple(collections), jobs, tuple(walk.edges)
    )


def _job(r: JobRecord, places: Sequence[WorkflowPlace]) -> LineageJob:
    return LineageJob(
        r.id,
        r.state,
        r.function,
        r.function_pdh,
        r.function_path,
        r.function_commit,
        r.input_pdh,
        r.output_pdh,
        r.log_pdh,
        r.params,
        r.executor,
        r.submitted_by,
        r.created_at,
        r.started_at,
        r.finished_at,
        r.cpu_seconds,
        r.steps_done,
        tuple(places),
    )
