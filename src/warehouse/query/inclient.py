"""A small query answered in the client: no job, no step process (docs/query.md).

When the tables a query reads hold at most ``SMALL_BYTES`` in all, ``wh
query`` (``--plan auto`` or ``client``) runs the one-step plan here: each
table file is copied into a private temporary directory through the
verifying reader (every block's MD5 checked before DuckDB sees a byte of
it), DuckDB is sealed to those files as a query step's is, and the result
goes through a Parquet file and back, as a job's result does, so its
columns, names and types are the step's. Nothing is recorded: no job, no
result collection (the decision and why: docs/latency.md).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from warehouse.collection.reader import CollectionReader
from warehouse.errors import WarehouseError
from warehouse.interface import Warehouse
from warehouse.query.catalog import Table, rows_of
from warehouse.query.steps import _exact, _view
from warehouse.query.tables import META_FILE

__all__ = ["SMALL_BYTES", "answer", "is_small", "read_bytes"]

# A query whose tables hold at most this is answered in the client: copying
# and checking 64 MiB takes about a tenth of a second here, less than a
# job's step process takes to start.
SMALL_BYTES = 64 << 20


def _files(table: Table) -> list[str]:
    """The paths of a table's files a query step reads (``steps._table_files``)."""
    ending = "." + table.meta.format
    return sorted(p for p in table.manifest.files() if p != META_FILE and p.endswith(ending))


def read_bytes(tables: Sequence[Table]) -> int:
    """The bytes of the files a one-step query over ``tables`` reads."""
    total = 0
    for t in tables:
        files = t.manifest.files()
        total += sum(files[p].size for p in _files(t))
    return total


def is_small(tables: Sequence[Table]) -> bool:
    return read_bytes(tables) <= SMALL_BYTES


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def answer(
    wh: Warehouse, plan: dict[str, Any], tables: Sequence[Table], limit: int
) -> tuple[list[str], list[tuple[Any, ...]], int]:
    """(columns, the first ``limit`` rows, all rows) of a one-step ``plan``
    over ``tables``, run here."""
    import duckdb

    if plan.get("mode") != "single":
        raise ValueError("a query answered in the client runs a one-step plan")
    with tempfile.TemporaryDirectory(prefix="wh-query-") as tmp:
        root = Path(tmp)
        where: dict[str, list[str]] = {}
        for n, t in enumerate(tables):
            reader = CollectionReader(wh.store, t.manifest)
            where[t.name] = []
            for k, path in enumerate(_files(t)):
                target = root / f"{n}-{k:05d}.{t.meta.format}"
                with open(target, "wb") as f:
                    for chunk in reader.iter_file(path):  # each block checked
                        f.write(chunk)
                where[t.name].append(str(target))
        with duckdb.connect() as con:
            con.execute(f"SET temp_directory = {_quoted(str(root / 'duckdb.tmp'))}")
            # Sealed as a query step is (``steps._seal``): the SQL reads its
            # tables' files and writes its result here, nothing else.
            files = ", ".join(_quoted(p) for ps in where.values() for p in ps)
            con.execute(f"SET allowed_paths = [{files}]")
            con.execute(f"SET allowed_directories = [{_quoted(str(root) + '/')}]")
            con.execute("SET enable_external_access = false")
            con.execute("SET lock_configuration = true")
            try:
                for t in tables:
                    _view(con, t.name, t.meta.format, where[t.name], t.meta.columns)
                stored, described = _exact(con, plan["sql"])
                result = root / "result.parquet"
                con.execute(f"COPY ({stored}) TO {_quoted(str(result))} (FORMAT parquet)")
                return rows_of(con, f"read_parquet({_quoted(str(result))})", described, limit)
            except duckdb.Error as e:
                # What the data makes fail (a cast, a division): DuckDB's words,
                # as a failed query job ends with them (exit 1).
                raise WarehouseError(f"query: {str(e).splitlines()[0]}") from None
