"""What the steps of ``builtin:table`` and ``builtin:query`` run (DuckDB inside a step).

A Parquet partition written by ``builtin:table`` on a local block store (the
embedded warehouse) is stored with each column chunk in blocks of its own
(and the file's head and tail in theirs). Such a file is read by DuckDB
through a filesystem that checks each block when DuckDB first touches it
(``blockfs``): only the column chunks a query reads are checked. A file that is one whole block of
a local store is read by DuckDB where it lies, after its MD5 is checked
over the same open file; any other file is copied into the step's scratch
directory through the verifying reader. Bytes are counted either way, and
results go back as blocks.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import mmap
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warehouse import step
from warehouse.blocks import MAX_BLOCK_SIZE
from warehouse.blocks.store import BlockStore, LocalBlockStore
from warehouse.collection.reader import CollectionReader
from warehouse.manifest import FileEntry, Segment, Stream
from warehouse.native.md5 import md5_many
from warehouse.query.tables import (
    FORMATS,
    META_FILE,
    TableMeta,
    hash_id,
    part_name,
    source_files,
)

if TYPE_CHECKING:
    from warehouse.query.blockfs import BlockFiles

__all__ = ["query_step", "table_step"]

if "warehouse.jobs.forkserver" in sys.modules:
    # A fork server preloading the steps: the steps it forks then find the
    # block filesystem (and fsspec, 20 to 60 ms) imported. A step started
    # the plain way imports it only if it reads a many-block file.
    from warehouse.query import blockfs  # noqa: F401


def _connect(threads: int = 1) -> Any:
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
    if _lazy:
        _lazy[0].register(con)
    return con


def _seal(con: Any, paths: Iterable[str]) -> None:
    """From here on the connection reads only ``paths`` (the step's inputs),
    the step's scratch directory and its many-block files, loads no
    extension, and its settings stay: the user's SQL can read or write no
    other file (``read_csv('/etc/passwd')``, ``read_text``, ``glob``)."""

    def quoted(p: str) -> str:
        return "'" + p.replace("'", "''") + "'"

    if _lazy:
        _lazy[0].register(con)
    files = ", ".join(quoted(p) for p in paths if not p.startswith(_BLOCKS))
    con.execute(f"SET allowed_paths = [{files}]")
    con.execute(f"SET allowed_directories = [{quoted(str(step.scratch()) + '/')}, '{_BLOCKS}']")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


_BLOCKS = "whblocks://"  # blockfs.PROTOCOL (not imported: it brings fsspec)


def _load_duckdb() -> None:
    """Import DuckDB (half a second or more) and make the step's first
    connection (about 10 CPU-ms, the GIL released) on a thread; ``_connect``
    then waits for it. MD5 releases the GIL, so both go on at once."""
    loader = ThreadPoolExecutor(1, thread_name_prefix="wh-duckdb")
    _early.append(loader.submit(_new_connection))
    loader.submit(importlib.import_module, "warehouse.query.blockfs")
    loader.shutdown(wait=False)


def _new_connection() -> Any:
    import duckdb

    return duckdb.connect()


_early: list[Future[Any]] = []  # the step's first connection, being made


def _cores() -> int:
    return max(1, len(os.sched_getaffinity(0)))


# Block files held open while DuckDB reads them through /proc/self/fd: the
# bytes read are those of the inode whose MD5 was checked.
_held: list[int] = []
_copied = [0]  # bytes this step copied to scratch rather than read in place
_in_place: dict[str, str | None] = {}  # block MD5 -> where DuckDB reads it (None: copy)
_lazy: list[BlockFiles] = []  # the step's many-block files, once one is read
# Table -> whether the query names each of its columns (which column chunks
# of a partition to check together), where the query's params list them.
_named: dict[str, list[bool]] = {}


def _block_files(store: LocalBlockStore) -> BlockFiles:
    if not _lazy:
        from warehouse.query.blockfs import BlockFiles

        _lazy.append(BlockFiles(store.volume))
    return _lazy[0]


def _lazy_path(store: BlockStore, entry: FileEntry) -> str | None:
    """Where DuckDB reads a many-block Parquet file of a local store, each
    block checked as it is first touched; None for any other file."""
    if not isinstance(store, LocalBlockStore) or not entry.path.endswith(".parquet"):
        return None
    if len(entry.pieces) < 2:
        return None
    from warehouse.query.blockfs import lazy_layout

    layout = lazy_layout(entry)
    if layout is None:
        return None
    return _block_files(store).add(entry.path, layout, _named.get(entry.path.split("/", 1)[0]))


def _lazy_failed() -> None:
    """Raise the first failed check of a block DuckDB read, if any."""
    if _lazy and _lazy[0].error is not None:
        raise _lazy[0].error


def _one_block(store: BlockStore, entry: FileEntry) -> str | None:
    """The MD5 of the block a file of a local store is, whole; None otherwise."""
    if not isinstance(store, LocalBlockStore) or len(entry.pieces) != 1:
        return None
    piece = entry.pieces[0]
    if piece.offset != 0 or piece.length != piece.locator.size or not piece.length:
        return None
    return piece.locator.md5


def _open_block(store: LocalBlockStore, md5: str, size: int) -> int | None:
    """A descriptor of the block file (held for the step), or None if it is
    not here whole (the file is then copied: the reader says why)."""
    try:
        fd = os.open(store.volume.path_for(md5), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        whole = os.fstat(fd).st_size == size
    except OSError:
        whole = False
    if not whole:
        os.close(fd)
        return None
    _held.append(fd)
    return fd


def _verify(blocks: Sequence[tuple[int, str, int]]) -> list[bool]:
    """Whether each open block (descriptor, MD5, size) hashes to its MD5,
    over the very inode DuckDB reads; all in one call of ``md5_many``."""
    maps: list[mmap.mmap | None] = []
    try:
        for fd, _, size in blocks:
            try:
                maps.append(mmap.mmap(fd, size, prot=mmap.PROT_READ))
            except OSError:
                maps.append(None)
        sums = iter(md5_many([m for m in maps if m is not None]))
        return [
            m is not None and next(sums).hex() == md5
            for m, (_, md5, _) in zip(maps, blocks, strict=True)
        ]
    finally:
        for m in maps:
            if m is not None:
                m.close()


def _shares(blocks: Sequence[tuple[int, str, int]], n: int) -> list[list[tuple[int, str, int]]]:
    """``blocks`` dealt into at most ``n`` shares of about equal bytes."""
    shares: list[list[tuple[int, str, int]]] = [[] for _ in range(min(n, len(blocks)))]
    loads = [0] * len(shares)
    for block in sorted(blocks, key=lambda b: -b[2]):
        k = loads.index(min(loads))
        shares[k].append(block)
        loads[k] += block[2]
    return shares


def _whole_blocks(store: BlockStore, entries: Iterable[FileEntry]) -> list[tuple[int, str, int]]:
    """The whole blocks of ``entries`` not checked yet, opened (descriptor,
    MD5, size); ``_in_place`` says ``None`` for any not here whole (copied)."""
    todo: dict[str, int] = {}
    for entry in entries:
        md5 = _one_block(store, entry)
        if md5 is not None and md5 not in _in_place:
            todo[md5] = entry.size
    if not todo:
        return []
    assert isinstance(store, LocalBlockStore)
    opened = []
    for md5, size in todo.items():
        fd = _open_block(store, md5, size)
        _in_place[md5] = None if fd is None else f"/proc/self/fd/{fd}"
        if fd is not None:
            opened.append((fd, md5, size))
    return opened


def _check_later(store: BlockStore, entries: Iterable[FileEntry]) -> Callable[[], list[str]]:
    """Open the whole blocks of ``entries`` for DuckDB now and check them on
    threads meanwhile; the function returned waits for the checks and gives
    the MD5s that failed (those are then copied, like any other file)."""
    opened = _whole_blocks(store, entries)
    if not opened:
        return list
    shares = _shares(opened, _cores())
    pool = ThreadPoolExecutor(len(shares), thread_name_prefix="wh-md5")
    checks = [(share, pool.submit(_verify, share)) for share in shares]
    pool.shutdown(wait=False)

    def failed() -> list[str]:
        bad = [
            md5
            for share, check in checks
            for (_, md5, _), ok in zip(share, check.result(), strict=True)
            if not ok
        ]
        for md5 in bad:
            _in_place[md5] = None
        return bad

    return failed


def _check(store: BlockStore, entries: Iterable[FileEntry]) -> None:
    """Check every whole block of ``entries`` not checked yet, all at once: a
    share of them per core, each share in one ``md5_many`` call (no GIL held);
    one that fails is copied instead (the reader reports the corrupt copy and
    moves it aside)."""
    opened = _whole_blocks(store, entries)
    if not opened:
        return
    shares = _shares(opened, _cores())
    with ThreadPoolExecutor(len(shares)) as pool:
        for share, oks in zip(shares, pool.map(_verify, shares), strict=True):
            for (_, md5, _), ok in zip(share, oks, strict=True):
                if not ok:
                    _in_place[md5] = None


def _fetch(
    reader: CollectionReader, entries: Iterable[FileEntry], into: Path
) -> tuple[list[str], int]:
    """Paths DuckDB reads the files at (in place or copied), and their bytes."""
    entries = list(entries)
    _check(reader.store, entries)
    paths, total = [], 0
    for n, entry in enumerate(entries):
        total += entry.size
        md5 = _one_block(reader.store, entry)
        found = None if md5 is None else _in_place.get(md5)
        if found is None and md5 is None:
            found = _lazy_path(reader.store, entry)
        if found is not None:
            paths.append(found)
            continue
        into.mkdir(parents=True, exist_ok=True)
        target = into / f"{n:05d}-{entry.path.rsplit('/', 1)[-1]}"
        with open(target, "wb") as f:
            for _, chunk in reader.iter_chunks([entry]):
                f.write(chunk)
        _copied[0] += entry.size
        paths.append(str(target))
    return paths, total


def _scan(fmt: str, paths: Sequence[str], columns: Any = None) -> str:
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


def _copy_out(con: Any, sql: str, target: Path, fmt: str, *, table: bool = False) -> None:
    options = "FORMAT csv, HEADER true" if fmt == "csv" else "FORMAT parquet"
    if table and fmt == "parquet":
        # A table's partitions with Parquet 2's encodings (delta, byte stream
        # split): about a fifth fewer bytes for a query to read and check, and
        # quicker to decode (docs/benchmarks.md).
        options += ", PARQUET_VERSION V2"
    con.execute(f"COPY ({sql}) TO '{str(target).replace(chr(39), chr(39) * 2)}' ({options})")


def _write(stream: str, files: Sequence[tuple[str, Path]]) -> tuple[str, int]:
    out = step.StreamWriter(stream)
    total = 0
    for name, path in files:
        data = path.read_bytes()
        total += len(data)
        out.add_file(name, [data])
    return out.finish(), total


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
        _lazy_failed()  # a source block that failed its check, in our words
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
    _load_duckdb()  # on a thread, while the source is read here
    p = int(step.step_input())
    src_fmt, entries = source_files(step.input_manifest(), params.get("path", ""))
    paths, read = _fetch(step.reader(), entries, step.scratch() / "src")
    con = _connect()
    _seal(con, paths)  # the job's params come from whoever submitted it
    source = _scan(src_fmt, paths)
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
    _copy_out(con, sql, target, fmt, table=True)
    # The partition alone in its block(s): a query step can read it in place,
    # checking only the column chunks it reads. (Blocks on keep servers are
    # copied whole by a query step: there, many small blocks would only cost
    # a request each.)
    local = isinstance(step.warehouse().store, LocalBlockStore)
    if fmt == "parquet" and local and target.stat().st_size > 4:
        fragment, written = _write_cut(".", part_name(p, fmt), target, _chunk_cuts(con, target))
    else:
        fragment, written = _write(".", [(part_name(p, fmt), target)])
    step.output(fragment)
    if p == 0:
        described = con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()
        meta = TableMeta(fmt, by, n, hash_id(), [(r[0], r[1]) for r in described])
        (step.scratch() / META_FILE).write_text(meta.to_json())
        step.output(_write(".", [(META_FILE, step.scratch() / META_FILE)])[0])
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


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _exact(con: Any, sql: str) -> tuple[str, list[tuple[str, str]]]:
    """``sql`` with its HUGEINT columns as DECIMAL(38,0), and its columns
    (name, type). Parquet has no 128-bit integer: DuckDB writes HUGEINT (the
    type of ``sum`` over integers) as DOUBLE, so sums and counts would come
    back as floats, rounded beyond 2^53. A reader casts them back (``_view``,
    ``catalog.read_rows``): ``_table.json`` names them HUGEINT."""
    # Over a subquery: columns of one name are told apart (s, s_1), as in the file.
    found = con.execute(f"DESCRIBE SELECT * FROM ({sql})").fetchall()
    described = [(r[0], r[1]) for r in found]
    huge = [n for n, t in described if t == "HUGEINT"]
    if not huge:
        return sql, described
    cast = ", ".join(f"CAST({_ident(n)} AS DECIMAL(38,0)) AS {_ident(n)}" for n in huge)
    return f"SELECT * REPLACE ({cast}) FROM ({sql})", described


def _compute(con: Any, sql: str) -> Path:
    """The result as a table in scratch (its Parquet file and ``_table.json``)."""
    target = step.scratch() / part_name(0, "parquet")
    stored, described = _exact(con, sql)
    _copy_out(con, stored, target, "parquet")
    meta = TableMeta("parquet", None, 1, hash_id(), described)
    (step.scratch() / META_FILE).write_text(meta.to_json())
    return target


def _report(target: Path) -> None:
    fragment, _ = _write(".", [(META_FILE, step.scratch() / META_FILE), (target.name, target)])
    step.output(fragment)


def _result(con: Any, sql: str) -> None:
    _report(_compute(con, sql))


def _view(con: Any, name: str, fmt: str, paths: Sequence[str], columns: Any = None) -> None:
    quoted = '"' + name.replace('"', '""') + '"'
    if _lazy:
        _lazy[0].register(con)
    if paths:
        # HUGEINT columns are stored as DECIMAL(38,0) (``_exact``): read back as they were.
        huge = [c for c, t in columns or [] if t == "HUGEINT"]
        cast = ", ".join(f"CAST({_ident(c)} AS HUGEINT) AS {_ident(c)}" for c in huge)
        star = f"* REPLACE ({cast})" if huge else "*"
        con.execute(f"CREATE VIEW {quoted} AS SELECT {star} FROM {_scan(fmt, paths, columns)}")
    else:  # no rows here: an empty view with the table's columns
        cols = ", ".join(f"NULL::{t} AS {_ident(c)}" for c, t in columns) or "NULL AS none"
        con.execute(f"CREATE VIEW {quoted} AS SELECT {cols} WHERE false")


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
            paths, n = _fetch(reader, _table_files(name, t["format"], p), into)
            moved["scan_bytes"] += n
            found[name] = (t["format"], paths)
        elif t["role"] == "broadcast":  # read once per step, whatever its partitions
            if name not in _broadcast:
                _broadcast[name] = _fetch(reader, _table_files(name, t["format"], None), into)
                moved["broadcast_bytes"] += _broadcast[name][1]
            found[name] = (t["format"], _broadcast[name][0])
        else:
            wanted = f"{name}.{part_name(p, 'parquet')}"
            paths = []
            for _, frag in step.intermediates(1):
                sub = CollectionReader(step.warehouse().store, frag)
                entries = [e for path, e in sub.files.items() if path.endswith("/" + wanted)]
                got, n = _fetch(sub, entries, into / str(len(paths)))
                paths += got
                moved["shuffle_bytes"] += n
            found[name] = ("parquet", paths)
    return found, moved


def _drop_views(con: Any, tables: dict[str, dict[str, Any]]) -> None:
    for name in tables:
        con.execute('DROP VIEW IF EXISTS "' + name.replace('"', '""') + '"')


def _name_columns(plan: dict[str, Any], columns: dict[str, Any]) -> None:
    """Which columns of each table the query reads (``_named``): as the plan
    lists them; for a plan without the list (made before it was added, or
    over SQL the planner could not resolve), a guess from the words of the
    plan. Either way it decides only which blocks are checked together."""
    words: set[str] | None = None
    for name, cols in columns.items():
        if not cols:
            continue
        listed = plan.get("tables", {}).get(name, {}).get("columns")
        if isinstance(listed, list):
            read = {str(c).casefold() for c in listed}
        else:
            if words is None:
                # Any word of the plan may name a column: checks taken along
                # that DuckDB then does not need (or not taken along).
                text = json.dumps(plan, ensure_ascii=False).casefold()
                words = set(re.findall(r"\w+", text))
            read = words
        _named[name] = [str(c).casefold() in read for c, _ in cols]


def query_step() -> None:
    try:
        _query_step()
    except Exception:
        _lazy_failed()  # DuckDB's own error for a read that failed its check says less
        raise


def _query_step() -> None:
    plan: dict[str, Any] = step.params()["plan"]
    columns: dict[str, Any] = step.params().get("columns", {})
    _name_columns(plan, columns)
    level = step.level()
    if level > 0 or plan["mode"] == "single":
        _load_duckdb()  # on a thread, while the blocks are read and checked here
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
        failed = _check_later(reader.store, entries)
        for attempt in range(2):
            paths, read = _fetch(reader, entries, step.scratch() / f"in{attempt}")
            con = _connect(_cores() if level == 0 else 1)
            _seal(con, paths)  # before the views too: their columns come from the input
            start = 0
            for name, t in tables.items():
                mine = paths[start : start + len(wanted[name])]
                start += len(wanted[name])
                _view(con, name, t["format"], mine, columns.get(name))
            try:
                target, error = _compute(con, plan["sql"]), None
            except Exception as e:  # bad bytes may fail the query: checked below
                error = e
            finally:
                con.close()
            _lazy_failed()  # a many-block file's bad block: no other copy here
            if attempt or not failed():
                if error is not None:
                    raise error
                break
        _report(target)
        step.counters(scan_bytes=read, copied_bytes=_copied[0])
        return
    if level == 1:  # shuffle one file of a table by the join key
        name, path = json.loads(step.step_input())
        t = tables[name]
        paths, read = _fetch(reader, [reader.entry(path)], step.scratch() / "in")
        con = _connect()
        _seal(con, paths)  # the plan comes from whoever submitted the job
        key = '"' + t["key"].replace('"', '""') + '"'
        n = int(plan["partitions"])
        out = []
        for p in range(n):
            target = step.scratch() / f"{name}-{p}.parquet"
            scan = _scan(t["format"], paths, columns.get(name))
            sql = f"SELECT * FROM {scan} WHERE hash({key}) % {n} = {p}"
            _copy_out(con, sql, target, "parquet")
            out.append((f"{name}.{part_name(p, 'parquet')}", target))
        _lazy_failed()
        fragment, written = _write(f"./shuffle-{step.number()}", out)
        step.intermediate(fragment)
        step.counters(scan_bytes=read, shuffle_bytes=written)
    elif level == 2:  # a group of partitions: one partial per partition, written once
        group = [int(p) for p in step.step_input().split(",")]
        moved = {"scan_bytes": 0, "broadcast_bytes": 0, "shuffle_bytes": 0}
        _check(  # the group's partitions checked at once, as DuckDB loads
            reader.store,
            [
                e
                for name, t in tables.items()
                if t["role"] != "shuffle"
                for p in (group if t["role"] == "partitioned" else [None])
                for e in _table_files(name, t["format"], p)
            ],
        )
        con = _connect()
        # Every partition's files first: the connection is then sealed to them.
        where = []
        for p in group:
            found, counted = _partition_paths(tables, p)
            where.append(found)
            for kind, n in counted.items():
                moved[kind] += n
        _seal(con, [path for found in where for _, paths in found.values() for path in paths])
        for i, found in enumerate(where):
            for name, (fmt, paths) in found.items():
                _view(con, name, fmt, paths, columns.get(name))
            verb = f"CREATE TEMP TABLE {_PARTIAL} AS" if i == 0 else f"INSERT INTO {_PARTIAL}"
            con.execute(f"{verb} {plan['partial']}")
            _drop_views(con, tables)
        target = step.scratch() / f"partial-{group[0]:05d}.parquet"
        _copy_out(con, _exact(con, f"SELECT * FROM {_PARTIAL}")[0], target, "parquet")
        _lazy_failed()
        fragment, written = _write(".", [(target.name, target)])
        step.intermediate(fragment)
        step.counters(**moved, partial_bytes=written, copied_bytes=_copied[0])
    else:  # the final merge
        partials: list[str] = []
        merged = 0
        for number, frag in sorted(step.intermediates(2), key=lambda x: x[0]):
            sub = CollectionReader(step.warehouse().store, frag)
            got, n = _fetch(sub, sub.files.values(), step.scratch() / f"p{number}")
            partials += got
            merged += n
        con = _connect()
        _seal(con, partials)
        # Partial sums of integers were stored as DECIMAL(38,0) (``_exact``): HUGEINT again.
        scan = _scan("parquet", partials)
        kinds = con.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()
        huge = [_ident(r[0]) for r in kinds if r[1] == "DECIMAL(38,0)"]
        cast = ", ".join(f"CAST({c} AS HUGEINT) AS {c}" for c in huge)
        star = f"* REPLACE ({cast})" if huge else "*"
        con.execute(f"CREATE VIEW partials AS SELECT {star} FROM {scan}")
        _result(con, plan["final"])
        step.counters(partial_bytes_merged=merged)
