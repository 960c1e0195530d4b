"""A small query answered in the client: no job, no step process (docs/query.md).

When what a one-step plan reads and checks holds at most ``SMALL_BYTES``,
``wh query`` (``--plan auto`` or ``client``) runs it here, reading the
tables as a query step does (``stepinputs``): on the embedded warehouse each
partition in its blocks, a whole block checked before DuckDB reads it, a
file cut at column chunks checked block by block as DuckDB first touches
one; any other file (every file through a controller) copied into a
private temporary directory through the verifying reader. DuckDB is
sealed to those files as a step's is, and the result goes through a
Parquet file and back, as a job's result does, so its columns, names and
types are the step's. Nothing is recorded: no job, no result collection
(the decision and why: docs/latency.md).

One answer at a time a process: ``stepinputs`` keeps its state in the
module (a step reads for one job a process), let go after each answer.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from warehouse.blocks.store import LocalBlockStore
from warehouse.collection.reader import CollectionReader
from warehouse.errors import WarehouseError
from warehouse.interface import Warehouse
from warehouse.manifest import FileEntry
from warehouse.query import duckstep, stepinputs
from warehouse.query.catalog import Table, describe, rows_of
from warehouse.query.tables import META_FILE

__all__ = ["SMALL_BYTES", "answer", "read_bytes"]

# A query that reads and checks at most this is answered in the client:
# checking 64 MiB takes a few hundredths of a second here, reading it
# through the verifying reader (a copy) about a tenth, less than a job's
# step process takes to start.
SMALL_BYTES = 64 << 20


def _files(table: Table) -> list[str]:
    """The paths of a table's files a query step reads (``steps._table_files``)."""
    ending = "." + table.meta.format
    return sorted(p for p in table.manifest.files() if p != META_FILE and p.endswith(ending))


def _named(plan: dict[str, Any], table: Table) -> list[bool] | None:
    """Whether the query reads each column of ``table``, where the plan lists them."""
    listed = plan.get("tables", {}).get(table.name, {}).get("columns")
    if not isinstance(listed, list) or not table.meta.columns:
        return None
    read = {str(c).casefold() for c in listed}
    return [c.casefold() in read for c, _ in table.meta.columns]


def _checked(entry: FileEntry, named: list[bool] | None) -> int:
    """The bytes of a file a query checks in place: for a Parquet file cut
    at its column chunks (``blockfs.lazy_layout``: whole blocks, its head,
    a chunk per column per row group, its tail) those of its head, its tail
    and the chunks of the columns read; for any other file, all of it."""
    pieces = entry.pieces
    whole = all(p.offset == 0 and p.length == p.locator.size > 0 for p in pieces)
    chunks = len(pieces) - 2
    if not (named and entry.path.endswith(".parquet") and whole and chunks > 0):
        return entry.size
    if chunks % len(named):  # a chunk cut again: which column a block holds is unknown
        return entry.size
    inner = pieces[1:-1]
    read = sum(p.length for i, p in enumerate(inner) if named[i % len(named)])
    return pieces[0].length + pieces[-1].length + read


def read_bytes(wh: Warehouse, plan: dict[str, Any], tables: Sequence[Table]) -> int:
    """The bytes a one-step ``plan`` over ``tables`` reads and checks here."""
    local = isinstance(wh.store, LocalBlockStore)
    total = 0
    for t in tables:
        files = t.manifest.files()
        named = _named(plan, t) if local else None
        total += sum(_checked(files[p], named) for p in _files(t))
    return total


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _where(wh: Warehouse, plan: dict[str, Any], tables: Sequence[Table], root: Path) -> Any:
    """Where DuckDB reads each table's files: checked in place, or copied."""
    where: dict[str, list[str]] = {}
    if isinstance(wh.store, LocalBlockStore):
        # As a step reads its input: the files under ``<table>/``, the chunks
        # of the columns the plan lists checked together.
        stepinputs.name_columns(plan, {t.name: [list(c) for c in t.meta.columns] for t in tables})
        for n, t in enumerate(tables):
            files = t.manifest.files()
            entries = [dataclasses.replace(files[p], path=f"{t.name}/{p}") for p in _files(t)]
            reader = CollectionReader(wh.store, t.manifest)
            where[t.name] = stepinputs.fetch_files(reader, entries, root / str(n))[0]
        return where
    for n, t in enumerate(tables):
        reader = CollectionReader(wh.store, t.manifest)
        where[t.name] = []
        for k, path in enumerate(_files(t)):
            target = root / f"{n}-{k:05d}.{t.meta.format}"
            with open(target, "wb") as f:
                for chunk in reader.iter_file(path):  # each block checked
                    f.write(chunk)
            where[t.name].append(str(target))
    return where


def answer(
    wh: Warehouse, plan: dict[str, Any], tables: Sequence[Table], limit: int
) -> tuple[list[str], list[tuple[Any, ...]], int]:
    """(columns, the first ``limit`` rows, all rows) of a one-step ``plan``
    over ``tables``, run here."""

    if plan.get("mode") != "single":
        raise ValueError("a query answered in the client runs a one-step plan")
    with tempfile.TemporaryDirectory(prefix="wh-query-") as tmp:
        try:
            return _run(wh, plan, tables, limit, Path(tmp))
        finally:
            _forget()


def _forget() -> None:
    """Let go of what ``stepinputs`` keeps while it reads (it reads for one step a
    process): a process may answer more than one query (tests through
    click), and no check is kept from one query to the next."""
    for fd in stepinputs.held_fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    stepinputs.held_fds.clear()
    stepinputs.in_place.clear()
    stepinputs.lazy_files.clear()
    stepinputs.columns_read.clear()
    stepinputs.copied_bytes[0] = 0


def _run(
    wh: Warehouse, plan: dict[str, Any], tables: Sequence[Table], limit: int, root: Path
) -> tuple[list[str], list[tuple[Any, ...]], int]:
    import duckdb

    where = _where(wh, plan, tables, root)
    with duckdb.connect() as con:
        con.execute(f"SET temp_directory = {_quoted(str(root / 'duckdb.tmp'))}")
        # The column chunks the query needs and no more (``duckstep.connect``).
        with contextlib.suppress(duckdb.Error):
            con.execute("SET parquet_prefetch_column_gap = 0")
        lazy = stepinputs.lazy_files[0] if stepinputs.lazy_files else None
        if lazy is not None:
            lazy.register(con)
        # Sealed as a query step is (``duckstep.seal``): the SQL reads its
        # tables' files and writes its result here, nothing else.
        paths = [p for ps in where.values() for p in ps if not p.startswith(duckstep.BLOCKS)]
        dirs = [str(root) + "/"] + ([duckstep.BLOCKS] if lazy is not None else [])
        con.execute(f"SET allowed_paths = [{', '.join(map(_quoted, paths))}]")
        con.execute(f"SET allowed_directories = [{', '.join(map(_quoted, dirs))}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        try:
            for t in tables:
                duckstep.create_view(con, t.name, t.meta.format, where[t.name], t.meta.columns)
            # Bound here, over the tables themselves (``compile_plan`` did not:
            # a second DuckDB database costs tens of milliseconds), with the
            # refusals a job's submission gives.
            describe(con, plan["sql"])
        except (duckdb.Error, WarehouseError) as e:
            stepinputs.lazy_failed()  # a block that failed its check: that is the error
            if isinstance(e, WarehouseError):
                raise
            raise WarehouseError(f"query: {str(e).splitlines()[0]}") from None
        try:
            stored, described = duckstep.exact_sql(con, plan["sql"])
            result = root / "result.parquet"
            con.execute(f"COPY ({stored}) TO {_quoted(str(result))} (FORMAT parquet)")
            found = rows_of(con, f"read_parquet({_quoted(str(result))})", described, limit)
        except duckdb.Error as e:
            stepinputs.lazy_failed()  # a block that failed its check, in our words
            # What the data makes fail (a cast, a division): DuckDB's words,
            # as a failed query job ends with them (exit 1).
            raise WarehouseError(f"query: {str(e).splitlines()[0]}") from None
        stepinputs.lazy_failed()
        return found
