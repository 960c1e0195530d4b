"""`wh table` and `wh query`: TPC-H Q1, Q3, Q6 and Q12 over tables of 4 partitions
return what DuckDB returns over the same files; co-partitioned joins move no data."""

from __future__ import annotations

import dataclasses
import decimal
import json
import math
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from cluster import controller
from conftest import Runner
from disk_helpers import rot
from tpch.queries import QUERIES
from warehouse.embedded import EmbeddedWarehouse
from warehouse.query.planner import STEP_BYTES, explain, plan
from warehouse.query.tables import TableMeta

TABLES = ("lineitem", "orders", "customer")


@pytest.fixture(scope="session")
def tpch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TPC-H at scale factor 0.01, generated here (tpchgen-cli, from PyPI)."""
    out = tmp_path_factory.mktemp("tpch")
    cli = shutil.which("tpchgen-cli", path=str(Path(sys.executable).parent))
    assert cli, "tpchgen-cli is not installed (pip install -e '.[dev]')"
    subprocess.run(
        [cli, "parquet", "-s", "0.01", f"--tables={','.join(TABLES)}", f"--output-dir={out}"],
        check=True,
        capture_output=True,
    )
    return out


def oracle(tpch: Path, sql: str) -> list[list[object]]:
    con = duckdb.connect()
    for t in TABLES:
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{tpch / t}.parquet')")
    return [list(r) for r in con.execute(sql).fetchall()]


def same(got: list[list[object]], want: list[list[object]]) -> bool:
    if len(got) != len(want):
        return False
    for g_row, w_row in zip(got, want, strict=True):
        for g, w in zip(g_row, w_row, strict=True):
            if isinstance(w, float):
                if not math.isclose(float(g), w, rel_tol=1e-12):  # type: ignore[arg-type]
                    return False
            elif isinstance(w, decimal.Decimal):
                if decimal.Decimal(str(g)) != w:
                    return False
            elif hasattr(w, "isoformat"):
                if g != w.isoformat():
                    return False
            elif g != w:
                return False
    return True


@pytest.fixture
def tables(run, tpch: Path) -> Iterator[None]:  # type: ignore[no-untyped-def]
    run("put", str(tpch), "--name", "tpch")
    for name, key in (("lineitem", "l_orderkey"), ("orders", "o_orderkey")):
        run(
            "table",
            "create",
            name,
            "--from",
            f"tpch/{name}.parquet",
            "--partition-by",
            key,
            "--partitions",
            "4",
        )
    run("table", "create", "customer", "--from", "tpch/customer.parquet")
    yield


def query(run, sql: str, how: str = "distributed") -> tuple[list[list[object]], dict[str, int]]:  # type: ignore[no-untyped-def]
    """The rows, and the job's counters (none in the client: no job there)."""
    out = json.loads(run("query", "--json", "--plan", how, sql).stdout)
    if out["job"] is None:  # answered in the client
        assert how in ("client", "auto") and out["pdh"] is None, (how, out)
        return out["rows"], {}
    shown = json.loads(run("job", "show", str(out["job"]), "--json").stdout)
    return out["rows"], shown["counters"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tpch_queries_equal_duckdb(run, tpch: Path, tables: None) -> None:  # type: ignore[no-untyped-def]
    listed = run("table", "ls").stdout
    lineitem = next(r.split("\t") for r in listed.splitlines() if r.startswith("lineitem\t"))
    assert lineitem[2:5] == ["parquet", "4", "l_orderkey"], lineitem
    for label, sql in QUERIES.items():
        rows, counters = query(run, sql)
        want = oracle(tpch, sql)
        assert want, label
        assert same(rows, want), (label, rows[:3], want[:3])
        assert counters["shuffle_bytes"] == 0, label  # co-partitioned: nothing moved
        assert counters["scan_bytes"] > 0, label
        # Small tables: by default the client runs the query, with no job.
        rows, counters = query(run, sql, how="auto")
        assert same(rows, want), (label, rows[:3], want[:3])
        assert counters == {}, label  # no job
        # One step runs it, reading in place.
        rows, counters = query(run, sql, how="one-step")
        assert same(rows, want), (label, rows[:3], want[:3])
        assert set(counters) == {"scan_bytes", "copied_bytes"}, label
        assert counters["scan_bytes"] > 0, label
        assert counters["copied_bytes"] == 0, label  # every partition read in its block
    explained = run("query", "--explain", "--plan", "distributed", QUERIES["q3"]).stdout
    assert "customer: broadcast" in explained
    assert "orders: partitioned on o_orderkey" in explained

    # The same join over unpartitioned tables shuffles both sides by the key.
    run("table", "create", "orders1", "--from", "tpch/orders.parquet")
    run("table", "create", "lineitem1", "--from", "tpch/lineitem.parquet")
    sql = QUERIES["q12"].replace("FROM orders, lineitem", "FROM orders1, lineitem1")
    rows, counters = query(run, sql)
    assert same(rows, oracle(tpch, QUERIES["q12"]))
    assert counters["shuffle_bytes"] > 0
    explained = run("query", "--explain", "--plan", "distributed", sql).stdout
    assert "shuffled by o_orderkey" in explained
    assert "one step over every partition" in run("query", "--explain", sql).stdout


def test_bad_queries_name_the_problem(run, tpch: Path) -> None:  # type: ignore[no-untyped-def]
    run("put", str(tpch), "--name", "tpch")
    run("table", "create", "customer", "--from", "tpch/customer.parquet")
    err = run("query", "SELECT nope FROM customer", code=4).stderr
    assert err == "Error: query: unknown column 'nope'\n"
    err = run("query", "SELECT 1 FROM nosuch", code=4).stderr
    assert "unknown table 'nosuch'" in err
    err = run("query", "SELECT * FRM customer", code=2).stderr
    assert "line 1, column" in err and err.count("\n") == 1
    err = run("query", "DELETE FROM customer", code=2).stderr
    assert "only a SELECT" in err
    out = json.loads(run("query", "--json", "SELECT count(*) AS n FROM customer").stdout)
    assert out["rows"] == [[1500]]
    # The line on standard error counts its rows in English.
    one = run("query", "SELECT count(*) AS n FROM customer")
    assert one.stdout == "n\n1500\n"
    assert one.stderr == "(1 row; answered in the client, no job)\n", one.stderr
    two = run("query", "--plan", "one-step", "SELECT c_custkey FROM customer ORDER BY 1 LIMIT 2")
    assert two.stderr.startswith("(2 rows; job "), two.stderr
    for how, made in (("client", "answered in the client"), ("one-step", "job ")):
        cut = run("query", "--plan", how, "--limit", "3", "SELECT c_custkey FROM customer")
        assert cut.stdout.count("\n") == 4
        assert cut.stderr.startswith(f"(1500 rows, the first 3 shown (--limit); {made}"), cut


def test_plans_without_running() -> None:
    cols = [("o_orderkey", "BIGINT"), ("o_custkey", "BIGINT")]
    lcols = [("l_orderkey", "BIGINT"), ("l_quantity", "DECIMAL(15,2)")]
    orders = TableMeta("parquet", "o_orderkey", 4, "h", cols, size=10)
    lineitem = TableMeta("parquet", "l_orderkey", 4, "h", lcols, size=100)
    sql = (
        "SELECT o_custkey, avg(l_quantity) FROM orders JOIN lineitem "
        "ON o_orderkey = l_orderkey GROUP BY o_custkey"
    )
    p = plan(sql, {"orders": orders, "lineitem": lineitem})
    assert p["mode"] == "single" and "110 bytes in all" in p["why"]  # small: one step
    p = plan(sql, {"orders": orders, "lineitem": lineitem}, "distributed")
    assert p["mode"] == "partitioned"
    assert {t["role"] for t in p["tables"].values()} == {"partitioned"}
    assert p["groups"] == [[0, 2], [1, 3]]  # tiny partitions: two steps of two
    big = dataclasses.replace(lineitem, size=8 * STEP_BYTES)
    p = plan(sql, {"orders": orders, "lineitem": big})
    assert p["mode"] == "partitioned" and p["groups"] == [[0], [1], [2], [3]]
    other = TableMeta("parquet", "l_orderkey", 8, "h", lcols, size=100)
    p = plan(sql, {"orders": orders, "lineitem": other}, "distributed")
    assert {n: t["role"] for n, t in p["tables"].items()} == {
        "lineitem": "partitioned",
        "orders": "broadcast",
    }
    p = plan("SELECT count(DISTINCT o_custkey) FROM orders", {"orders": orders})
    assert p["mode"] == "single"
    p = plan(
        "SELECT o_custkey FROM orders ORDER BY o_custkey LIMIT 3", {"orders": orders}, "distributed"
    )
    assert p["mode"] == "partitioned" and "LIMIT 3" in p["partial"] and "LIMIT 3" in p["final"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_query_through_a_controller(  # type: ignore[no-untyped-def]
    tmp_path: Path, tpch: Path, keep_servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`wh table create` and `wh query` with WH_URL set: the steps run on the
    controller's executor, read and write through its keep servers, and the
    rows are DuckDB's."""
    with controller(tmp_path / "controller.db", keep_servers) as ctl:
        ctl.state.start_jobs(ctl.url, tmp_path / "controller-jobs", "local", cpus=2)
        env = {"WH_URL": ctl.url, "WH_TOKEN": ctl.user("alice"), "WH_HOME": str(tmp_path / "h")}
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        run = Runner()
        run("put", str(tpch / "orders.parquet"), str(tpch / "lineitem.parquet"), "--name", "src")
        for name, key in (("lineitem", "l_orderkey"), ("orders", "o_orderkey")):
            source = f"src/{name}.parquet"
            run("table", "create", name, "--from", source, "--partition-by", key, "--partitions=2")
        listed = [line.split("\t") for line in run("table", "ls").stdout.splitlines()]
        assert ["orders", "parquet", "2", "o_orderkey"] in [r[:1] + r[2:5] for r in listed]
        rows, _ = query(run, QUERIES["q12"], how="client")  # blocks from the keep servers
        assert same(rows, oracle(tpch, QUERIES["q12"])), rows
        for how in ("distributed", "one-step"):
            rows, counters = query(run, QUERIES["q12"], how=how)
            assert same(rows, oracle(tpch, QUERIES["q12"])), (how, rows)
            assert counters["scan_bytes"] > 0
            assert counters.get("shuffle_bytes", 0) == 0
            # The blocks are on keep servers: partitions are copied to scratch.
            assert counters["copied_bytes"] >= counters["scan_bytes"]
        out = json.loads(run("query", "--json", "--plan", "distributed", QUERIES["q6"]).stdout)
        assert same(out["rows"], oracle(tpch, QUERIES["q6"]))
        shown = run("job", "show", str(out["job"])).stdout
        assert "partial_bytes" in shown and "scan_bytes" in shown
        assert "level 2" in run("query", "--explain", "--plan", "distributed", QUERIES["q6"]).stdout


def chunk_block(home: Path, table: str, part: str, column: str) -> Path:
    """The stored copy of the block that holds ``column``'s chunk in the
    first row group of a table's partition (each chunk is in blocks of its own)."""
    with EmbeddedWarehouse(home) as wh:
        reader = wh.reader(wh.get_name(table).pdh)
        entry = reader.entry(part)
        copy = home.parent / "partition.parquet"
        copy.write_bytes(reader.read_file(part))
    assert len(entry.pieces) > 16  # head, a chunk per column per row group, tail
    with duckdb.connect() as con:  # not the module's shared connection
        (found,) = con.execute(
            "SELECT dictionary_page_offset, data_page_offset FROM parquet_metadata(?) "
            "WHERE path_in_schema = ? AND row_group_id = 0",
            [str(copy), column],
        ).fetchall()
    start = found[0] or found[1]
    pos = 0
    for piece in entry.pieces:
        if pos == start:  # the chunk begins its block
            return home / "blocks" / piece.locator.md5[:3] / piece.locator.md5
        pos += piece.length
    raise AssertionError(f"no block begins at {start}")


def _lineitem_in_two(run, tpch: Path) -> None:  # type: ignore[no-untyped-def]
    """TPC-H's lineitem as a table of 2 partitions on the order key."""
    run("put", str(tpch), "--name", "tpch")
    args = ["--partition-by", "l_orderkey", "--partitions", "2"]
    run("table", "create", "lineitem", "--from", "tpch/lineitem.parquet", *args)


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["client", "one-step"])
def test_a_damaged_chunk_a_query_reads_fails_it(  # type: ignore[no-untyped-def]
    run, home: Path, tpch: Path, how: str
) -> None:
    """A bad block of a column Q6 reads: the check finds it (the copy is
    moved aside) and the query fails, naming the file; no rows come back.
    In the client the error is the check's (exit 5); a job's names the job."""
    _lineitem_in_two(run, tpch)
    block = chunk_block(home, "lineitem", "part-00000.parquet", "l_extendedprice")
    rot(block)
    result = run("query", "--json", "--plan", how, QUERIES["q6"], code=5 if how == "client" else 1)
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    if how == "client":
        assert "it holds data of: lineitem/part-00000.parquet" in result.stderr, result.stderr
    else:
        assert result.stderr.startswith("Error: job "), result.stderr
        job = result.stderr.split()[2].rstrip(":")
        # The last attempt's log: the first moved the copy aside as corrupt.
        assert "it holds data of: lineitem/part-00000.parquet" in run("job", "logs", job).stdout
    assert not block.exists()  # moved aside by the step's check
    assert list(block.parent.glob(block.name + ".corrupt.*"))
    # The only copy gone, a query job over the table is refused at once.
    result = run("query", "--json", "--plan", "distributed", QUERIES["q6"], code=4)
    assert result.stdout == "" and "is not stored" in result.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_damaged_chunk_a_query_does_not_read_leaves_it_whole(  # type: ignore[no-untyped-def]
    run, home: Path, tpch: Path
) -> None:
    """A bad block of a column Q6 never reads (l_comment): Q6 still returns
    DuckDB's rows, by every path, as only the blocks it reads are checked; a
    query that reads the column finds the damage."""
    _lineitem_in_two(run, tpch)
    block = chunk_block(home, "lineitem", "part-00000.parquet", "l_comment")
    rot(block)
    want = oracle(tpch, QUERIES["q6"])
    for how in ("client", "one-step", "distributed"):
        rows, counters = query(run, QUERIES["q6"], how)
        assert same(rows, want), (how, rows, want)
        assert counters.get("copied_bytes", 0) == 0, how  # read in its blocks
    assert block.exists()  # never read, so never checked
    sql = "SELECT count(*) FROM lineitem WHERE l_comment LIKE '%fluffily%'"
    result = run("query", "--json", "--plan", "one-step", sql, code=1)
    assert result.stdout == ""
    job = result.stderr.split()[2].rstrip(":")
    assert "it holds data of: lineitem/part-00000.parquet" in run("job", "logs", job).stdout
    assert not block.exists()  # read, checked, moved aside
    assert list(block.parent.glob(block.name + ".corrupt.*"))


LINEITEM = [
    "l_orderkey",
    "l_partkey",
    "l_suppkey",
    "l_linenumber",
    "l_quantity",
    "l_extendedprice",
    "l_discount",
    "l_tax",
    "l_returnflag",
    "l_linestatus",
    "l_shipdate",
    "l_commitdate",
    "l_receiptdate",
    "l_shipinstruct",
    "l_shipmode",
    "l_comment",
]
ORDERS = [
    "o_orderkey",
    "o_custkey",
    "o_orderstatus",
    "o_totalprice",
    "o_orderdate",
    "o_orderpriority",
    "o_clerk",
    "o_shippriority",
    "o_comment",
]
CUSTOMER = [
    "c_custkey",
    "c_name",
    "c_address",
    "c_nationkey",
    "c_phone",
    "c_acctbal",
    "c_mktsegment",
    "c_comment",
]


def _metas(**tables: list[str]) -> dict[str, TableMeta]:
    return {
        name: TableMeta("parquet", None, 1, "h", [(c, "BIGINT") for c in cols], size=100)
        for name, cols in tables.items()
    }


def _read(sql: str, how: str = "auto", **tables: list[str]) -> dict[str, list[str]]:
    p = plan(sql, _metas(**tables), how)
    return {name: t["columns"] for name, t in p["tables"].items()}


def test_the_columns_each_tpch_query_reads() -> None:
    """The plan lists the columns of each table a query reads: for TPC-H Q1,
    Q3, Q6 and Q12, those a person reads off the SQL, by both plans."""
    tpch = {"lineitem": LINEITEM, "orders": ORDERS, "customer": CUSTOMER}
    want = {
        "q1": {
            "lineitem": [
                "l_discount",
                "l_extendedprice",
                "l_linestatus",
                "l_quantity",
                "l_returnflag",
                "l_shipdate",
                "l_tax",
            ]
        },
        "q3": {
            "customer": ["c_custkey", "c_mktsegment"],
            "orders": ["o_custkey", "o_orderdate", "o_orderkey", "o_shippriority"],
            "lineitem": ["l_discount", "l_extendedprice", "l_orderkey", "l_shipdate"],
        },
        "q6": {"lineitem": ["l_discount", "l_extendedprice", "l_quantity", "l_shipdate"]},
        "q12": {
            "orders": ["o_orderkey", "o_orderpriority"],
            "lineitem": [
                "l_commitdate",
                "l_orderkey",
                "l_receiptdate",
                "l_shipdate",
                "l_shipmode",
            ],
        },
    }
    for label, sql in QUERIES.items():
        used = {n: cols for n, cols in tpch.items() if n in want[label]}
        for how in ("one-step", "distributed"):
            assert _read(sql, how, **used) == want[label], (label, how)
    q3 = plan(QUERIES["q3"], _metas(**tpch), "distributed")
    assert "orders columns read: o_custkey, o_orderdate, o_orderkey, o_shippriority" in (
        explain(q3).splitlines()
    )


def test_the_columns_read_through_aliases_subqueries_and_stars() -> None:
    t = ["id", "k", "g", "n"]
    u = ["id", "k", "g", "n", "t"]  # a column named like the other table
    # An alias of a table and of a column; a column named as its table's alias.
    assert _read("SELECT a.k AS id FROM t AS a WHERE a.n > 1", t=t) == {"t": ["k", "n"]}
    assert _read("SELECT x.g, count(*) FROM t x GROUP BY 1", t=t) == {"t": ["g"]}
    # A subquery and a CTE read what they name, whatever the outer query keeps.
    sub = "SELECT s FROM (SELECT g AS s, n FROM t WHERE id > 2) AS q"
    assert _read(sub, t=t) == {"t": ["g", "id", "n"]}
    cte = "WITH q AS (SELECT k, sum(n) AS s FROM t GROUP BY k) SELECT s FROM q ORDER BY k"
    assert _read(cte, t=t) == {"t": ["k", "n"]}
    # A CTE named like a table hides it; a correlated subquery names the outer table.
    hidden = "WITH u AS (SELECT id AS k FROM t) SELECT k FROM u"
    assert _read(hidden, t=t, u=u) == {"t": ["id"]}
    correlated = "SELECT id FROM t WHERE EXISTS (SELECT 1 FROM u WHERE u.k = t.k AND u.n > t.n)"
    assert _read(correlated, t=t, u=u) == {"t": ["id", "k", "n"], "u": ["k", "n"]}
    # * and t.* read every column of what they cover; count(*) reads none.
    assert _read("SELECT * FROM t", t=t) == {"t": sorted(t)}
    assert _read("SELECT t.*, u.g FROM t JOIN u ON t.id = u.id", t=t, u=u) == {
        "t": sorted(t),
        "u": ["g", "id"],
    }
    assert _read("SELECT * EXCLUDE (n) FROM t", t=t) == {"t": ["g", "id", "k"]}
    assert _read("SELECT count(*) FROM t", t=t) == {"t": []}
    assert _read("SELECT count(*) FILTER (WHERE n > 1) FROM t", t=t) == {"t": ["n"]}
    # u's column t, not table t's row; table t's name as a column: its whole row.
    assert _read("SELECT u.t FROM u", u=u) == {"u": ["t"]}
    assert _read("SELECT t FROM u", u=u) == {"u": ["t"]}
    assert _read("SELECT t FROM t", t=t) == {"t": sorted(t)}
    # Quoted identifiers, in any case (DuckDB's names are not case-sensitive).
    odd = ["Order Id", "Qty", "note"]
    quoted = 'SELECT "order id", "QTY" FROM t WHERE "Note" IS NULL'
    assert _read(quoted, t=odd) == {"t": ["Order Id", "Qty", "note"]}
    assert _read('SELECT "Qty" FROM "t"', t=odd) == {"t": ["Qty"]}


def test_a_plan_lists_no_columns_where_tables_list_none() -> None:
    """A table whose ``_table.json`` lists no columns, or SQL too long a chain
    to resolve quickly: nothing is listed (the step then guesses from the
    plan's words, as for plans made before)."""
    bare = {"t": TableMeta("parquet", None, 1, "h", [], size=10)}
    p = plan("SELECT a FROM t", bare)
    assert "columns" not in p["tables"]["t"]
    assert "columns read" not in explain(p)
    # Nor where resolving would walk too far (a chain of thousands of terms).
    sql = "SELECT " + " + ".join(["id"] * 3000) + " FROM t"
    p = plan(sql, _metas(t=["id", "k"]))
    assert p["mode"] == "single" and "columns" not in p["tables"]["t"]
    assert _read("SELECT " + " + ".join(["id"] * 30) + " FROM t", t=["id", "k"]) == {"t": ["id"]}
