"""The lineage lookups use the indexes of migration 0009 (EXPLAIN on each backend)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from jobs_helpers import job_row
from warehouse.catalog.schema import collection_parts, jobs, workflow_runs
from warehouse.lineage.reads import jobs_query, kind_query

PDHS = [f"{i:032x}+{n}" for i in range(3) for n in (1, 2, 3, 7)]


def _fill(engine: sa.Engine, n: int = 2000) -> None:
    """A catalog's worth of complete jobs (an empty table is cheapest to scan), analyzed."""
    rows = [
        job_row(
            function="f",
            function_pdh=f"{i % 500:032x}+7",
            function_path="f",
            input_pdh=f"{i:032x}+1",
            created_at=0.0,
            output_pdh=f"{i:032x}+2",
            log_pdh=f"{i:032x}+3",
            reuse_key=f"{i:064x}",
            steps_done=1,
            steps_running=0,
            steps_queued=0,
            failed_attempts=0,
            cpu_seconds=0.0,
        )
        for i in range(n)
    ]
    with engine.begin() as conn:
        conn.execute(jobs.insert(), rows)
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")
        else:
            conn.exec_driver_sql("ANALYZE")
            conn.commit()


def _plan(engine: sa.Engine, query: Any) -> str:
    sql = str(query.compile(engine, compile_kwargs={"literal_binds": True}))
    explain = "EXPLAIN" if engine.dialect.name == "postgresql" else "EXPLAIN QUERY PLAN"
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            # The run and part tables are left empty: ask whether an index can serve.
            conn.exec_driver_sql("SET enable_seqscan = off")
        rows = conn.exec_driver_sql(f"{explain} {sql}").all()
    return "\n".join(" ".join(str(c) for c in r) for r in rows)


LOOKUPS = {
    "ix_jobs_input_pdh": jobs_query(jobs.c.input_pdh, PDHS),
    "ix_jobs_output_pdh_state": jobs_query(jobs.c.output_pdh, PDHS, jobs.c.state == "complete"),
    "ix_jobs_log_pdh": kind_query(jobs.c.log_pdh, PDHS),
    "ix_jobs_function_pdh": kind_query(jobs.c.function_pdh, PDHS),
    "ix_workflow_runs_file_pdh": kind_query(workflow_runs.c.file_pdh, PDHS),
    "ix_collection_parts_part_pdh": kind_query(collection_parts.c.part_pdh, PDHS),
}


def test_each_lineage_lookup_uses_its_index(catalog_engine: sa.Engine) -> None:
    _fill(catalog_engine)
    for index, query in LOOKUPS.items():
        plan = _plan(catalog_engine, query)
        assert index in plan, plan
