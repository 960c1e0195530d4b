"""Tables and queries against a warehouse: describe, compile, read results."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from warehouse.collection.reader import CollectionReader
from warehouse.errors import NotFoundError, UsageError, WarehouseError
from warehouse.interface import Warehouse
from warehouse.manifest import Manifest
from warehouse.query.parsing import parse, table_names
from warehouse.query.planner import MAX_PARAMS, plan
from warehouse.query.tables import FORMATS, MAX_PARTITIONS, META_FILE, TableMeta

__all__ = [
    "Table",
    "compile_plan",
    "compile_query",
    "describe",
    "find_tables",
    "list_tables",
    "meta_of",
    "query_input",
    "read_rows",
    "rows_of",
    "table_meta",
    "table_params",
]

MAX_ROWS = 100_000


def table_meta(wh: Warehouse, key: str) -> TableMeta:
    return meta_of(wh, key, wh.manifest(key))


def meta_of(wh: Warehouse, key: str, manifest: Manifest) -> TableMeta:
    """The description of table ``key`` whose manifest is ``manifest``."""
    if META_FILE not in manifest.files():
        raise UsageError(f"{key} is not a table (it has no {META_FILE})")
    text = CollectionReader(wh.store, manifest).read_file(META_FILE)
    size = sum(e.size for p, e in manifest.files().items() if p != META_FILE)
    return TableMeta.parse(text, size=size)


def list_tables(wh: Any) -> list[tuple[str, str, TableMeta]]:
    """(name, PDH, description) of every name that holds a table."""
    found = []
    for record in wh.list_names(""):
        try:
            found.append((record.name, record.pdh, table_meta(wh, record.pdh)))
        except WarehouseError:
            continue
    return found


def table_params(
    fmt: str, partition_by: str | None, partitions: int | None, path: str
) -> dict[str, Any]:
    if fmt not in FORMATS:
        raise UsageError(f"table: format must be one of {', '.join(FORMATS)}")
    if partition_by is not None and not partition_by.strip():
        raise UsageError("table: --partition-by needs a column name")
    if partition_by is None and partitions not in (None, 1):
        raise UsageError("table: --partitions needs --partition-by")
    n = partitions if partitions is not None else (4 if partition_by else 1)
    if not 1 <= n <= MAX_PARTITIONS:
        raise UsageError(f"table: partitions must be 1 to {MAX_PARTITIONS}")
    params: dict[str, Any] = {"format": fmt, "partitions": n}
    if partition_by:
        params["partition_by"] = partition_by
    if path:
        params["path"] = path
    return params


@dataclasses.dataclass(frozen=True)
class Table:
    """A table a query names: its name, PDH, description and manifest."""

    name: str
    pdh: str
    meta: TableMeta
    manifest: Manifest


def find_tables(
    wh: Warehouse, sql: str, manifest: Callable[[str], Manifest] | None = None
) -> list[Table]:
    """The tables ``sql`` names, resolved through the catalog (what the user
    may not read is unknown to it); ``manifest``: how a PDH's manifest is
    read (default ``wh.manifest``). Nothing is recorded."""
    read = manifest or wh.manifest
    found = []
    for name in table_names(parse(sql)):
        try:
            pdh = wh.resolve(name)
        except (NotFoundError, UsageError):  # UsageError: not even a name ('/etc/passwd')
            raise NotFoundError(f"query: unknown table {name!r}") from None
        collection = read(pdh)
        found.append(Table(name, pdh, meta_of(wh, pdh, collection), collection))
    return found


def compile_plan(
    sql: str, tables: Sequence[Table], how: str = "auto", *, bind: bool = True
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(plan, job params) of ``sql`` over ``tables``; ``how`` as for
    ``planner.plan``. The SQL is bound by DuckDB first (``_bound``), unless
    ``bind`` is false (the caller binds it over the tables: ``describe``)."""
    metas = {t.name: t.meta for t in tables}
    compiled = plan(sql, metas, how)
    if bind and all(m.columns for m in metas.values()):
        compiled = _bound(sql, compiled, metas)
    columns = {n: [list(c) for c in m.columns] for n, m in metas.items()}
    params = {"plan": compiled, "columns": columns}
    if len(json.dumps(params)) > MAX_PARAMS:
        # The columns each table's query reads only steer which blocks a step
        # checks together: without them (a guess from the SQL's words) it may fit.
        for t in compiled["tables"].values():
            t.pop("columns", None)
    if len(json.dumps(params)) > MAX_PARAMS:
        # Steps get their params in one environment variable (at most 128 KiB).
        raise UsageError(f"query: the compiled plan is over {MAX_PARAMS} bytes: shorten the SQL")
    return compiled, params


def query_input(wh: Warehouse, tables: Sequence[Table]) -> str:
    """Record the input of a query job, every table's files under
    ``<name>/``, as a collection; its PDH."""
    entries = []
    for t in tables:
        for path, entry in t.manifest.files().items():
            entries.append(dataclasses.replace(entry, path=f"{t.name}/{path}"))
    return wh.put_manifest(Manifest.from_files(entries)).pdh


def compile_query(
    wh: Warehouse, sql: str, how: str = "auto"
) -> tuple[dict[str, Any], str, dict[str, Any]]:
    """(plan, input PDH holding every table under ``<name>/``, job params);
    ``how`` as for ``planner.plan``."""
    tables = find_tables(wh, sql)
    compiled, params = compile_plan(sql, tables, how)
    return compiled, query_input(wh, tables), params


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _bound(sql: str, compiled: dict[str, Any], metas: dict[str, TableMeta]) -> dict[str, Any]:
    """The plan, once DuckDB has bound its SQL over empty tables of the same
    columns: an unknown function, a column of the wrong type, an expression
    too deep is the user's error now (in one line), not a job's three failed
    attempts. A distributed form that does not bind (a shape the compiler
    got wrong) runs as one step instead."""
    import duckdb

    with duckdb.connect() as con:
        con.execute("SET enable_external_access = false")  # no file, here either
        con.execute("SET lock_configuration = true")
        for name, meta in metas.items():
            cols = ", ".join(f"NULL::{kind} AS {_quoted(c)}" for c, kind in meta.columns)
            try:
                con.execute(f"CREATE VIEW {_quoted(name)} AS SELECT {cols} WHERE false")
            except duckdb.Error:
                return compiled  # a type DuckDB does not spell back: left to the step
        distributed = compiled["mode"] != "single"
        one_step = plan(sql, metas, "one-step")["sql"] if distributed else compiled["sql"]
        wanted = describe(con, one_step)
        if distributed:
            try:
                kinds = con.execute(f"DESCRIBE {compiled['partial']}").fetchall()
                cols = ", ".join(f"NULL::{r[1]} AS {_quoted(r[0])}" for r in kinds)
                con.execute(f"CREATE VIEW partials AS SELECT {cols} WHERE false")
                final = compiled["final"]
                got = [r[0] for r in con.execute(f"DESCRIBE {final}").fetchall()]
            except duckdb.Error as e:
                why = f"its distributed form does not bind: {str(e).splitlines()[0]}"
                return {**plan(sql, metas, "one-step"), "why": why}
            if got != wanted and len(got) == len(wanted):
                # The result's columns named as one step names them (count_star(), not COUNT(*)).
                names = ", ".join(_quoted(n) for n in wanted)
                compiled = {**compiled, "final": f"SELECT * FROM ({final}) AS wh_final({names})"}
    return compiled


def describe(con: Any, sql: str) -> list[str]:
    """The names of the columns of ``sql`` as DuckDB binds it on ``con``,
    reading no row: an unknown table, column or function is named (exit 4),
    anything else DuckDB refuses is said in its words (exit 2)."""
    import duckdb

    try:
        return [r[0] for r in con.execute(f"DESCRIBE {sql}").fetchall()]
    except (duckdb.CatalogException, duckdb.BinderException) as e:
        message = str(e).splitlines()[0]
        if "not found" in message or "does not exist" in message:
            raise NotFoundError(f"query: {message}") from None
        raise UsageError(f"query: {message}") from None
    except duckdb.Error as e:
        raise UsageError(f"query: {str(e).splitlines()[0]}") from None


def read_rows(wh: Warehouse, key: str, limit: int) -> tuple[list[str], list[tuple[Any, ...]], int]:
    """(columns, the first ``limit`` rows, all rows) of a table collection."""
    import duckdb

    meta = table_meta(wh, key)
    reader = wh.reader(key)
    parts = sorted(p for p in reader.files if p != META_FILE)
    with tempfile.TemporaryDirectory(prefix="wh-query-") as tmp:
        paths = []
        for n, part in enumerate(parts):
            target = Path(tmp) / f"{n:05d}.{meta.format}"
            with open(target, "wb") as f:
                for chunk in reader.iter_file(part):
                    f.write(chunk)
            paths.append(str(target))
        con = duckdb.connect()
        scan = "read_parquet" if meta.format == "parquet" else "read_csv"
        return rows_of(con, f"{scan}({paths!r})", meta.columns, limit)


def rows_of(
    con: Any, source: str, columns: Sequence[tuple[str, str]], limit: int
) -> tuple[list[str], list[tuple[Any, ...]], int]:
    """(columns, the first ``limit`` rows, all rows) of a result's files
    (``source``, a scan), whose columns are ``columns`` (name, type)."""
    total = con.execute(f"SELECT count(*) FROM {source}").fetchone()
    # HUGEINT columns are stored as DECIMAL(38,0) (Parquet has none): as they were.
    huge = ['"' + c.replace('"', '""') + '"' for c, t in columns if t == "HUGEINT"]
    cast = ", ".join(f"CAST({c} AS HUGEINT) AS {c}" for c in huge)
    star = f"* REPLACE ({cast})" if huge else "*"
    cursor = con.execute(f"SELECT {star} FROM {source} LIMIT {min(limit, MAX_ROWS)}")
    rows = cursor.fetchall()
    names = [d[0] for d in cursor.description]
    return names, rows, int(total[0]) if total else 0
