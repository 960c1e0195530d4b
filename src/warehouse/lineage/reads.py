"""The catalog facts a lineage walk asks for, each one query per batch of keys.

Also ``collection_kinds``: what each collection is (put, job output, job
log, function, combined, workflow file), for the pages' lists.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa

from warehouse.catalog.db import by_code_point, connect
from warehouse.catalog.schema import (
    collection_parts,
    collections,
    jobs,
    names,
    workflow_nodes,
    workflow_runs,
)
from warehouse.jobs.jobrecords import JobRecord
from warehouse.lineage.build import Described
from warehouse.lineage.values import Part, WorkflowPlace

__all__ = ["CatalogFacts", "collection_kinds", "jobs_query", "kind_query"]

T = TypeVar("T")

# Bound parameters per IN list: well under every backend's limit.
_CHUNK = 500


def _chunks(items: Collection[T]) -> Iterator[list[T]]:
    listed = list(dict.fromkeys(items))
    for i in range(0, len(listed), _CHUNK):
        yield listed[i : i + _CHUNK]


# The columns a collection summary needs (not the file digests, megabytes a row).
_SUMMARY = (
    collections.c.pdh,
    collections.c.size,
    collections.c.file_count,
    collections.c.created_at,
    collections.c.created_by,
)


def collection_kinds(engine: sa.Engine, pdhs: Collection[str]) -> dict[str, tuple[str, ...]]:
    """For each collection, what the catalog says it is; "put" when nothing made it."""
    with connect(engine) as conn:
        return _kinds(conn, pdhs)


def _kinds(conn: sa.Connection, pdhs: Collection[str]) -> dict[str, tuple[str, ...]]:
    found: dict[str, set[str]] = {p: set() for p in pdhs}
    done = jobs.c.state == "complete"
    lookups: list[tuple[str, Any, list[Any]]] = [
        ("job output", jobs.c.output_pdh, [done]),
        ("job log", jobs.c.log_pdh, []),
        ("function", jobs.c.function_pdh, []),
        ("combined", collection_parts.c.pdh, []),
        ("workflow file", workflow_runs.c.file_pdh, []),
    ]
    for chunk in _chunks(pdhs):
        for kind, column, where in lookups:
            for (pdh,) in conn.execute(kind_query(column, chunk, *where)):
                found[pdh].add(kind)
        _put_before(conn, chunk, found)
    order = ("put", "job output", "job log", "function", "combined", "workflow file")
    return {p: tuple(k for k in order if k in ks) if ks else ("put",) for p, ks in found.items()}


def kind_query(column: sa.Column[Any], pdhs: Sequence[str], *where: Any) -> sa.Select[Any]:
    """The PDHs among ``pdhs`` found in ``column`` (one lookup of a collection's kinds)."""
    return sa.select(column).where(column.in_(pdhs), *where).distinct()


def jobs_query(column: sa.Column[Any], pdhs: Sequence[str], *where: Any) -> sa.Select[Any]:
    """The jobs (not reuses) with one of ``pdhs`` in ``column``: one step of a lineage walk."""
    return sa.select(jobs).where(column.in_(pdhs), jobs.c.reused_from.is_(None), *where)


def _put_before(conn: sa.Connection, chunk: list[str], found: dict[str, set[str]]) -> None:
    """A job output the catalog recorded before any job making it started was stored
    first by someone else (``builtin:copy`` of a put makes the put again): a put too.
    Not a combined collection: its combining recorded it, and its parts are the puts."""
    outputs = [p for p in chunk if "job output" in found[p] and "combined" not in found[p]]
    if not outputs:
        return
    first = (
        sa.select(jobs.c.output_pdh, sa.func.min(jobs.c.started_at).label("started"))
        .where(jobs.c.output_pdh.in_(outputs), jobs.c.state == "complete")
        .where(jobs.c.started_at.is_not(None))
        .group_by(jobs.c.output_pdh)
        .subquery()
    )
    query = sa.select(collections.c.pdh).join(first, first.c.output_pdh == collections.c.pdh)
    for (pdh,) in conn.execute(query.where(collections.c.created_at < first.c.started)):
        found[pdh].add("put")


class CatalogFacts:
    """``build.Facts`` over a catalog."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def _jobs(self, column: sa.Column[Any], pdhs: Collection[str], *where: Any) -> list[JobRecord]:
        out: list[JobRecord] = []
        with connect(self.engine) as conn:
            for chunk in _chunks(pdhs):
                query = jobs_query(column, chunk, *where)
                out.extend(JobRecord(**r._mapping) for r in conn.execute(query))
        return out

    def exists(self, pdh: str) -> bool:
        with connect(self.engine) as conn:
            query = sa.select(collections.c.pdh).where(collections.c.pdh == pdh)
            return conn.execute(query).first() is not None

    def jobs_making(self, pdhs: Collection[str]) -> list[JobRecord]:
        return self._jobs(jobs.c.output_pdh, pdhs, jobs.c.state == "complete")

    def jobs_reading(self, pdhs: Collection[str]) -> list[JobRecord]:
        return self._jobs(jobs.c.input_pdh, pdhs)

    def parts_of(self, pdhs: Collection[str]) -> Mapping[str, Sequence[Part]]:
        cp = collection_parts.c
        out: dict[str, list[Part]] = {}
        with connect(self.engine) as conn:
            for chunk in _chunks(pdhs):
                query = sa.select(cp.pdh, cp.dir, cp.part_pdh).where(cp.pdh.in_(chunk))
                for pdh, dir, part in conn.execute(query.order_by(cp.pdh, cp.position)):
                    out.setdefault(pdh, []).append(Part(dir, part))
        return out

    def combined_containing(self, pdhs: Collection[str]) -> list[tuple[str, Part]]:
        cp = collection_parts.c
        out: list[tuple[str, Part]] = []
        with connect(self.engine) as conn:
            for chunk in _chunks(pdhs):
                query = sa.select(cp.pdh, cp.dir, cp.part_pdh).where(cp.part_pdh.in_(chunk))
                rows = conn.execute(query.order_by(cp.pdh, cp.position))
                out.extend((pdh, Part(dir, part)) for pdh, dir, part in rows)
        return out

    def describe(self, pdhs: Collection[str]) -> Mapping[str, Described]:
        rows: dict[str, tuple[int, int, float, str]] = {}
        named: dict[str, list[str]] = {}
        with connect(self.engine) as conn:
            kinds = _kinds(conn, pdhs)
            for chunk in _chunks(pdhs):
                for r in conn.execute(sa.select(*_SUMMARY).where(collections.c.pdh.in_(chunk))):
                    rows[r.pdh] = (r.size, r.file_count, r.created_at, r.created_by)
                query = (
                    sa.select(names.c.pdh, names.c.name)
                    .where(names.c.pdh.in_(chunk))
                    .order_by(by_code_point(self.engine, names.c.name))
                )
                for pdh, name in conn.execute(query):
                    named.setdefault(pdh, []).append(name)
        out: dict[str, Described] = {}
        for p in pdhs:
            size, files, at, by = rows.get(p, (None, None, None, None))
            out[p] = Described(kinds[p], size, files, at, by, tuple(named.get(p, ())))
        return out

    def workflow_places(self, job_ids: Collection[int]) -> Mapping[int, Sequence[WorkflowPlace]]:
        wn = workflow_nodes.c
        out: dict[int, list[WorkflowPlace]] = {}
        with connect(self.engine) as conn:
            for chunk in _chunks(job_ids):
                query = (
                    sa.select(wn.job_id, wn.run_id, wn.node, workflow_runs.c.file_pdh)
                    .join(workflow_runs, workflow_runs.c.id == wn.run_id)
                    .where(wn.job_id.in_(chunk))
                )
                for job_id, run, node, file in conn.execute(query.order_by(wn.run_id, wn.node)):
                    out.setdefault(job_id, []).append(WorkflowPlace(run, node, file))
        return out
