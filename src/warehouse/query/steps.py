"""What the steps of ``builtin:table`` and ``builtin:query`` run (DuckDB inside a step).

Files are copied from the warehouse into the step's scratch directory (and
counted), DuckDB reads them there, and results go back as blocks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from warehouse import step
from warehouse.collection.reader import CollectionReader
from warehouse.manifest import FileEntry, Manifest
from warehouse.query.tables import META_FILE, TableMeta, hash_id, part_name

__all__ = ["query_step", "table_step"]


def _connect() -> Any:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 1")  # a step is one slot; the executor runs steps side by side
    con.execute(f"SET temp_directory = '{step.scratch() / 'duckdb.tmp'}'")
    return con


def _fetch(
    reader: CollectionReader, entries: Iterable[FileEntry], into: Path
) -> tuple[list[str], int]:
    into.mkdir(parents=True, exist_ok=True)
    paths, total = [], 0
    for n, entry in enumerate(entries):
        target = into / f"{n:05d}-{entry.path.rsplit('/', 1)[-1]}"
        with open(target, "wb") as f:
            for _, chunk in reader.iter_chunks([entry]):
                f.write(chunk)
                total += len(chunk)
        paths.append(str(target))
    return paths, total


def _scan(fmt: str, paths: Sequence[str]) -> str:
    listed = "[" + ", ".join("'" + p.replace("'", "''") + "'" for p in paths) + "]"
    if fmt == "csv":
        return f"read_csv({listed}, header = true, auto_detect = true)"
    return f"read_parquet({listed})"


def _copy_out(con: Any, sql: str, target: Path, fmt: str) -> None:
    options = "FORMAT csv, HEADER true" if fmt == "csv" else "FORMAT parquet"
    con.execute(f"COPY ({sql}) TO '{target}' ({options})")


def _write(stream: str, files: Sequence[tuple[str, Path]]) -> tuple[str, int]:
    out = step.StreamWriter(stream)
    total = 0
    for name, path in files:
        data = path.read_bytes()
        total += len(data)
        out.add_file(name, [data])
    return out.finish(), total


# -- wh table create -----------------------------------------------------------


def _source_files(manifest: Manifest, under: str) -> tuple[str, list[FileEntry]]:
    prefix = under.strip("/")
    found = [
        e
        for path, e in sorted(manifest.files().items())
        if (not prefix or path == prefix or path.startswith(prefix + "/"))
        and path.rsplit(".", 1)[-1] in ("parquet", "csv")
    ]
    if not found:
        raise SystemExit(f"table: no .parquet or .csv file under {under or 'the collection'}")
    kinds = {e.path.rsplit(".", 1)[-1] for e in found}
    if len(kinds) > 1:
        raise SystemExit("table: the files are of more than one format")
    return kinds.pop(), found


def table_step() -> None:
    params = step.params()
    fmt, by, n = params["format"], params.get("partition_by"), int(params["partitions"])
    if step.level() == 0:
        step.queue(1, *(str(p) for p in range(n)))
        return
    p = int(step.step_input())
    src_fmt, entries = _source_files(step.input_manifest(), params.get("path", ""))
    paths, read = _fetch(step.reader(), entries, step.scratch() / "src")
    con = _connect()
    source = _scan(src_fmt, paths)
    if by is not None:
        columns = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()]
        if by not in columns:
            raise SystemExit(f"table: no column {by!r} (there are: {', '.join(columns)})")
        quoted = '"' + by.replace('"', '""') + '"'
        sql = f"SELECT * FROM {source} WHERE hash({quoted}) % {n} = {p}"
    else:
        sql = f"SELECT * FROM {source}"
    target = step.scratch() / part_name(p, fmt)
    _copy_out(con, sql, target, fmt)
    files = [(part_name(p, fmt), target)]
    if p == 0:
        described = con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()
        meta = TableMeta(fmt, by, n, hash_id(), [(r[0], r[1]) for r in described])
        (step.scratch() / META_FILE).write_text(meta.to_json())
        files.append((META_FILE, step.scratch() / META_FILE))
    fragment, written = _write(".", files)
    step.output(fragment)
    step.counters(table_bytes_read=read, table_bytes_written=written)


# -- wh query ------------------------------------------------------------------


def _table_files(table: str, fmt: str, partition: int | None) -> list[FileEntry]:
    files = step.input_manifest().files()
    prefix = f"{table}/"
    wanted = part_name(partition, fmt) if partition is not None else None
    return [
        e
        for path, e in sorted(files.items())
        if path.startswith(prefix)
        and path.endswith("." + fmt)
        and (wanted is None or path == prefix + wanted)
    ]


def _result(con: Any, sql: str) -> None:
    target = step.scratch() / part_name(0, "parquet")
    _copy_out(con, sql, target, "parquet")
    described = con.execute(f"DESCRIBE SELECT * FROM read_parquet('{target}')").fetchall()
    meta = TableMeta("parquet", None, 1, hash_id(), [(r[0], r[1]) for r in described])
    (step.scratch() / META_FILE).write_text(meta.to_json())
    fragment, _ = _write(".", [(META_FILE, step.scratch() / META_FILE), (target.name, target)])
    step.output(fragment)


def _view(con: Any, name: str, fmt: str, paths: Sequence[str], columns: Any = None) -> None:
    quoted = '"' + name.replace('"', '""') + '"'
    if paths:
        con.execute(f"CREATE VIEW {quoted} AS SELECT * FROM {_scan(fmt, paths)}")
    else:  # no rows here: an empty view with the table's columns
        cols = ", ".join(f'NULL::{t} AS "{c}"' for c, t in columns) or "NULL AS none"
        con.execute(f"CREATE VIEW {quoted} AS SELECT {cols} WHERE false")


def query_step() -> None:
    plan: dict[str, Any] = step.params()["plan"]
    columns: dict[str, Any] = step.params().get("columns", {})
    level = step.level()
    reader = step.reader()
    tables: dict[str, dict[str, Any]] = plan["tables"]
    if level == 0:
        if plan["mode"] == "single":
            step.queue(1, "all")
            return
        shuffles = [
            json.dumps([name, e.path])
            for name, t in sorted(tables.items())
            if t["role"] == "shuffle"
            for e in _table_files(name, t["format"], None)
        ]
        if shuffles:
            step.queue(1, *shuffles)
        step.queue(2, *(str(p) for p in range(plan["partitions"])))
        step.queue(3, "final")
        return
    con = _connect()
    if plan["mode"] == "single":
        read = 0
        for name, t in tables.items():
            paths, n = _fetch(reader, _table_files(name, t["format"], None), step.scratch() / name)
            read += n
            _view(con, name, t["format"], paths, columns.get(name))
        _result(con, plan["sql"])
        step.counters(scan_bytes=read)
    elif level == 1:  # shuffle one file of a table by the join key
        name, path = json.loads(step.step_input())
        t = tables[name]
        paths, read = _fetch(reader, [reader.entry(path)], step.scratch() / "in")
        key = '"' + t["key"].replace('"', '""') + '"'
        n = plan["partitions"]
        out = []
        for p in range(n):
            target = step.scratch() / f"{name}-{p}.parquet"
            sql = f"SELECT * FROM {_scan(t['format'], paths)} WHERE hash({key}) % {n} = {p}"
            _copy_out(con, sql, target, "parquet")
            out.append((f"{name}.{part_name(p, 'parquet')}", target))
        fragment, written = _write(f"./shuffle-{step.number()}", out)
        step.intermediate(fragment)
        step.counters(scan_bytes=read, shuffle_bytes=written)
    elif level == 2:  # one partition
        p = int(step.step_input())
        scanned = broadcast = shuffled = 0
        for name, t in tables.items():
            into = step.scratch() / name
            if t["role"] == "partitioned":
                paths, n = _fetch(reader, _table_files(name, t["format"], p), into)
                scanned += n
                _view(con, name, t["format"], paths, columns.get(name))
            elif t["role"] == "broadcast":
                paths, n = _fetch(reader, _table_files(name, t["format"], None), into)
                broadcast += n
                _view(con, name, t["format"], paths, columns.get(name))
            else:
                wanted = f"{name}.{part_name(p, 'parquet')}"
                paths = []
                for _, frag in step.intermediates(1):
                    sub = CollectionReader(step.warehouse().store, frag)
                    entries = [e for path, e in sub.files.items() if path.endswith("/" + wanted)]
                    got, n = _fetch(sub, entries, into / str(len(paths)))
                    paths += got
                    shuffled += n
                _view(con, name, "parquet", paths, columns.get(name))
        target = step.scratch() / f"partial-{p:05d}.parquet"
        _copy_out(con, plan["partial"], target, "parquet")
        fragment, written = _write(".", [(target.name, target)])
        step.intermediate(fragment)
        step.counters(
            scan_bytes=scanned,
            broadcast_bytes=broadcast,
            shuffle_bytes=shuffled,
            partial_bytes=written,
        )
    else:  # the final merge
        partials: list[str] = []
        moved = 0
        for number, frag in sorted(step.intermediates(2), key=lambda x: x[0]):
            sub = CollectionReader(step.warehouse().store, frag)
            got, n = _fetch(sub, sub.files.values(), step.scratch() / f"p{number}")
            partials += got
            moved += n
        con.execute(f"CREATE VIEW partials AS SELECT * FROM {_scan('parquet', partials)}")
        _result(con, plan["final"])
        step.counters(partial_bytes_merged=moved)
