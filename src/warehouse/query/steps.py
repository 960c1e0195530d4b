"""What the steps of ``builtin:table`` and ``builtin:query`` run (DuckDB inside a step).

A Parquet partition written by ``builtin:table`` on a local block store (the
embedded warehouse) is stored with each column chunk in blocks of its own
(and the file's head and tail in theirs). Such a file is read by DuckDB
through a filesystem that checks each block when DuckDB first touches it
(``blockfs``): only the column chunks a query reads are checked. A file that is one whole block of
a local store is read by DuckDB where it lies, after its MD5 is checked
over the same open file; any other file is copied into the step's scratch
directory through the verifying reader. Bytes are counted either way, and
results go back as blocks. How the inputs are read and checked is
``stepinputs``; DuckDB's connection, scans and views are ``duckstep``.
"""

from __future__ import annotations

import json
import mmap
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from warehouse import step
from warehouse.blocks import MAX_BLOCK_SIZE
from warehouse.blocks.store import LocalBlockStore
from warehouse.collection.reader import CollectionReader
from warehouse.manifest import FileEntry, Segment, Stream
from warehouse.query.duckstep import (
    connect,
    copy_out,
    create_view,
    exact_sql,
    ident,
    load_duckdb,
    scan_sql,
    seal,
    write_stream,
)
from warehouse.query.stepinputs import (
    check_blocks,
    check_blocks_later,
    copied_bytes,
    fetch_files,
    lazy_failed,
    name_columns,
    step_cores,
)
from warehouse.query.tables import (
    FORMATS,
    META_FILE,
    TableMeta,
    hash_id,
    part_name,
    source_files,
)

__all__ = ["query_step", "table_step"]

if "warehouse.jobs.forkserver" in sys.modules:
    # A fork server preloading the steps: the steps it forks then find the
    # block filesystem (and fsspec, 20 to 60 ms) imported. A step started
    # the plain way imports it only if it reads a many-block file.
    from warehouse.query import blockfs  # noqa: F401


def _chunk_cuts(con: Any, path: Path) -> list[int]:
    """Where a Parquet file's blocks begin: its head (the magic), each column
    chunk of each row group, and its tail (page indexes and footer), each
    in blocks of their own; a piece over the block limit is cut again."""
    size = path.stat().st_size
    rows = con.execute(
        "SELECT dictionary_page_offset, data_page_offset, total_compressed_size "
        "FROM parquet_metadata(?)",
        [str(path)],
    ).fetchall()
    starts = {0, 4} if size > 4 else {0}
    for dictionary, data, length in rows:
        start = dictionary if dictionary else data  # 0 or NULL: no dictionary page
        if start is not None and length is not None and 4 <= start < size:
            starts.add(start)
            if start + length < size:
                starts.add(start + length)
    cuts = sorted(starts)
    out: list[int] = []
    for begin, end in zip(cuts, [*cuts[1:], size], strict=True):
        out.extend(range(begin, end, MAX_BLOCK_SIZE))
    return out


def _write_cut(stream: str, name: str, path: Path, cuts: Sequence[int]) -> tuple[str, int]:
    """One file in a stream of its own, its blocks beginning at ``cuts``."""
    store = step.warehouse().store
    with open(path, "rb") as f:
        # Mapped, not read: a partition may be far bigger than memory. Not
        # closed by hand: after a failed put a traceback still holds a slice
        # (the mapping goes with the last view), and the put's error stands.
        pages = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    size = len(pages)
    ends = [*cuts[1:], size]
    view = memoryview(pages)
    locators = tuple(store.put(view[a:b]).locator for a, b in zip(cuts, ends, strict=True))
    store.flush()
    return Stream(stream, locators, (Segment(0, size, name),)).format(), size


# -- wh table create -----------------------------------------------------------


def table_step() -> None:
    try:
        _table_step()
    except Exception:
        lazy_failed()  # a source block that failed its check, in our words
        raise


def _table_step() -> None:
    params = step.params()
    fmt, by, n = params["format"], params.get("partition_by"), int(params["partitions"])
    if fmt not in FORMATS or not (by is None or isinstance(by, str)):
        raise SystemExit(f"table: format must be one of {', '.join(FORMATS)}")
    if not by and n != 1:  # every partition would hold every row
        raise SystemExit("table: more than one partition needs partition_by")
    if step.level() == 0:
        step.queue(1, *(str(p) for p in range(n)))
        return
    load_duckdb()  # on a thread, while the source is read here
    p = int(step.step_input())
    src_fmt, entries = source_files(step.input_manifest(), params.get("path", ""))
    paths, read = fetch_files(step.reader(), entries, step.scratch() / "src")
    con = connect()
    seal(con, paths)  # the job's params come from whoever submitted it
    source = scan_sql(src_fmt, paths)
    if by is not None:
        columns = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()]
        # The column as the file names it: DuckDB's names are not case-sensitive.
        by = next((c for c in columns if c.casefold() == by.casefold()), by)
        if by not in columns:
            raise SystemExit(f"table: no column {by!r} (there are: {', '.join(columns)})")
        quoted = '"' + by.replace('"', '""') + '"'
        sql = f"SELECT * FROM {source} WHERE hash({quoted}) % {n} = {p}"
    else:
        sql = f"SELECT * FROM {source}"
    target = step.scratch() / part_name(p, fmt)
    copy_out(con, sql, target, fmt, table=True)
    # The partition alone in its block(s): a query step can read it in place,
    # checking only the column chunks it reads. (Blocks on keep servers are
    # copied whole by a query step: there, many small blocks would only cost
    # a request each.)
    local = isinstance(step.warehouse().store, LocalBlockStore)
    if fmt == "parquet" and local and target.stat().st_size > 4:
        fragment, written = _write_cut(".", part_name(p, fmt), target, _chunk_cuts(con, target))
    else:
        fragment, written = write_stream(".", [(part_name(p, fmt), target)])
    step.output(fragment)
    if p == 0:
        described = con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()
        meta = TableMeta(fmt, by, n, hash_id(), [(r[0], r[1]) for r in described])
        (step.scratch() / META_FILE).write_text(meta.to_json())
        step.output(write_stream(".", [(META_FILE, step.scratch() / META_FILE)])[0])
    step.counters(table_bytes_read=read, table_bytes_written=written)


# -- wh query ------------------------------------------------------------------


def _table_files(table: str, fmt: str, partition: int | None) -> list[FileEntry]:
    # The reader's manifest: the input is not parsed a second time.
    files = step.reader().files
    prefix = f"{table}/"
    wanted = part_name(partition, fmt) if partition is not None else None
    return [
        e
        for path, e in sorted(files.items())
        if path.startswith(prefix)
        and path.endswith("." + fmt)
        and (wanted is None or path == prefix + wanted)
    ]


def _compute(con: Any, sql: str) -> Path:
    """The result as a table in scratch (its Parquet file and ``_table.json``)."""
    target = step.scratch() / part_name(0, "parquet")
    stored, described = exact_sql(con, sql)
    copy_out(con, stored, target, "parquet")
    meta = TableMeta("parquet", None, 1, hash_id(), described)
    (step.scratch() / META_FILE).write_text(meta.to_json())
    return target


def _report(target: Path) -> None:
    fragment, _ = write_stream(
        ".", [(META_FILE, step.scratch() / META_FILE), (target.name, target)]
    )
    step.output(fragment)


def _result(con: Any, sql: str) -> None:
    _report(_compute(con, sql))


# The partials of a step's partitions: a name no table can have (names hold no space).
_PARTIAL = '"wh partial"'
_broadcast: dict[str, tuple[list[str], int]] = {}  # table -> (paths, bytes) in this step


def _partition_paths(
    tables: dict[str, dict[str, Any]], p: int
) -> tuple[dict[str, tuple[str, list[str]]], dict[str, int]]:
    """Where partition ``p`` of every table is read (format, paths); the bytes, by kind."""
    reader = step.reader()
    moved = {"scan_bytes": 0, "broadcast_bytes": 0, "shuffle_bytes": 0}
    found: dict[str, tuple[str, list[str]]] = {}
    for name, t in tables.items():
        into = step.scratch() / f"{name}-{p}"
        if t["role"] == "partitioned":
            paths, n = fetch_files(reader, _table_files(name, t["format"], p), into)
            moved["scan_bytes"] += n
            found[name] = (t["format"], paths)
        elif t["role"] == "broadcast":  # read once per step, whatever its partitions
            if name not in _broadcast:
                _broadcast[name] = fetch_files(reader, _table_files(name, t["format"], None), into)
                moved["broadcast_bytes"] += _broadcast[name][1]
            found[name] = (t["format"], _broadcast[name][0])
        else:
            wanted = f"{name}.{part_name(p, 'parquet')}"
            paths = []
            for _, frag in step.intermediates(1):
                sub = CollectionReader(step.warehouse().store, frag)
                entries = [e for path, e in sub.files.items() if path.endswith("/" + wanted)]
                got, n = fetch_files(sub, entries, into / str(len(paths)))
                paths += got
                moved["shuffle_bytes"] += n
            found[name] = ("parquet", paths)
    return found, moved


def _drop_views(con: Any, tables: dict[str, dict[str, Any]]) -> None:
    for name in tables:
        con.execute('DROP VIEW IF EXISTS "' + name.replace('"', '""') + '"')


def query_step() -> None:
    try:
        _query_step()
    except Exception:
        lazy_failed()  # DuckDB's own error for a read that failed its check says less
        raise


def _query_step() -> None:
    plan: dict[str, Any] = step.params()["plan"]
    columns: dict[str, Any] = step.params().get("columns", {})
    name_columns(plan, columns)
    level = step.level()
    if level > 0 or plan["mode"] == "single":
        load_duckdb()  # on a thread, while the blocks are read and checked here
    reader = step.reader()
    tables: dict[str, dict[str, Any]] = plan["tables"]
    if level == 0 and plan["mode"] != "single":
        shuffles = [
            json.dumps([name, e.path])
            for name, t in sorted(tables.items())
            if t["role"] == "shuffle"
            for e in _table_files(name, t["format"], None)
        ]
        if shuffles:
            step.queue(1, *shuffles)
        groups = plan.get("groups") or [[p] for p in range(plan["partitions"])]
        step.queue(2, *(",".join(str(p) for p in g) for g in groups))
        step.queue(3, "final")
        return
    if plan["mode"] == "single":
        # One step, the first: no other process to start, and it has the machine.
        wanted = {name: _table_files(name, t["format"], None) for name, t in tables.items()}
        entries = [e for es in wanted.values() for e in es]
        # DuckDB runs the query while the blocks it reads are checked; the
        # result is reported only once every check passed (else the query
        # runs again over copies read through the verifying reader).
        failed = check_blocks_later(reader.store, entries)
        for attempt in range(2):
            paths, read = fetch_files(reader, entries, step.scratch() / f"in{attempt}")
            con = connect(step_cores() if level == 0 else 1)
            seal(con, paths)  # before the views too: their columns come from the input
            start = 0
            for name, t in tables.items():
                mine = paths[start : start + len(wanted[name])]
                start += len(wanted[name])
                create_view(con, name, t["format"], mine, columns.get(name))
            try:
                target, error = _compute(con, plan["sql"]), None
            except Exception as e:  # bad bytes may fail the query: checked below
                error = e
            finally:
                con.close()
            lazy_failed()  # a many-block file's bad block: no other copy here
            if attempt or not failed():
                if error is not None:
                    raise error
                break
        _report(target)
        step.counters(scan_bytes=read, copied_bytes=copied_bytes[0])
        return
    if level == 1:  # shuffle one file of a table by the join key
        name, path = json.loads(step.step_input())
        t = tables[name]
        paths, read = fetch_files(reader, [reader.entry(path)], step.scratch() / "in")
        con = connect()
        seal(con, paths)  # the plan comes from whoever submitted the job
        key = '"' + t["key"].replace('"', '""') + '"'
        n = int(plan["partitions"])
        out = []
        for p in range(n):
            target = step.scratch() / f"{name}-{p}.parquet"
            scan = scan_sql(t["format"], paths, columns.get(name))
            sql = f"SELECT * FROM {scan} WHERE hash({key}) % {n} = {p}"
            copy_out(con, sql, target, "parquet")
            out.append((f"{name}.{part_name(p, 'parquet')}", target))
        lazy_failed()
        fragment, written = write_stream(f"./shuffle-{step.number()}", out)
        step.intermediate(fragment)
        step.counters(scan_bytes=read, shuffle_bytes=written)
    elif level == 2:  # a group of partitions: one partial per partition, written once
        group = [int(p) for p in step.step_input().split(",")]
        moved = {"scan_bytes": 0, "broadcast_bytes": 0, "shuffle_bytes": 0}
        check_blocks(  # the group's partitions checked at once, as DuckDB loads
            reader.store,
            [
                e
                for name, t in tables.items()
                if t["role"] != "shuffle"
                for p in (group if t["role"] == "partitioned" else [None])
                for e in _table_files(name, t["format"], p)
            ],
        )
        con = connect()
        # Every partition's files first: the connection is then sealed to them.
        where = []
        for p in group:
            found, counted = _partition_paths(tables, p)
            where.append(found)
            for kind, n in counted.items():
                moved[kind] += n
        seal(con, [path for found in where for _, paths in found.values() for path in paths])
        for i, found in enumerate(where):
            for name, (fmt, paths) in found.items():
                create_view(con, name, fmt, paths, columns.get(name))
            verb = f"CREATE TEMP TABLE {_PARTIAL} AS" if i == 0 else f"INSERT INTO {_PARTIAL}"
            con.execute(f"{verb} {plan['partial']}")
            _drop_views(con, tables)
        target = step.scratch() / f"partial-{group[0]:05d}.parquet"
        copy_out(con, exact_sql(con, f"SELECT * FROM {_PARTIAL}")[0], target, "parquet")
        lazy_failed()
        fragment, written = write_stream(".", [(target.name, target)])
        step.intermediate(fragment)
        step.counters(**moved, partial_bytes=written, copied_bytes=copied_bytes[0])
    else:  # the final merge
        partials: list[str] = []
        merged = 0
        for number, frag in sorted(step.intermediates(2), key=lambda x: x[0]):
            sub = CollectionReader(step.warehouse().store, frag)
            got, n = fetch_files(sub, sub.files.values(), step.scratch() / f"p{number}")
            partials += got
            merged += n
        con = connect()
        seal(con, partials)
        # Partial sums of integers were stored as DECIMAL(38,0) (``exact_sql``): HUGEINT again.
        scan = scan_sql("parquet", partials)
        kinds = con.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()
        huge = [ident(r[0]) for r in kinds if r[1] == "DECIMAL(38,0)"]
        cast = ", ".join(f"CAST({c} AS HUGEINT) AS {c}" for c in huge)
        star = f"* REPLACE ({cast})" if huge else "*"
        con.execute(f"CREATE VIEW partials AS SELECT {star} FROM {scan}")
        _result(con, plan["final"])
        step.counters(partial_bytes_merged=merged)
