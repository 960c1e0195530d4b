"""``wh table create|ls|show`` and ``wh query`` (docs/query.md)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from typing import TYPE_CHECKING, Any

import click

from warehouse import jobs
from warehouse.cli._common import _cell, emit_json, emit_rows, open_warehouse, plural
from warehouse.errors import UsageError, WarehouseError

if TYPE_CHECKING:  # a query answered in the client loads nothing of jobs
    from warehouse.jobs.jobrecords import JobRecord

__all__ = ["query", "table"]


def _run(ctx: click.Context, request: jobs.JobRequest, wait: bool) -> JobRecord:
    from warehouse.cli.jobs import _submit_here, _view, _wait
    from warehouse.jobs.jobsview import RemoteJobs
    from warehouse.jobs.model import FINISHED

    view = _view(ctx)
    if isinstance(view, RemoteJobs):
        record = view.submit(request, executor=None)
        if wait and record.state not in FINISHED:
            record = _wait(view, record.id)
        return record
    return _submit_here(view.wh, request, wait)


def _failed(ctx: click.Context, record: JobRecord) -> WarehouseError:
    from warehouse.cli.jobs import job_failure  # the jobs commands: loaded when used

    return job_failure(ctx, record)


@click.group()
def table() -> None:
    """Tables: partitioned Parquet or CSV collections that `wh query` reads."""


@table.command("create")
@click.argument("name")
@click.option("--from", "source", required=True, metavar="KEY[/PATH]", help="CSV or Parquet files.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["parquet", "csv"]),
    default="parquet",
    show_default=True,
    help="How the table's partitions are stored.",
)
@click.option("--partition-by", metavar="COL", help="Rows go to partition hash(COL) % N.")
@click.option("--partitions", type=int, help="N (default 4 with --partition-by, else 1).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def table_create(
    ctx: click.Context,
    name: str,
    source: str,
    fmt: str,
    partition_by: str | None,
    partitions: int | None,
    as_json: bool,
) -> None:
    """Make table NAME from the CSV or Parquet files of KEY (a job), and name it."""
    from warehouse.catalog.values import check_name
    from warehouse.query.catalog import table_params
    from warehouse.query.tables import source_files

    check_name(name)  # before the job: a bad name changes nothing
    key, _, path = source.partition("/")
    params = table_params(fmt, partition_by, partitions, path)
    wh = open_warehouse(ctx)
    source_files(wh.manifest(key), path)  # none there: said now, not by a failed job
    record = _run(ctx, jobs.JobRequest("builtin:table", key, params), wait=True)
    if record.state != "complete" or record.output_pdh is None:
        raise _failed(ctx, record)
    named = wh.set_name(name, record.output_pdh, expect=_current(wh, name))
    if as_json:
        emit_json({"name": name, "pdh": named.pdh, "job": record.id})
    else:
        click.echo(f"{name} {named.pdh} (job {record.id})")


def _current(wh: Any, name: str) -> str | None:
    from warehouse.errors import NotFoundError

    try:
        return str(wh.get_name(name).pdh)
    except NotFoundError:
        return None


@table.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def table_ls(ctx: click.Context, as_json: bool) -> None:
    """The names that hold tables: format, partitioning, bytes."""
    from warehouse.query.catalog import list_tables

    found = list_tables(open_warehouse(ctx))
    if as_json:
        emit_json([_describe(n, p, m) for n, p, m in found])
        return
    emit_rows(
        ("name", "pdh", "format", "partitions", "partitioned_by", "bytes"),
        [(n, p, m.format, m.partitions, m.partitioned_by, m.size) for n, p, m in found],
        sizes=("bytes",),
    )


def _describe(name: str, pdh: str, m: Any) -> dict[str, Any]:
    return {
        "name": name,
        "pdh": pdh,
        "format": m.format,
        "partitioned_by": m.partitioned_by,
        "partitions": m.partitions,
        "bytes": m.size,
        "columns": [list(c) for c in m.columns],
    }


@table.command("show")
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def table_show(ctx: click.Context, key: str, as_json: bool) -> None:
    """A table's format, partitioning and columns."""
    from warehouse.query.catalog import table_meta

    wh = open_warehouse(ctx)
    pdh = wh.resolve(key)
    desc = _describe(key, pdh, table_meta(wh, pdh))
    if as_json:
        emit_json(desc)
        return
    by = desc["partitioned_by"] or "-"
    click.echo(f"{key} {pdh}")
    click.echo(
        f"format: {desc['format']}, partitions: {desc['partitions']}, "
        f"partitioned by: {by}, bytes: {desc['bytes']}"
    )
    for column, kind in desc["columns"]:
        click.echo(f"  {column}\t{kind}")


def _manifests(wh: Any) -> Any:
    """How the query reads a table's manifest: an embedded warehouse's through
    sqlite3 (no SQLAlchemy for a query answered here: docs/latency.md)."""
    return getattr(wh, "bare_manifest", None)


def _here(wh: Any, plan: Any, tables: Any, how: str) -> tuple[bool, int]:
    """Whether to answer in the client (docs/query.md), and the bytes it reads."""
    from warehouse.query import inclient

    reads = inclient.read_bytes(wh, plan, tables)
    return how == "client" or reads <= inclient.SMALL_BYTES, reads


def _answer_here(wh: Any, plan: Any, tables: Any, as_json: bool, limit: int | None) -> None:
    from warehouse.query.inclient import answer

    columns, rows, total = answer(wh, plan, tables, limit or (10_000 if as_json else 20))
    if as_json:
        emit_json(
            {
                "job": None,
                "pdh": None,
                "columns": columns,
                "rows": [[_plain(v) for v in r] for r in rows],
                "total_rows": total,
            }
        )
        return
    _print_rows(columns, rows, total, "answered in the client, no job")


def _print_rows(columns: list[str], rows: list[Any], total: int, made: str) -> None:
    # One row a line, as every listing: a tab, newline or backslash escaped, NULL as -.
    click.echo("\t".join(map(_cell, columns)))
    for r in rows:
        click.echo("\t".join(_cell(None if v is None else _text(_plain(v))) for v in r))
    counted = plural(total, "row")
    if len(rows) < total:
        counted += f", the first {len(rows)} shown (--limit)"
    click.echo(f"({counted}; {made})", err=True)


def _text(v: Any) -> str:
    return json.dumps(v) if isinstance(v, list | dict) else str(v)


def _plain(v: Any) -> Any:
    """A value as JSON holds it: nested lists, structs and maps too (any
    other type, such as an INTERVAL or a UUID, as its text); a float that
    is not a number as the string ``NaN``, ``Infinity`` or ``-Infinity``
    (JSON has none)."""
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        if math.isnan(v):
            return "NaN"
        return v if math.isfinite(v) else ("Infinity" if v > 0 else "-Infinity")
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, dt.date | dt.datetime | dt.time):
        return v.isoformat()
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    return str(v)


@click.command()
@click.argument("sql")
@click.option("--wait/--no-wait", default=True, show_default=True, help="Wait for the result.")
@click.option("--json", "as_json", is_flag=True, help="Every row (up to --limit) as JSON.")
@click.option("--explain", is_flag=True, help="Print the plan; run nothing.")
@click.option("--name", "name_", metavar="N", help="Name the result table N.")
@click.option(
    "--no-reuse",
    is_flag=True,
    help="Run even if an identical query job completed (always so for a query "
    "calling random(), now() and the like).",
)
@click.option(
    "--plan",
    "how",
    type=click.Choice(["auto", "client", "one-step", "distributed"]),
    default="auto",
    show_default=True,
    help="auto: in the client (no job) when it reads at most 64 MiB, else one "
    "step up to tables of 1 GiB, else distributed; client: here whatever the size.",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 100_000),
    help="Rows printed (default 20; --json: 10000).",
)
@click.pass_context
def query(
    ctx: click.Context,
    sql: str,
    wait: bool,
    as_json: bool,
    explain: bool,
    name_: str | None,
    no_reuse: bool,
    how: str,
    limit: int | None,
) -> None:
    """Run SQL over tables (names resolve through the catalog), here or as a job.

    A query that reads at most 64 MiB (the column chunks it needs) is
    answered here, in the client, and nothing is recorded (no job, no
    result; --name, --no-wait or --plan one-step make it a job). Over tables
    of up to 1 GiB a job queries them in one step. Otherwise (or with --plan
    distributed) scans, filters and partial aggregates run per partition;
    co-partitioned joins partition by partition, a small side broadcast,
    otherwise shuffled by the key; a final step merges. A job's result is a
    table collection; the rows printed are followed, on standard error, by
    their count, the job and the result's PDH.
    """
    from warehouse.catalog.values import check_name
    from warehouse.query.catalog import compile_plan, find_tables, query_input, read_rows
    from warehouse.query.planner import explain as explain_plan

    if name_ is not None:
        check_name(name_)  # before the job: a bad name changes nothing
        if explain or not wait:  # the name would silently never be set
            raise UsageError("query: --name needs the result: not with --explain or --no-wait")
    if how == "client" and (name_ is not None or not wait):
        raise UsageError("query: --plan client keeps no result: not with --name or --no-wait")
    wh = open_warehouse(ctx)
    tables = find_tables(wh, sql, _manifests(wh))
    here, reads = False, 0
    if how == "client" or (how == "auto" and wait and name_ is None):
        # Bound as it is answered, if it is (one DuckDB database, not two).
        plan, params = compile_plan(sql, tables, "one-step", bind=explain)
        here, reads = _here(wh, plan, tables, how)
    if not here:
        plan, params = compile_plan(sql, tables, how)
    if explain:
        if as_json:
            emit_json(plan)
        else:
            if here:
                click.echo(f"in the client, no job: it reads and checks {reads} bytes")
            click.echo(explain_plan(plan), nl=False)
        return
    if here:
        _answer_here(wh, plan, tables, as_json, limit)
        return
    from warehouse.query.parsing import parse, volatile

    input_pdh = query_input(wh, tables)
    # An earlier answer of random() or now() is not this run's answer.
    reuse = not no_reuse and volatile(parse(sql)) is None
    request = jobs.JobRequest("builtin:query", input_pdh, params, reuse=reuse)
    record = _run(ctx, request, wait=wait)
    if not wait:
        click.echo(f"job {record.id} {record.state}")
        return
    if record.state != "complete" or record.output_pdh is None:
        raise _failed(ctx, record)
    if name_:
        wh.set_name(name_, record.output_pdh, expect=_current(wh, name_))
    if as_json:
        columns, rows, total = read_rows(wh, record.output_pdh, limit or 10_000)
        emit_json(
            {
                "job": record.id,
                "pdh": record.output_pdh,
                "columns": columns,
                "rows": [[_plain(v) for v in r] for r in rows],
                "total_rows": total,
            }
        )
        return
    columns, rows, total = read_rows(wh, record.output_pdh, limit or 20)
    _print_rows(columns, rows, total, f"job {record.id}, result {record.output_pdh}")
