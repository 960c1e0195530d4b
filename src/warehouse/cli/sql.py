"""``wh sql``: read-only SQL over the catalog (docs/sql.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from warehouse.catalogsql import MAX_ROWS, SqlResult, Value, check_query, run_readonly
from warehouse.cli._common import emit_json, open_warehouse, print_whole
from warehouse.errors import NotFoundError

__all__ = ["sql"]


@click.command()
@click.argument("query")
@click.option("--json", "as_json", is_flag=True, help="Print {columns, rows, truncated}.")
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_ROWS),
    default=10_000,
    show_default=True,
    help="Print at most this many rows.",
)
@click.option(
    "--db",
    "db_url",
    envvar="WH_DB_URL",
    help="Query this catalog database directly (default: $WH_URL's, else $WH_HOME's).",
)
@click.pass_context
def sql(ctx: click.Context, query: str, as_json: bool, limit: int, db_url: str | None) -> None:
    """Run one SELECT over the catalog, read-only (admins; tables in docs/sql.md).

    Anything but a single statement that only reads is refused by the database
    itself (exit 2), and so is a call to a function off the allowed list
    (docs/sql.md). Prints a table on a terminal, tab-separated lines with a
    header otherwise.
    """
    result = _run(ctx, query, limit, db_url)
    if as_json:
        emit_json(result.to_json())
    elif sys.stdout.isatty():
        _table(result)
    else:
        click.echo("\t".join(_cell(c) for c in result.columns))
        for row in result.rows:
            click.echo("\t".join(_cell(v) for v in row))
    if result.truncated:
        click.echo(f"(only the first {limit} rows)", err=True)


def _run(ctx: click.Context, query: str, limit: int, db_url: str | None) -> SqlResult:
    if db_url:
        import sqlalchemy as sa

        from warehouse import catalog

        database = sa.engine.make_url(db_url).database if db_url.startswith("sqlite") else None
        if database and database != ":memory:" and not Path(database).is_file():
            # Opening would make an empty catalog there: a mistyped path answers nothing.
            raise NotFoundError(f"sql: no catalog database at {database}")
        engine = catalog.open_engine(db_url)
        try:
            return run_readonly(engine, query, limit=limit)
        finally:
            engine.dispose()
    wh = open_warehouse(ctx)
    from warehouse.embedded import EmbeddedWarehouse

    if isinstance(wh, EmbeddedWarehouse):
        return run_readonly(wh.engine, query, limit=limit)
    from warehouse.remote.warehouse import RemoteWarehouse

    assert isinstance(wh, RemoteWarehouse)
    check_query(query, limit)  # in the words of an embedded catalog, not the API's
    out = wh.api.post("/sql", {"query": query, "limit": limit})
    return SqlResult(out["columns"], out["rows"], out["truncated"])


def _cell(v: Value) -> str:
    if v is None:
        return ""
    text = str(v)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _table(result: SqlResult) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(*(escape(c) for c in result.columns))
    for row in result.rows:
        table.add_row(*("NULL" if v is None else escape(str(v)) for v in row))
    print_whole(table)
