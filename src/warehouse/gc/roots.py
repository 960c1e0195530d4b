"""GC roots from the catalog (DESIGN §6): what must be kept.

- every PDH a name points to now, and every PDH a name held within the
  history retention (both sides of each recent change);
- collections recorded within the signature TTL (their blocks may be about
  to be named);
- the function, input, output and log of every job that is unfinished or
  finished within the job retention, and the manifest fragments its steps
  recorded (blocks a running job has written but not yet assembled);
- the file, inputs, combined collections (and their parts) and outputs of
  every workflow run unfinished or finished within the job retention;
- but never a collection GC has collected (``collected``) unless a name
  points at it now.

The job tables belong to another part of the system and may be absent
(an old catalog) or gain columns; ``job_roots`` reads whichever of the
known columns exist and returns nothing when the tables do not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa

from warehouse.catalog.db import connect
from warehouse.catalog.schema import collected, collections, name_history, names

__all__ = ["Roots", "find_roots", "job_roots", "workflow_roots"]

_JOB_PDHS = ("function_pdh", "input_pdh", "output_pdh", "log_pdh")
_STEP_TEXTS = ("output", "intermediate", "log")
_FINISHED = ("complete", "failed", "cancelled")


@dataclass
class Roots:
    pdhs: set[str] = field(default_factory=set)
    # Manifest text (fragments) naming blocks directly, not through a collection.
    fragments: list[bytes] = field(default_factory=list)
    collections: int = 0  # rows in the catalog (0 aborts a run)


def find_roots(engine: sa.Engine, now: float, history: float, jobs: float, ttl: float) -> Roots:
    roots = Roots()
    named: set[str] = set()
    with connect(engine) as conn:
        roots.collections = conn.execute(sa.select(sa.func.count()).select_from(collections)).one()[
            0
        ]
        named.update(conn.execute(sa.select(names.c.pdh)).scalars())
        roots.pdhs |= named
        recent = conn.execute(
            sa.select(name_history.c.old_pdh, name_history.c.new_pdh).where(
                name_history.c.at >= now - history
            )
        )
        for old, new in recent:
            roots.pdhs.update(p for p in (old, new) if p)
        roots.pdhs.update(
            conn.execute(
                sa.select(collections.c.pdh).where(collections.c.created_at >= now - ttl)
            ).scalars()
        )
        gone = set(conn.execute(sa.select(collected.c.pdh)).scalars())
    pdhs, fragments = job_roots(engine, now - jobs)
    roots.pdhs |= pdhs
    roots.pdhs |= workflow_roots(engine, now - jobs)
    roots.pdhs -= gone - named
    roots.fragments = fragments
    return roots


def job_roots(engine: sa.Engine, since: float) -> tuple[set[str], list[bytes]]:
    """PDHs and step fragments of jobs unfinished or finished at/after ``since``."""
    meta = sa.MetaData()
    with connect(engine) as conn:
        present = set(sa.inspect(conn).get_table_names())
        if "jobs" not in present:
            return set(), []
        jobs = sa.Table("jobs", meta, autoload_with=conn)
        cols = [jobs.c[c] for c in _JOB_PDHS if c in jobs.c]
        if "id" not in jobs.c or not cols:
            return set(), []
        keep: sa.ColumnElement[bool] = sa.true()
        if "state" in jobs.c:
            keep = jobs.c.state.not_in(_FINISHED)
            for when in ("finished_at", "created_at"):
                if when in jobs.c:
                    keep = sa.or_(keep, jobs.c[when] >= since)
                    break
        rows = conn.execute(sa.select(jobs.c.id, *cols).where(keep)).all()
        pdhs = {p for row in rows for p in row[1:] if p}
        ids = [row[0] for row in rows]
        fragments: list[bytes] = []
        if "steps" in present and ids:
            steps = sa.Table("steps", meta, autoload_with=conn)
            texts = [steps.c[c] for c in _STEP_TEXTS if c in steps.c]
            if texts and "job" in steps.c:
                for i in range(0, len(ids), 500):
                    q = sa.select(*texts).where(steps.c.job.in_(ids[i : i + 500]))
                    for row in conn.execute(q):
                        fragments.extend(t.encode() for t in row if t)
    return pdhs, fragments


def workflow_roots(engine: sa.Engine, since: float) -> set[str]:
    """File, input, node and output PDHs of workflow runs unfinished or finished at/after
    ``since``, with the parts of every combined collection among them."""
    import json

    from warehouse.keys import is_pdh

    meta = sa.MetaData()
    with connect(engine) as conn:
        present = set(sa.inspect(conn).get_table_names())
        if "workflow_runs" not in present:
            return set()
        runs = sa.Table("workflow_runs", meta, autoload_with=conn)
        keep = sa.or_(runs.c.state.not_in(_FINISHED), runs.c.finished_at >= since)
        # A CWL run's output object (migration 0021): what answers the same run again.
        kept = runs.c.output_object if "output_object" in runs.c else sa.null()
        # ...and the collection of the files it names (migration 0023).
        files = runs.c.output_files if "output_files" in runs.c else sa.null()
        query = sa.select(runs.c.id, runs.c.file_pdh, runs.c.inputs, runs.c.outputs, kept, files)
        pdhs: set[str] = set()
        ids = []
        for run_id, file_pdh, inputs, outputs, *made in conn.execute(query.where(keep)):
            ids.append(run_id)
            pdhs.add(file_pdh)
            pdhs.update(p for p in made if p)
            for text in (inputs, outputs):
                values = json.loads(text) if text else {}
                pdhs.update(v for v in values.values() if isinstance(v, str) and is_pdh(v))
        if "workflow_nodes" in present and ids:
            nodes = sa.Table("workflow_nodes", meta, autoload_with=conn)
            for i in range(0, len(ids), 500):
                q = sa.select(nodes.c.input_pdh, nodes.c.output_pdh).where(
                    nodes.c.run_id.in_(ids[i : i + 500])
                )
                for row in conn.execute(q):
                    pdhs.update(p for p in row if p)
        if "collection_parts" in present and pdhs:
            parts = sa.Table("collection_parts", meta, autoload_with=conn)
            listed = sorted(pdhs)
            for i in range(0, len(listed), 500):
                q = sa.select(parts.c.part_pdh).where(parts.c.pdh.in_(listed[i : i + 500]))
                pdhs.update(conn.execute(q).scalars())
    return pdhs
