"""`wh sql`: read-only SQL over the catalog, on SQLite and PostgreSQL, embedded and remote."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from cluster import KeepPool, controller
from warehouse import catalog, catalogsql
from warehouse.catalog.auth import add_user
from warehouse.catalogsql import MAX_QUERY, run_readonly
from warehouse.cli import cli
from warehouse.errors import UsageError

PDH = "d41d8cd98f00b204e9800998ecf8427e+0"

REFUSED = [
    "DELETE FROM names",
    "SELECT 1; DELETE FROM names",
    "COMMIT; DELETE FROM names",
    "UPDATE names SET version = 99",
    "DROP TABLE names",
    "CREATE TABLE t (x int)",
    "UPDATE sqlite_master SET sql = 'x'",
]


def wh_sql(*args: str, code: int = 0, env: dict[str, str] | None = None) -> tuple[str, str]:
    result = CliRunner().invoke(cli, ["sql", *args], env=env, catch_exceptions=False)
    assert result.exit_code == code, (args, result.output, result.stderr)
    return result.stdout, result.stderr


def names_of(engine: sa.Engine) -> list[tuple[str, str, int]]:
    return [(r.name, r.pdh, r.version) for r in catalog.list_names(engine)]


def test_writes_are_refused_and_change_nothing(catalog_engine: sa.Engine, catalog_url: str) -> None:
    catalog.add_collection(catalog_engine, PDH, "", 0, 0, "alice")
    catalog.set_name(catalog_engine, "run42", PDH, expect=None, user="alice")
    before = names_of(catalog_engine)
    for query in REFUSED:
        with pytest.raises(UsageError):
            run_readonly(catalog_engine, query)
    _, err = wh_sql("--db", catalog_url, "DELETE FROM names", code=2)
    assert err.startswith("Error: sql: ") and err.count("\n") == 1, err
    assert names_of(catalog_engine) == before

    out, _ = wh_sql("--db", catalog_url, "--json", "SELECT name, pdh, version FROM names")
    assert json.loads(out) == {
        "columns": ["name", "pdh", "version"],
        "rows": [["run42", PDH, 1]],
        "truncated": False,
    }
    out, _ = wh_sql("--db", catalog_url, "SELECT name, owner, 'a\tb' AS odd FROM names")
    assert out == "name\towner\todd\nrun42\talice\ta\\tb\n"  # piped: TSV
    _, err = wh_sql("--db", catalog_url, "SELECT nope FROM names", code=2)
    assert "nope" in err
    _, err = wh_sql("--db", catalog_url, "SELEC 1", code=2)
    assert "SELEC" in err


def test_booleans_and_nulls_are_the_same_on_both_backends(catalog_engine: sa.Engine) -> None:
    add_user(catalog_engine, "root", admin=True)
    add_user(catalog_engine, "bob")
    catalog.add_collection(catalog_engine, PDH, "", 0, 0, "bob")
    catalog.set_name(catalog_engine, "run1", PDH, expect=None, user="bob")
    result = run_readonly(catalog_engine, "SELECT name, admin FROM users ORDER BY name")
    # SQLite stores 0 and 1, so PostgreSQL's booleans come as those too (not true/false).
    assert json.dumps(result.rows) == '[["bob", 0], ["root", 1]]'
    result = run_readonly(catalog_engine, "SELECT name FROM users WHERE admin")
    assert result.rows == [["root"]]
    query = "SELECT version, old_pdh, new_pdh FROM name_history ORDER BY id"
    assert run_readonly(catalog_engine, query).rows == [[1, None, PDH]]
    query = "SELECT created_at FROM users WHERE name = 'bob'"
    assert isinstance(run_readonly(catalog_engine, query).rows[0][0], float)  # Unix seconds


def test_rows_past_the_limit_are_never_made(catalog_engine: sa.Engine) -> None:
    # Row 100000 fails: a backend that made the whole result before cutting it
    # to the limit would fail the call (and hold every row in memory first).
    sqlite = catalog_engine.dialect.name == "sqlite"
    sign = "json_extract(CASE x WHEN 100000 THEN '{' ELSE '-1' END, '$')"
    if not sqlite:
        sign = "abs(x - 100000) / (x - 100000)"
    query = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000) "
    result = run_readonly(catalog_engine, query + f"SELECT x, {sign} AS sign FROM c", limit=10)
    assert result.truncated and result.rows == [[x, -1] for x in range(1, 11)]
    with pytest.raises(UsageError, match=r"only a single SELECT|syntax error"):
        run_readonly(catalog_engine, "PRAGMA user_version" if sqlite else "SHOW server_version")
    if not sqlite:  # the position is in the query as given
        with pytest.raises(UsageError, match=r"near \"names\" \(at character 14\)"):
            run_readonly(catalog_engine, "SELECT 1 FRM names")


def test_a_result_too_big_to_hold_is_refused(catalog_engine: sa.Engine) -> None:
    sqlite = catalog_engine.dialect.name == "sqlite"
    big = "zeroblob(100000000)" if sqlite else "repeat('x', 100000000)"
    with pytest.raises(UsageError, match=r"too big|over 64 MiB"):
        run_readonly(catalog_engine, f"SELECT {big}")
    # Many values each small: the sum is bounded too.
    rows = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000) "
    text = "printf('%.*c', 100000, 'x')" if sqlite else "repeat('x', 100000)"
    with pytest.raises(UsageError, match=r"the result is over 64 MiB"):
        run_readonly(catalog_engine, rows + f"SELECT {text} FROM c")
    result = run_readonly(catalog_engine, rows + f"SELECT {text} FROM c", limit=100)
    assert result.truncated and len(result.rows) == 100  # under the bound: fine


def test_rows_are_counted_as_they_come_not_held_in_batches(
    catalog_engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound is on what the call holds: rows of 100 kB past a bound of
    1 MiB are refused after a dozen rows, not after a batch of a thousand
    (100 MB; with 64 MiB values, 64 GB) was made whole."""
    monkeypatch.setattr(catalogsql, "MAX_BYTES", 1 << 20)
    sqlite = catalog_engine.dialect.name == "sqlite"
    text = "printf('%.*c', 100000, 'x')" if sqlite else "repeat('x', 100000)"
    rows = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000) "
    tracemalloc.start()
    try:
        with pytest.raises(UsageError, match=r"the result is over 1 MiB"):
            run_readonly(catalog_engine, rows + f"SELECT {text} FROM c")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


def test_an_error_quoting_the_query_is_one_line(
    catalog_engine: sa.Engine, catalog_url: str
) -> None:
    """The database's words quote the query, newlines and all: they are
    written out, so the error is still one line (also through a controller,
    which sends the same message)."""
    for query in ('SELECT n."a\nb" FROM names n', 'SELECT 1 FROM "x\r\ny\x1b[2J"'):
        _, err = wh_sql("--db", catalog_url, query, code=2)
        assert err.startswith("Error: sql: ") and err.count("\n") == 1, err
        assert "\r" not in err and "\x1b" not in err, err
    with pytest.raises(UsageError, match=r"n\.a\\nb"):
        run_readonly(catalog_engine, 'SELECT n."a\nb" FROM names n')


@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)
def test_json_table_functions_work_on_sqlite(catalog_engine: sa.Engine) -> None:
    """docs/sql.md lists json_each among SQLite's: it failed with "vtable
    constructor failed" (the authorizer refused how SQLite declares it)."""
    query = 'SELECT key, value FROM json_each(\'{"a": 1, "b": 2}\') ORDER BY key'
    assert run_readonly(catalog_engine, query).rows == [["a", 1], ["b", 2]]
    query = "SELECT count(*) FROM json_tree('[1, [2, 3]]') WHERE type = 'integer'"
    assert run_readonly(catalog_engine, query).rows == [[3]]
    # What declaring a table-valued function is allowed to do is nothing more.
    with pytest.raises(UsageError, match=r"may not be modified|not authorized"):
        run_readonly(catalog_engine, "UPDATE sqlite_schema SET sql = 'x'")
    for pragma in ("pragma_table_info('names')", "pragma_database_list"):
        with pytest.raises(UsageError, match="not authorized"):
            run_readonly(catalog_engine, f"SELECT * FROM {pragma}")


def test_row_limit_is_kept(catalog_engine: sa.Engine) -> None:
    query = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 50) "
    result = run_readonly(catalog_engine, query + "SELECT x FROM c", limit=10)
    assert result.truncated and [r[0] for r in result.rows] == list(range(1, 11))


def test_embedded_catalog(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("a\n")
    pdh = run("put", str(tmp_path / "d"), "--name", "first").stdout.strip()
    out = run("sql", "--json", "SELECT name, pdh FROM names").stdout
    assert json.loads(out)["rows"] == [["first", pdh]]
    run("sql", "DELETE FROM names", code=2)
    assert run("name", "get", "first").stdout.strip() == pdh


def test_through_the_controller_admins_only(
    tmp_path: Path, catalog_url: str, keep_servers: KeepPool
) -> None:
    with controller(catalog_url, keep_servers) as ctl:
        catalog.add_collection(ctl.state.engine, PDH, "", 0, 0, "root")
        catalog.set_name(ctl.state.engine, "kept", PDH, expect=None, user="root")
        env = {"WH_URL": ctl.url, "WH_TOKEN": ctl.user("alice"), "WH_DB_URL": ""}
        _, err = wh_sql("SELECT name FROM names", code=6, env=env)
        assert "admin" in err
        env["WH_TOKEN"] = ctl.admin_token
        out, _ = wh_sql("--json", "SELECT name, admin FROM users ORDER BY name", env=env)
        assert [r[0] for r in json.loads(out)["rows"]] == ["alice", "root", "system"]
        for query in REFUSED:
            wh_sql(query, code=2, env=env)
        assert names_of(ctl.state.engine) == [("kept", PDH, 1)]
        # Too long, or empty: in the same words as on an embedded catalog.
        _, err = wh_sql("SELECT 1" + " " * MAX_QUERY, code=2, env=env)
        assert err == f"Error: sql: the query is over {MAX_QUERY} characters\n"
        _, err = wh_sql("  ", code=2, env=env)
        assert err == "Error: sql: the query is empty\n"
        # Infinity and NaN are no JSON: they come as null (as from a catalog file).
        sqlite = catalog_url.startswith("sqlite")
        odd = (
            "1e999, -1e999, NULL"
            if sqlite
            else "'Infinity'::float8, '-Infinity'::float8, 'NaN'::float8"
        )
        out, _ = wh_sql("--json", f"SELECT {odd}", env=env)
        assert json.loads(out)["rows"] == [[None, None, None]]


def test_a_missing_sqlite_file_is_not_made(tmp_path: Path) -> None:
    """`--db sqlite:///PATH` with no file there made an empty catalog and ran on it."""
    missing = tmp_path / "nosuch.db"
    _, err = wh_sql("--db", f"sqlite:///{missing}", "SELECT 1", code=4)
    assert err == f"Error: sql: no catalog database at {missing}\n"
    assert not missing.exists()


def test_a_database_that_cannot_be_reached_is_one_error_line() -> None:
    """PostgreSQL refusing the connection (nothing listening, a bad password)
    reached the terminal as psycopg's traceback."""
    _, err = wh_sql("--db", "postgresql+psycopg://x:y@127.0.0.1:1/none", "SELECT 1", code=1)
    assert err.startswith("Error: the catalog failed: ") and err.count("\n") == 1, err
    assert "127.0.0.1" in err


@pytest.mark.parametrize("catalog_url", ["postgresql"], indirect=True)
def test_no_server_file_is_read(catalog_engine: sa.Engine) -> None:
    """A read-only transaction does not stop a superuser's SELECT from reading
    the server's files: such a session runs the query as pg_read_all_data.
    (With a role that is not a superuser, as the tests' usually is, the
    server refuses by itself.) Neither function is on the allowed list, so
    the query is now refused before it reaches the server."""
    for query in ("SELECT pg_read_file('/etc/hostname')", "SELECT * FROM pg_ls_dir('.')"):
        with pytest.raises(UsageError, match=r"permission denied|is not allowed here"):
            run_readonly(catalog_engine, query)
    assert run_readonly(catalog_engine, "SELECT count(*) FROM names").rows == [[0]]


# Calls that reach beyond the query: signals to other sessions, locks, session
# settings, sleeping, other connections, large objects, notifications, files.
HARMFUL_PG = [
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity",
    "SELECT pg_catalog.pg_cancel_backend(pid) FROM pg_stat_activity",
    'SELECT "pg_terminate_backend"(pid) FROM pg_stat_activity',
    "SELECT * FROM pg_terminate_backend(pg_backend_pid())",
    "SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity",
    "SELECT pg_advisory_lock(1)",
    "SELECT set_config('statement_timeout', '0', false)",
    "SELECT set_config('role', current_user, true)",
    "SELECT pg_sleep(1000000)",
    "SELECT dblink('dbname=x', 'SELECT 1')",
    "SELECT lo_create(0)",
    "SELECT pg_notify('x', 'y')",
    "SELECT query_to_xml('SELECT pg_terminate_backend(1)', true, true, '')",
    "SELECT 1 WHERE 1 = ANY(SELECT pg_terminate_backend(pid) FROM pg_stat_activity)",
]
HARMFUL_SQLITE = [
    "SELECT load_extension('/tmp/x')",
    "SELECT fts3_tokenizer('simple')",
    "SELECT sqlite_compileoption_get(0)",
    "SELECT name FROM names WHERE load_extension('x') IS NULL",
    "SELECT (SELECT upper(load_extension('x')))",
]


def test_no_call_reaches_other_sessions(catalog_engine: sa.Engine, catalog_url: str) -> None:
    """On PostgreSQL ``wh sql`` ran as the catalog's role, and a read-only
    transaction does not stop its SELECT from terminating the controller's own
    sessions (``pg_terminate_backend``), taking advisory locks, lifting its own
    statement timeout or sleeping for ever. Calls outside an allowed list are
    refused before the query runs: nothing is killed, and the other session
    still works."""
    sqlite = catalog_engine.dialect.name == "sqlite"
    with catalog_engine.connect() as other:
        other.exec_driver_sql("SELECT 1")
        for query in HARMFUL_SQLITE if sqlite else HARMFUL_PG:
            with pytest.raises(UsageError, match=r"is not allowed here"):
                run_readonly(catalog_engine, query)
            _, err = wh_sql("--db", catalog_url, query, code=2)
            assert err.startswith("Error: sql: ") and err.count("\n") == 1, err
            assert "is not allowed here" in err, err
            # The other session is alive (a terminated one fails here).
            assert other.exec_driver_sql("SELECT 2").scalar() == 2
    # What a query over the catalog needs still runs.
    catalog.add_collection(catalog_engine, PDH, "", 0, 0, "alice")
    catalog.set_name(catalog_engine, "run42", PDH, expect=None, user="alice")
    when = "datetime(updated_at, 'unixepoch')" if sqlite else "to_timestamp(updated_at)"
    query = (
        f"SELECT lower(name), count(*), max(version), {when} IS NOT NULL, "
        "coalesce(NULL, length(pdh)), round(abs(-1.5)), substr(owner, 1, 2) "
        "FROM names GROUP BY name, pdh, owner, updated_at"
    )
    assert run_readonly(catalog_engine, query).rows == [["run42", 1, 1, 1, 34, 2, "al"]]


@pytest.mark.parametrize("catalog_url", ["postgresql"], indirect=True)
def test_a_query_sqlglot_cannot_read_is_refused_unrun(catalog_engine: sa.Engine) -> None:
    """What the function check cannot parse does not run, and PostgreSQL's own
    complaint is kept when it has one."""
    with pytest.raises(UsageError, match=r"near \"names\" \(at character 14\)"):
        run_readonly(catalog_engine, "SELECT 1 FRM names")
    # Valid for PostgreSQL, not for the parser that checks the calls.
    with pytest.raises(UsageError, match=r"cannot be checked"):
        run_readonly(catalog_engine, "SELECT COLLATION FOR ('a'::text)")


def test_through_the_controller_nothing_is_killed(
    tmp_path: Path, catalog_url: str, keep_servers: KeepPool
) -> None:
    """``wh sql "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"`` as an
    admin, through the controller: one Error line, and the controller's
    sessions (and this one) still work."""
    with controller(catalog_url, keep_servers) as ctl:
        env = {"WH_URL": ctl.url, "WH_TOKEN": ctl.admin_token, "WH_DB_URL": ""}
        sqlite = catalog_url.startswith("sqlite")
        with ctl.state.engine.connect() as held:
            held.exec_driver_sql("SELECT 1")
            for query in HARMFUL_SQLITE[:1] if sqlite else HARMFUL_PG[:5]:
                _, err = wh_sql(query, code=2, env=env)
                assert err.startswith("Error: sql: ") and err.count("\n") == 1, err
                assert "is not allowed here" in err, err
            assert held.exec_driver_sql("SELECT 2").scalar() == 2
        out, _ = wh_sql("--json", "SELECT name FROM users WHERE name = 'root'", env=env)
        assert json.loads(out)["rows"] == [["root"]]


@pytest.mark.parametrize("catalog_url", ["postgresql"], indirect=True)
def test_no_function_acting_beyond_the_query_is_allowed(catalog_engine: sa.Engine) -> None:
    """The check trusts the functions sqlglot knows as standard SQL: none of
    PostgreSQL's that act beyond the query may be among them (a newer sqlglot
    that learned one would fail here)."""
    harmful = [
        "pg_terminate_backend",
        "pg_cancel_backend",
        "pg_sleep",
        "pg_sleep_for",
        "pg_sleep_until",
        "pg_advisory_lock",
        "pg_advisory_xact_lock",
        "pg_try_advisory_lock",
        "pg_advisory_lock_shared",
        "pg_advisory_unlock_all",
        "set_config",
        "dblink",
        "dblink_exec",
        "dblink_connect",
        "lo_create",
        "lo_import",
        "lo_export",
        "lo_unlink",
        "lo_from_bytea",
        "lo_put",
        "pg_notify",
        "query_to_xml",
        "query_to_xmlschema",
        "cursor_to_xml",
        "table_to_xml",
        "pg_read_file",
        "pg_read_binary_file",
        "pg_ls_dir",
        "pg_stat_file",
        "pg_reload_conf",
        "pg_rotate_logfile",
        "pg_stat_reset",
        "pg_switch_wal",
        "pg_create_restore_point",
        "pg_log_backend_memory_contexts",
        "pg_export_snapshot",
        "nextval",
        "setval",
        "txid_current",
        "pg_current_xact_id",
        "pg_logical_emit_message",
        "pg_create_logical_replication_slot",
        "pg_drop_replication_slot",
        "pg_promote",
        "pg_backup_start",
        "pg_import_system_collations",
        "pg_replication_origin_create",
        "pg_stat_reset_shared",
    ]
    for name in harmful:
        with pytest.raises(UsageError, match=rf"function '{name}' is not allowed here"):
            run_readonly(catalog_engine, f"SELECT {name}(1)")
        with pytest.raises(UsageError, match=rf"function '{name.upper()}' is not allowed here"):
            run_readonly(catalog_engine, f"SELECT x FROM {name.upper()}(1) AS t(x)")


def _calls(query: str) -> int:
    """The Python calls made checking ``query``'s function calls (a count
    of work, the same on every run: no clock)."""
    import sys

    made = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal made
        if event == "call":
            made += 1

    sys.setprofile(count)
    try:
        catalogsql._check_calls(query)
    finally:
        sys.setprofile(None)
    return made


def test_checking_chained_subscripts_takes_linear_work() -> None:
    """``a[1][1]…[1]``: sqlglot typed each subscript's whole operand (to shift
    the index), work growing with the square of the chain: 400 took seconds
    of the controller's CPU. Four times the subscripts: about four times the
    work, not sixteen."""
    catalogsql._check_calls("SELECT 1")  # imports, done once
    small, large = (_calls("SELECT a" + "[1]" * n + " FROM t") for n in (50, 200))
    assert large < 6 * small, (small, large)
    sliced = (_calls("SELECT a" + "[1:2]" * n + " FROM t") for n in (50, 200))
    small, large = sliced
    assert large < 6 * small, (small, large)
