"""`wh query` and `wh table create` with bad input, and shapes beyond TPC-H:
one `Error:` line with the documented exit code, nothing read outside the
query's tables, and the rows DuckDB gives over the same files by every path
(in the client, a job of one step, a distributed job)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import Runner

CSV = "id,k,g,n\n1,1,a,10\n2,2,b,\n3,1,a,30\n4,,,5\n5,3,b,7\n6,2,c,100\n7,3,,\n8,1,c,2\n"


def _made_once(root: Path, *commands: tuple[str, ...]) -> Path:
    """A warehouse under ``root`` holding ``src`` (t.csv) and what ``commands`` make."""
    home = root / "wh-home"
    src = root / "src"
    src.mkdir()
    (src / "t.csv").write_text(CSV)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("WH_HOME", str(home))
        env.setenv("WH_USER", "alice")
        env.setenv("XDG_CACHE_HOME", str(root / "cache"))
        run = Runner()
        run("put", str(src), "--name", "src")
        for command in commands:
            run(*command)
    return home


T = ("table", "create", "t", "--from", "src/t.csv", "--partition-by", "k", "--partitions", "2")
U = ("table", "create", "u", "--from", "src/t.csv", "--partition-by", "g", "--partitions=3")


# Made once a module and copied for each test (a warehouse's home holds no
# path of its own): making the tables was most of a short test's time.
@pytest.fixture(scope="module")
def small_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _made_once(tmp_path_factory.mktemp("small"), T)


@pytest.fixture(scope="module")
def shapes_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _made_once(tmp_path_factory.mktemp("shapes"), T, U)


@pytest.fixture
def small(run: Runner, home: Path, small_home: Path) -> Runner:
    """Table ``t`` (8 rows, NULLs in keys and values) in 2 partitions on ``k``."""
    shutil.copytree(small_home, home)
    return run


@pytest.fixture
def shapes(run: Runner, home: Path, shapes_home: Path) -> Runner:
    """``t`` as in ``small``, and ``u``: its rows in 3 partitions on ``g``."""
    shutil.copytree(shapes_home, home)
    return run


def one_error(result: object) -> str:
    err: str = result.stderr  # type: ignore[attr-defined]
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    assert result.stdout == "", result.stdout  # type: ignore[attr-defined]
    return err


def test_a_query_reads_no_file_but_its_tables(small: Runner) -> None:
    """Table functions are refused at submission; a query job submitted by
    hand with SQL that reads a file fails in its step: DuckDB there may read
    only the job's own files."""
    run = small
    for sql in (
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT count(*) FROM t, read_text('/etc/hostname')",
        "SELECT * FROM t WHERE g IN (SELECT * FROM glob('/etc/*'))",
    ):
        err = one_error(run("query", sql, code=2))
        assert "only tables named in the catalog can be read" in err, err
    out = json.loads(
        run("query", "--json", "--plan", "one-step", "SELECT count(*) AS n FROM t").stdout
    )
    shown = json.loads(run("job", "show", str(out["job"]), "--json").stdout)
    plan = {
        "mode": "single",
        "sql": "SELECT * FROM read_text('/etc/hostname')",
        "tables": {"t": {"role": "all", "format": "parquet"}},
    }
    args = ["--input", shown["input_pdh"], "--param", f"plan={json.dumps(plan)}"]
    job = run("job", "submit", "builtin:query", *args, "--attempts", "1", "--wait", code=1)
    number = job.stdout.split()[1].rstrip(":")
    assert "file system operations are disabled" in run("job", "logs", number).stdout


def duckdb_rows(tmp_path: Path, sql: str) -> list[list[object]]:
    """What DuckDB alone returns over the source CSV (as JSON would carry it)."""
    import duckdb

    source = tmp_path / "duckdb" / "t.csv"
    source.parent.mkdir(exist_ok=True)
    source.write_text(CSV)
    with duckdb.connect() as con:
        for name in ("t", "u"):  # u: the same rows, partitioned otherwise
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_csv('{source}')")
        return json.loads(json.dumps([list(r) for r in con.execute(sql).fetchall()]))


# Where a query runs: in the client (no job), a job of one step, a distributed job.
PATHS = ("client", "one-step", "distributed")


def both_plans(run: Runner, tmp_path: Path, sql: str) -> None:
    """The rows of every path are DuckDB's, exactly, types included."""
    want = duckdb_rows(tmp_path, sql)
    ordered = "ORDER BY" in sql
    names = []
    for how in PATHS:
        out = json.loads(run("query", "--json", "--plan", how, sql).stdout)
        names.append(out["columns"])
        got = out["rows"]
        if not ordered:
            got, want = sorted(got, key=repr), sorted(want, key=repr)
        assert [[(type(v), v) for v in r] for r in got] == [
            [(type(v), v) for v in r] for r in want
        ], (how, sql, got, want)
    assert names[0] == names[1] == names[2], (sql, names)  # as one step names them: count_star()


def test_sums_and_counts_of_integers_stay_integers(small: Runner, tmp_path: Path) -> None:
    """sum() of integers is HUGEINT, which Parquet cannot hold: it was written
    as DOUBLE, so results came back as floats and big sums rounded."""
    for sql in (
        "SELECT g, sum(n) AS s, count(*) AS c, count(n) AS cn FROM t GROUP BY g ORDER BY g",
        "SELECT sum(id) + 9007199254740993 AS big FROM t",
        "SELECT count(*) AS c, sum(n) AS s FROM t WHERE id < 0",
        "SELECT g, sum(n), sum(n) FROM t GROUP BY g",  # two columns of one name
    ):
        both_plans(small, tmp_path, sql)
    # A result named and queried again keeps its integers.
    small(
        "query", "--name", "sums", "SELECT g, sum(id) + 9007199254740993 AS big FROM t GROUP BY g"
    )
    out = json.loads(small("query", "--json", "SELECT max(big) AS m FROM sums").stdout)
    assert out["rows"] == [[9007199254740993 + 14]]  # group c: 6 + 8


SHAPES = (
    # OFFSET: each partition kept its own first rows after skipping OFFSET.
    "SELECT id, n FROM t ORDER BY id LIMIT 3 OFFSET 2",
    "SELECT g, count(*) AS c FROM t GROUP BY g ORDER BY c DESC, g LIMIT 2 OFFSET 1",
    # GROUP BY an output name, a position, ALL; FILTER; ORDER BY a qualified column.
    "SELECT g AS x, count(*) AS c FROM t GROUP BY x ORDER BY x",
    "SELECT g, count(*) AS c FROM t GROUP BY 1 ORDER BY 1",
    "SELECT g, count(*) AS c FROM t GROUP BY ALL ORDER BY g",
    "SELECT sum(n) FILTER (WHERE id > 2) AS s, avg(n) FILTER (WHERE id > 2) AS a FROM t",
    "SELECT g, count(*) FILTER (WHERE n > 5) AS c FROM t GROUP BY g ORDER BY g",
    "SELECT t.id, u.g FROM t JOIN u ON t.id = u.id WHERE t.id < 6 ORDER BY t.id",
    # Columns in another case (DuckDB's identifiers are not case-sensitive).
    "SELECT G, count(*) AS c FROM t GROUP BY g ORDER BY 1",
    'SELECT t.ID, u."G" FROM t JOIN u ON t.ID = u.Id WHERE t.id < 4 ORDER BY 1',
    # And the usual shapes: NULLs in keys and values, AVG, strings, joins.
    "SELECT g, count(*) AS c, sum(n) AS s FROM t GROUP BY g HAVING count(*) > 1 ORDER BY g",
    "SELECT k, avg(n) AS a, min(g) AS lo, max(g) AS hi FROM t GROUP BY k ORDER BY k",
    "SELECT DISTINCT g FROM t ORDER BY g",
    "SELECT count(DISTINCT g) AS c FROM t",
    "SELECT a.id, b.id AS other FROM t a JOIN t b ON a.k = b.k WHERE a.id < b.id ORDER BY 1, 2",
    "SELECT id FROM t WHERE k IN (SELECT k FROM u WHERE g = 'a') ORDER BY id",
    "SELECT id, row_number() OVER (PARTITION BY g ORDER BY id) AS r FROM t ORDER BY id",
    "WITH s AS (SELECT g, sum(n) AS s FROM t GROUP BY g) SELECT * FROM s ORDER BY g",
)


@pytest.mark.parametrize("sql", SHAPES)
def test_shapes_return_duckdbs_rows(shapes: Runner, tmp_path: Path, sql: str) -> None:
    both_plans(shapes, tmp_path, sql)


def test_bad_sql_is_one_line_and_changes_nothing(small: Runner) -> None:
    """Huge, deeply nested, several or non-SELECT statements: one `Error:`
    line, exit 2, and no job or collection made (a plan over 128 KiB could
    not even start its steps: it travels in their environment)."""
    run = small
    before = run("job", "ls").stdout
    collections = run("collection", "ls").stdout
    cases = {
        "SELECT " + "+".join(["1"] * 20_000) + " AS x FROM t": "over 32768 characters",
        "SELECT " + "(" * 2000 + "1" + ")" * 2000 + " AS x FROM t": "nested too deeply",
        "EXPLAIN SELECT * FROM t": "only a SELECT",  # sqlglot warned on stderr too
        "LOAD httpfs": "only a SELECT",
        "SELECT 1 FROM t; SELECT 2 FROM t": "exactly one statement",
        "": "exactly one statement",
        # An unterminated string was a traceback; sqlglot's reprs were shown.
        "SELECT * FROM t WHERE g = 'abc": "missing ' (opened at line 1, column 27)",
        'SELECT "id FROM t': 'missing " (opened at line 1, column 8)',
        "SELECT * FROM t WHERE": "missing for Where at line 1, column 21",
        "SELECT FROM": "Expected table name but got the end at line 1, column 11",
    }
    for sql, says in cases.items():
        err = one_error(run("query", sql, code=2))
        assert says in err, (sql[:40], err)
    assert run("job", "ls").stdout == before
    assert run("collection", "ls").stdout == collections


def test_sql_duckdb_refuses_is_refused_at_submission(small: Runner) -> None:
    """An unknown function, a bad GROUP BY, an expression too deep for
    DuckDB: refused before any job (they failed a job three times, saying
    only its exit status)."""
    run = small
    before = run("job", "ls").stdout
    for sql, code, says in (
        ("SELECT nosuchfn(id) FROM t", 4, "nosuchfn does not exist"),
        ("SELECT id FROM t GROUP BY g", 2, "must appear in the GROUP BY"),
        ("SELECT x.id FROM t", 4, 'table "x" not found'),
        ("SELECT " + "+".join(["1"] * 1100) + " AS x FROM t", 2, "expression depth"),
    ):
        err = one_error(run("query", sql, code=code))
        assert says in err, (sql[:40], err)
    assert run("job", "ls").stdout == before


def test_table_create_bad_input(run: Runner, tmp_path: Path) -> None:
    """No such file, --partitions 0, a ragged CSV row, a partition column that
    does not exist: one `Error:` line each, naming the reason, and no name set."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "t.csv").write_text(CSV)
    (src / "ragged.csv").write_text("id,x\n1,2\n3,4,5\n6\n")
    run("put", str(src), "--name", "src")
    before = run("job", "ls").stdout
    err = one_error(run("table", "create", "x", "--from", "src/nosuch.csv", code=4))
    assert "no .parquet or .csv file under nosuch.csv" in err
    for n in ("0", "-1", "100000"):
        args = ["--partition-by", "k", "--partitions", n]
        err = one_error(run("table", "create", "x", "--from", "src/t.csv", *args, code=2))
        assert "partitions must be 1 to 1024" in err, (n, err)
    # An empty --partition-by made N partitions each holding every row.
    args = ["--partition-by", "", "--partitions", "4"]
    err = one_error(run("table", "create", "x", "--from", "src/t.csv", *args, code=2))
    assert "--partition-by needs a column name" in err
    assert run("job", "ls").stdout == before  # refused before any job
    # Read as one column of whole lines, the ragged file made a wrong table.
    err = one_error(run("table", "create", "x", "--from", "src/ragged.csv", code=1))
    assert "ragged.csv" in err and "failed 3 times" in err, err
    args = ["--partition-by", "nocol", "--partitions", "2"]
    err = one_error(run("table", "create", "x", "--from", "src/t.csv", *args, code=1))
    assert "no column 'nocol' (there are: id, k, g, n)" in err, err
    one_error(run("table", "show", "x", code=4))  # no name set
    # A query that fails on the data says DuckDB's reason, not only the exit status.
    run("table", "create", "t", "--from", "src/t.csv")
    for how in ("client", "one-step"):
        sql = "SELECT CAST(g AS INTEGER) AS i FROM t"
        err = one_error(run("query", "--plan", how, sql, code=1))
        assert "Could not convert string 'a' to INT32" in err, (how, err)
    shown = run("table", "show", "t").stdout.splitlines()
    assert (
        shown[1]
        == "format: parquet, partitions: 1, partitioned by: -, bytes: "
        + (shown[1].rsplit(" ", 1)[-1])
    )


@pytest.mark.parametrize("how", ("client", "one-step"))
def test_every_value_prints(small: Runner, how: str) -> None:
    """--json is well-formed whatever a query returns (NaN, INTERVAL, UUID,
    nested values failed with a traceback or wrote bare NaN); text is one row
    a line (a tab or newline in a value is escaped)."""
    sql = (
        "SELECT 'nan'::DOUBLE AS x, '-inf'::DOUBLE AS y, INTERVAL 3 DAY IS NOT NULL AS i, "
        "[1.5::DECIMAL(4,2)] AS l, {'a': DATE '2020-01-01'} AS s, "
        "'00000000-0000-0000-0000-000000000001'::UUID AS u, INTERVAL 3 DAY AS d FROM t LIMIT 1"
    )
    text = small("query", "--json", "--plan", how, sql).stdout

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    rows = json.loads(text, parse_constant=refuse)["rows"]
    assert rows[0][:6] == [
        "NaN",
        "-Infinity",
        True,
        ["1.50"],
        {"a": "2020-01-01"},
        "00000000-0000-0000-0000-000000000001",
    ]
    assert isinstance(rows[0][6], str)
    sql = "SELECT 'a' || chr(9) || 'b' AS x, 'c' || chr(10) || 'd' AS y, NULL AS z FROM t LIMIT 1"
    assert small("query", "--plan", how, sql).stdout == "x\ty\tz\na\\tb\tc\\nd\t-\n"


def test_odd_names(small: Runner, tmp_path: Path) -> None:
    """A table named as a step's own temporary table, or with a dash; a
    column with a space or a quote, partitioned on."""
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "o.csv").write_text('my col,"we""ird",k\n1,a,1\n2,b,2\n3,c,1\n')
    small("put", str(tmp_path / "odd"), "--name", "odd")
    for name, by in (("wh_partial", "k"), ("my-t", "my col")):
        args = ["--partition-by", by, "--partitions", "2"]
        small("table", "create", name, "--from", "odd/o.csv", *args)
        for how in PATHS:
            sql = (
                f'SELECT k, count(*) AS c, min("we""ird") AS w FROM "{name}" GROUP BY k ORDER BY k'
            )
            out = json.loads(small("query", "--json", "--plan", how, sql).stdout)
            assert out["rows"] == [[1, 2, "a"], [2, 1, "b"]], (name, how, out)


def test_a_bad_name_is_refused_before_any_job(small: Runner) -> None:
    before = small("job", "ls").stdout
    err = one_error(small("query", "--name", "bad name!", "SELECT 1 AS x FROM t", code=2))
    assert "bad name" in err
    err = one_error(small("table", "create", "bad name!", "--from", "src/t.csv", code=2))
    assert "bad name" in err
    # With --no-wait or --explain the name was never set, and nothing said so.
    for flag in ("--no-wait", "--explain"):
        err = one_error(small("query", flag, "--name", "r", "SELECT 1 AS x FROM t", code=2))
        assert "--name needs the result" in err
    assert small("job", "ls").stdout == before


@pytest.mark.parametrize("how", ("client", "one-step"))
def test_json_rows_up_to_the_limit_given(small: Runner, how: str) -> None:
    """--json --limit 2 printed 10,000 rows (the limit could only raise it)."""
    sql = "SELECT id FROM t ORDER BY id"
    out = json.loads(small("query", "--json", "--plan", how, "--limit", "2", sql).stdout)
    assert out["rows"] == [[1], [2]] and out["total_rows"] == 8
    out = json.loads(small("query", "--json", "--plan", how, sql).stdout)
    assert len(out["rows"]) == 8
    assert small("query", "--plan", how, sql).stdout.count("\n") == 9


def test_a_csv_table_reads_with_its_own_types(small: Runner, tmp_path: Path) -> None:
    """A CSV table's partitions were typed by guessing each file: a partition
    whose n is all NULL made n text, and sum(n) failed the partition step."""
    small("table", "create", "u", "--from", "src/t.csv", "--format", "csv", "--partition-by=id")
    for sql in (
        "SELECT g, sum(n) AS s, count(*) AS c, max(k) AS m FROM u GROUP BY g ORDER BY g",
        "SELECT id, k, g, n FROM u ORDER BY id",
    ):
        both_plans(small, tmp_path, sql)


def test_a_join_key_in_another_case_is_still_the_partition_key(small: Runner) -> None:
    # --partition-by K is column k (it failed the job: "no column 'K'").
    small("table", "create", "u", "--from", "src/t.csv", "--partition-by", "K", "--partitions=2")
    assert "partitioned by: k," in small("table", "show", "u").stdout
    sql = "SELECT count(*) AS c FROM t JOIN u ON t.K = u.k"
    explained = small("query", "--explain", "--plan", "distributed", sql).stdout
    assert "t: partitioned on k" in explained and "u: partitioned on k" in explained, explained


def test_a_crafted_table_description_runs_no_sql(run: Runner, tmp_path: Path) -> None:
    """The column types of a `_table.json` go into SQL (an empty table's view);
    a collection anyone may put with a type that ends the statement is refused."""
    crafted = tmp_path / "crafted"
    crafted.mkdir()
    pwned = tmp_path / "pwned.csv"
    kind = f"INTEGER AS x WHERE false; COPY (SELECT 1) TO '{pwned}'; SELECT NULL::INTEGER"
    columns = [["x", kind]]
    (crafted / "_table.json").write_text(
        json.dumps({"format": "parquet", "partitions": 1, "hash": "h", "columns": columns})
    )
    run("put", str(crafted), "--name", "crafted")
    err = one_error(run("query", "SELECT * FROM crafted", code=2))
    assert "bad column 'x'" in err
    assert not pwned.exists()


def test_a_hand_made_table_job_cannot_write_outside_its_scratch(
    small: Runner, tmp_path: Path
) -> None:
    """builtin:table takes its params from whoever submits the job: a format
    that ended the SQL string wrote any file (the table step was not sealed)."""
    pwned = tmp_path / "pwned.csv"
    fmt = f"parquet' (FORMAT parquet); COPY (SELECT 1) TO '{pwned}' (FORMAT csv); --"
    args = ["--input", "src", "--param", f"format={json.dumps(fmt)}", "--param", "partitions=1"]
    job = small("job", "submit", "builtin:table", *args, "--attempts", "1", "--wait", code=1)
    number = job.stdout.split()[1].rstrip(":")
    assert "format must be one of" in small("job", "logs", number).stdout
    assert not pwned.exists()


def test_a_query_whose_answer_changes_runs_again(small: Runner) -> None:
    """A query's job is reused like any other, unless its answer may differ
    from run to run (random(), now(), a sample without a seed) or
    --no-reuse is given: then each run runs its steps."""

    def reused(*args: str) -> bool:
        job = json.loads(run("query", "--json", "--plan", "one-step", *args).stdout)["job"]
        shown = json.loads(run("job", "show", str(job), "--json").stdout)
        return shown["reused_from"] is not None

    run = small
    same = "SELECT count(*) AS n FROM t"
    reused(same)
    assert reused(same), "an identical query is answered by the job that ran"
    assert not reused("--no-reuse", same)
    for sql in (
        "SELECT random() AS r FROM t",
        "SELECT now() AS at, count(*) AS n FROM t",
        "SELECT count(*) AS n FROM t USING SAMPLE 50%",
        "SELECT k, uuid() AS u FROM t",
        "SELECT count(*) AS n FROM t USING SAMPLE 50% (bernoulli)",
    ):
        reused(sql)
        assert not reused(sql), sql
    seeded = "SELECT count(*) AS n FROM t USING SAMPLE 50% (bernoulli, 7)"
    reused(seeded)
    assert reused(seeded)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT uuidv4() AS u FROM t",
        "SELECT uuidv7() AS u FROM t",
        "SELECT localtimestamp AS at FROM t",
        "SELECT localtime AS at FROM t",
        "SELECT current_localtimestamp() AS at FROM t",
        "SELECT txid_current() AS x FROM t",
        "SELECT current_transaction_id() AS x FROM t",
        "SELECT current_query_id() AS x FROM t",
        "SELECT current_connection_id() AS x FROM t",
        "SELECT count(*) AS n FROM t USING SAMPLE 50% (bernoulli)",
        "SELECT count(*) AS n FROM t USING SAMPLE 10 PERCENT (system)",
    ],
)
def test_every_call_duckdb_answers_anew_each_run_is_volatile(sql: str) -> None:
    """What DuckDB's own list calls volatile (or a time it reads at the start
    of the query), and a sample with no seed, is never answered from an
    earlier run."""
    from warehouse.query.parsing import parse, volatile

    assert volatile(parse(sql)) is not None


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) AS n FROM t USING SAMPLE 10% (bernoulli, 0)",
        "SELECT count(*) AS n FROM t TABLESAMPLE 10% REPEATABLE (0)",
        "SELECT count(*) AS n FROM t USING SAMPLE 10 ROWS REPEATABLE (7)",
    ],
)
def test_a_sample_with_a_seed_is_not_volatile(sql: str) -> None:
    """A seed, 0 too, makes a sample the same each run: it may be reused."""
    from warehouse.query.parsing import parse, volatile

    assert volatile(parse(sql)) is None


def test_the_columns_a_plan_lists_change_no_row(small: Runner, tmp_path: Path) -> None:
    """The plan lists the columns each table's query reads (a step checks
    those chunks together): stars, a table's row as a column, quoted names in
    another case, a subquery give DuckDB's rows by both plans; a job whose
    plan lists none (as plans made before) gives the same result."""
    small("table", "create", "u", "--from", "src/t.csv", "--partition-by", "g", "--partitions=3")
    for sql in (
        "SELECT t.*, u.g FROM t JOIN u ON t.id = u.id ORDER BY t.id",
        "SELECT t FROM t ORDER BY id",
        'SELECT "ID", "G" FROM t WHERE "N" > 5 ORDER BY 1',
        "SELECT count(*) AS c FROM t",
        "SELECT s FROM (SELECT g AS s, n FROM t WHERE id > 2) AS q ORDER BY s NULLS FIRST",
    ):
        both_plans(small, tmp_path, sql)
    sql = "SELECT g, sum(n) AS s FROM t WHERE id > 1 GROUP BY g ORDER BY g"
    listed = json.loads(small("query", "--explain", "--json", sql).stdout)
    assert listed["tables"]["t"]["columns"] == ["g", "id", "n"]
    out = json.loads(small("query", "--json", "--plan", "one-step", sql).stdout)
    shown = json.loads(small("job", "show", str(out["job"]), "--json").stdout)
    old = json.loads(json.dumps(shown["params"]))
    del old["plan"]["tables"]["t"]["columns"]
    args = ["--input", shown["input_pdh"], "--param", f"plan={json.dumps(old['plan'])}"]
    args += ["--param", f"columns={json.dumps(old['columns'])}"]
    job = small("job", "submit", "builtin:query", *args, "--attempts", "1", "--wait")
    number = job.stdout.split()[1].rstrip(":")
    again = json.loads(small("job", "show", number, "--json").stdout)
    assert again["state"] == "complete" and again["output_pdh"] == out["pdh"], again
