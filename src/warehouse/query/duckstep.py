"""DuckDB in a query or table step (``steps``): its connection, made on a
thread while the inputs are checked and sealed to the step's own files;
scans, views and ``COPY`` of the tables' files; HUGEINT columns kept exact
through Parquet; and the files written back as a stream of blocks.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from warehouse import step
from warehouse.query.stepinputs import lazy_files

__all__ = [
    "BLOCKS",
    "connect",
    "copy_out",
    "create_view",
    "exact_sql",
    "ident",
    "load_duckdb",
    "scan_sql",
    "seal",
    "write_stream",
]


def connect(threads: int = 1) -> Any:
    import duckdb

    # The first one was made on the loader thread, beside this one's work.
    con = _early.pop().result() if _early else duckdb.connect()
    # A step is one slot (the executor runs steps side by side), except a
    # one-step query, which is alone and uses the cores it may run on.
    con.execute(f"SET threads = {threads}")
    con.execute(f"SET temp_directory = '{step.scratch() / 'duckdb.tmp'}'")
    # Read the column chunks the query needs and no more: left to adapt,
    # DuckDB's gap between two ranges it reads at once grows (over a
    # megabyte, varying run to run), and each block it then touches in a
    # many-block file is checked whole (for TPC-H Q3 and Q12 about half as
    # many bytes again checked and copied; docs/benchmarks.md). A DuckDB
    # without the setting reads as it did.
    with contextlib.suppress(duckdb.Error):
        con.execute("SET parquet_prefetch_column_gap = 0")
    if lazy_files:
        lazy_files[0].register(con)
    return con


def seal(con: Any, paths: Iterable[str]) -> None:
    """From here on the connection reads only ``paths`` (the step's inputs),
    the step's scratch directory and its many-block files, loads no
    extension, and its settings stay: the user's SQL can read or write no
    other file (``read_csv('/etc/passwd')``, ``read_text``, ``glob``)."""

    def quoted(p: str) -> str:
        return "'" + p.replace("'", "''") + "'"

    if lazy_files:
        lazy_files[0].register(con)
    files = ", ".join(quoted(p) for p in paths if not p.startswith(BLOCKS))
    con.execute(f"SET allowed_paths = [{files}]")
    con.execute(f"SET allowed_directories = [{quoted(str(step.scratch()) + '/')}, '{BLOCKS}']")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


BLOCKS = "whblocks://"  # blockfs.PROTOCOL (not imported: it brings fsspec)


def load_duckdb() -> None:
    """Import DuckDB (half a second or more) and make the step's first
    connection (about 10 CPU-ms, the GIL released) on a thread; ``connect``
    then waits for it. MD5 releases the GIL, so both go on at once."""
    loader = ThreadPoolExecutor(1, thread_name_prefix="wh-duckdb")
    _early.append(loader.submit(_new_connection))
    loader.submit(importlib.import_module, "warehouse.query.blockfs")
    loader.shutdown(wait=False)


def _new_connection() -> Any:
    import duckdb

    return duckdb.connect()


_early: list[Future[Any]] = []  # the step's first connection, being made


def scan_sql(fmt: str, paths: Sequence[str], columns: Any = None) -> str:
    """A scan of the files; a CSV table's partitions with the columns and types
    of its ``_table.json`` (guessed from each file, a partition whose values of
    a column are all NULL would make it text: ``sum(VARCHAR)``)."""
    listed = "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"
    if fmt == "csv" and columns:
        kinds = ", ".join(
            "'" + c.replace("'", "''") + "': '" + t.replace("'", "''") + "'" for c, t in columns
        )
        dialect = "header = true, delim = ',', quote = '\"', escape = '\"', auto_detect = false"
        return f"read_csv({listed}, {dialect}, columns = {{{kinds}}})"
    if fmt == "csv":
        # Comma-separated, as named: left to guess, DuckDB takes a file with a
        # ragged row for one column of whole lines, and the table is wrong.
        return f"read_csv({listed}, header = true, auto_detect = true, delim = ',')"
    return f"read_parquet({listed})"


def copy_out(con: Any, sql: str, target: Path, fmt: str, *, table: bool = False) -> None:
    options = "FORMAT csv, HEADER true" if fmt == "csv" else "FORMAT parquet"
    if table and fmt == "parquet":
        # A table's partitions with Parquet 2's encodings (delta, byte stream
        # split): about a fifth fewer bytes for a query to read and check, and
        # quicker to decode (docs/benchmarks.md).
        options += ", PARQUET_VERSION V2"
    con.execute(f"COPY ({sql}) TO '{str(target).replace(chr(39), chr(39) * 2)}' ({options})")


def write_stream(stream: str, files: Sequence[tuple[str, Path]]) -> tuple[str, int]:
    out = step.StreamWriter(stream)
    total = 0
    for name, path in files:
        data = path.read_bytes()
        total += len(data)
        out.add_file(name, [data])
    return out.finish(), total


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def exact_sql(con: Any, sql: str) -> tuple[str, list[tuple[str, str]]]:
    """``sql`` with its HUGEINT columns as DECIMAL(38,0), and its columns
    (name, type). Parquet has no 128-bit integer: DuckDB writes HUGEINT (the
    type of ``sum`` over integers) as DOUBLE, so sums and counts would come
    back as floats, rounded beyond 2^53. A reader casts them back (``create_view``,
    ``catalog.read_rows``): ``_table.json`` names them HUGEINT."""
    # Over a subquery: columns of one name are told apart (s, s_1), as in the file.
    found = con.execute(f"DESCRIBE SELECT * FROM ({sql})").fetchall()
    described = [(r[0], r[1]) for r in found]
    huge = [n for n, t in described if t == "HUGEINT"]
    if not huge:
        return sql, described
    cast = ", ".join(f"CAST({ident(n)} AS DECIMAL(38,0)) AS {ident(n)}" for n in huge)
    return f"SELECT * REPLACE ({cast}) FROM ({sql})", described


def create_view(con: Any, name: str, fmt: str, paths: Sequence[str], columns: Any = None) -> None:
    quoted = '"' + name.replace('"', '""') + '"'
    if lazy_files:
        lazy_files[0].register(con)
    if paths:
        # HUGEINT columns are stored as DECIMAL(38,0) (``exact_sql``): read back as they were.
        huge = [c for c, t in columns or [] if t == "HUGEINT"]
        cast = ", ".join(f"CAST({ident(c)} AS HUGEINT) AS {ident(c)}" for c in huge)
        star = f"* REPLACE ({cast})" if huge else "*"
        con.execute(f"CREATE VIEW {quoted} AS SELECT {star} FROM {scan_sql(fmt, paths, columns)}")
    else:  # no rows here: an empty view with the table's columns
        cols = ", ".join(f"NULL::{t} AS {ident(c)}" for c, t in columns) or "NULL AS none"
        con.execute(f"CREATE VIEW {quoted} AS SELECT {cols} WHERE false")
