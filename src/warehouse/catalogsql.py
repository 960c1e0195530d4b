"""Read-only SQL over the catalog (``wh sql``), on SQLite and PostgreSQL.

The database itself refuses anything but reading:

- SQLite: a connection of its own with ``PRAGMA query_only`` and an
  authorizer that allows only reading tables and calling the functions of
  ``SQLITE_FUNCTIONS`` (so no ``ATTACH``, ``PRAGMA``, ``load_extension`` or
  write of any kind); Python's driver refuses a second statement.
- PostgreSQL: a connection of its own in a ``READ ONLY`` transaction with a
  statement timeout, rolled back and closed afterwards (so no session state
  such as an advisory lock outlives the call); the statement is sent with the
  extended protocol, which refuses a second statement, as the query of a
  ``DECLARE ... CURSOR``, which takes only a SELECT or VALUES (so no ``SET``,
  ``SHOW``...), and only the rows within the limit are fetched.

A read-only transaction still runs any function the role may call, and a
role may signal its own other sessions: ``pg_terminate_backend`` would end
the controller's. So on PostgreSQL the statement is parsed first (sqlglot)
and every call checked: a function sqlglot knows as standard SQL, or one of
``POSTGRESQL_FUNCTIONS``; anything else, or a query the parser cannot read,
is refused before it runs. The whole call has a deadline besides the
statement timeout, which a query could otherwise lift for its later fetches.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import decimal
import functools
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from warehouse.errors import UsageError

__all__ = [
    "MAX_QUERY",
    "MAX_ROWS",
    "POSTGRESQL_FUNCTIONS",
    "SQLITE_FUNCTIONS",
    "SqlResult",
    "check_query",
    "run_readonly",
]

MAX_QUERY = 65536  # characters of SQL accepted
MAX_ROWS = 100_000  # the most rows one call returns
MAX_BYTES = 64 << 20  # the most characters of values one call holds
TIMEOUT = 30.0  # seconds one call may run

# SQLite: every function a query may call (the authorizer names each one).
# Not load_extension, fts3_tokenizer, sqlite_compileoption_*, nor any other.
SQLITE_FUNCTIONS = frozenset(
    [
        "abs",
        "avg",
        "ceil",
        "ceiling",
        "char",
        "coalesce",
        "concat",
        "concat_ws",
        "count",
        "cume_dist",
        "date",
        "datetime",
        "degrees",
        "dense_rank",
        "exp",
        "first_value",
        "floor",
        "format",
        "glob",
        "group_concat",
        "hex",
        "ifnull",
        "iif",
        "instr",
        "julianday",
        "lag",
        "last_value",
        "lead",
        "length",
        "like",
        "likelihood",
        "likely",
        "ln",
        "log",
        "log10",
        "log2",
        "lower",
        "ltrim",
        "max",
        "min",
        "mod",
        "nth_value",
        "ntile",
        "nullif",
        "octet_length",
        "percent_rank",
        "pi",
        "pow",
        "power",
        "printf",
        "quote",
        "radians",
        "random",
        "randomblob",
        "rank",
        "replace",
        "round",
        "row_number",
        "rtrim",
        "sign",
        "sqrt",
        "strftime",
        "string_agg",
        "substr",
        "substring",
        "sum",
        "time",
        "timediff",
        "total",
        "trim",
        "trunc",
        "typeof",
        "unhex",
        "unicode",
        "unixepoch",
        "unlikely",
        "upper",
        "zeroblob",
        "sin",
        "cos",
        "tan",
        "asin",
        "acos",
        "atan",
        "atan2",
        "json",
        "jsonb",
        "json_array",
        "json_array_length",
        "json_extract",
        "jsonb_extract",
        "json_insert",
        "json_object",
        "json_patch",
        "json_remove",
        "json_replace",
        "json_set",
        "json_type",
        "json_valid",
        "json_quote",
        "json_group_array",
        "json_group_object",
        "json_error_position",
        "json_pretty",
        "->",
        "->>",
    ]
)

# PostgreSQL functions sqlglot does not know as standard SQL that a query may
# call: reading and formatting values only. No pg_* administration function
# (pg_terminate_backend, pg_cancel_backend, pg_advisory_lock, pg_sleep,
# pg_notify, pg_read_file...), set_config, dblink, lo_*, query_to_xml.
POSTGRESQL_FUNCTIONS = frozenset(
    [
        "age",
        "array_dims",
        "array_lower",
        "array_ndims",
        "array_positions",
        "array_upper",
        "cardinality",
        "clock_timestamp",
        "convert_from",
        "date_part",
        "every",
        "isfinite",
        "json_array_elements",
        "json_array_elements_text",
        "json_array_length",
        "json_build_array",
        "json_build_object",
        "json_each",
        "json_each_text",
        "json_extract_path",
        "json_object_keys",
        "json_strip_nulls",
        "json_typeof",
        "jsonb_agg",
        "jsonb_array_elements",
        "jsonb_array_elements_text",
        "jsonb_array_length",
        "jsonb_build_array",
        "jsonb_build_object",
        "jsonb_each",
        "jsonb_each_text",
        "jsonb_extract_path",
        "jsonb_extract_path_text",
        "jsonb_insert",
        "jsonb_object_keys",
        "jsonb_path_exists",
        "jsonb_path_query",
        "jsonb_path_query_array",
        "jsonb_path_query_first",
        "jsonb_pretty",
        "jsonb_set",
        "jsonb_strip_nulls",
        "jsonb_typeof",
        "make_date",
        "octet_length",
        "pg_size_pretty",
        "pg_typeof",
        "quote_ident",
        "quote_literal",
        "regexp_match",
        "regexp_matches",
        "regexp_split_to_array",
        "regexp_split_to_table",
        "row",
        "row_to_json",
        "statement_timestamp",
        "string_to_table",
        "timezone",
        "to_json",
        "to_jsonb",
        "transaction_timestamp",
    ]
)

Value = str | int | float | None


@dataclass(frozen=True)
class SqlResult:
    columns: list[str]
    rows: list[list[Value]]
    truncated: bool  # more rows than the limit were there

    def to_json(self) -> dict[str, Any]:
        return {"columns": self.columns, "rows": self.rows, "truncated": self.truncated}


def run_readonly(
    engine: sa.Engine, query: str, *, limit: int = 10_000, timeout: float = TIMEOUT
) -> SqlResult:
    """Run one SELECT on the catalog ``engine`` points at, reading only.

    Raises UsageError (naming the database's complaint) for anything else.
    """
    check_query(query, limit)
    if engine.dialect.name == "sqlite":
        return _sqlite(engine, query, limit, timeout)
    if engine.dialect.name == "postgresql":
        return _postgresql(engine, query, limit, timeout)
    raise UsageError(f"sql: no read-only mode for {engine.dialect.name}")


def check_query(query: str, limit: int) -> None:
    """Refuse (UsageError) a query or limit no catalog would take: checked
    before it is sent to a controller too, so the words are the same."""
    if not query.strip():
        raise UsageError("sql: the query is empty")
    if len(query) > MAX_QUERY:
        raise UsageError(f"sql: the query is over {MAX_QUERY} characters")
    if not 1 <= limit <= MAX_ROWS:
        raise UsageError(f"sql: the row limit must be 1 to {MAX_ROWS}")


def _value(v: Any) -> Value:
    if isinstance(v, bool):
        # SQLite has no boolean type (it stores 0 and 1): the same on PostgreSQL,
        # so a query gives the same rows on either catalog.
        return int(v)
    if v is None or isinstance(v, str | int | float):
        return v
    if isinstance(v, decimal.Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    return str(v)


def _result(description: Any, rows: Iterable[Any], limit: int) -> SqlResult:
    """The first ``limit`` of ``rows`` within MAX_BYTES of values.

    ``rows`` come one at a time from the database (not in batches), so what
    is held is never more than the bound and one row.
    """
    columns = [str(d[0]) for d in description]
    out: list[list[Value]] = []
    held = 0
    for row in rows:
        if len(out) == limit:
            return SqlResult(columns, out, truncated=True)
        values = [_value(v) for v in row]
        held += sum(len(v) if isinstance(v, str) else 8 for v in values)
        if held > MAX_BYTES:
            raise UsageError(
                f"sql: the result is over {MAX_BYTES >> 20} MiB: select fewer rows or columns"
            )
        out.append(values)
    return SqlResult(columns, out, truncated=False)


# The authorizer's action codes that a plain SELECT needs; everything else
# (writes, ATTACH, PRAGMA, transactions, ...) is denied by SQLite.
_SQLITE_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
_SQLITE_ALLOWED.add(getattr(sqlite3, "SQLITE_RECURSIVE", 33))  # WITH RECURSIVE


class _Refused:
    """What the SQLite authorizer refused last, for the error message."""

    function: str | None = None


def _sqlite_authorizer(refused: _Refused) -> Callable[..., int]:
    def authorize(action: int, arg1: Any, arg2: Any, *_rest: Any) -> int:
        if action == sqlite3.SQLITE_UPDATE and arg1 in ("sqlite_master", "sqlite_schema"):
            # A table-valued function (json_each, json_tree) declares its
            # table as it is first used, which SQLite authorizes as an update
            # of the schema it never runs. Ignored, not denied: denied, the
            # function cannot be used; a real update of the schema is refused
            # by SQLite itself (and by query_only).
            return sqlite3.SQLITE_IGNORE
        if action not in _SQLITE_ALLOWED:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION and str(arg2).lower() not in SQLITE_FUNCTIONS:
            refused.function = str(arg2)
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    return authorize


def _sqlite(engine: sa.Engine, query: str, limit: int, timeout: float) -> SqlResult:
    path = engine.url.database
    if not path or path == ":memory:":
        raise UsageError("sql: the catalog is not a SQLite file")
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    try:
        conn.execute("PRAGMA query_only=ON")
        # No one value bigger than a whole result (zeroblob(1e9) is a query).
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_BYTES)
        refused = _Refused()
        conn.set_authorizer(_sqlite_authorizer(refused))
        deadline = time.monotonic() + timeout
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            cur = conn.execute(query)
            if cur.description is None:
                raise UsageError("sql: only a SELECT may run here")
            result = _result(cur.description, cur, limit)
        except sqlite3.ProgrammingError as e:  # e.g. two statements
            raise UsageError(f"sql: {_one_line(str(e))}") from None
        except sqlite3.DatabaseError as e:
            message = str(e)
            if message == "interrupted":
                message = "over the time limit"
            elif message.startswith("not authorized") and refused.function is not None:
                message = _not_allowed(refused.function)
            elif message == "not authorized":
                message = "not authorized: only a single SELECT that reads may run here"
            raise UsageError(f"sql: {_one_line(message)}") from None
        return result
    finally:
        conn.close()


def _postgresql(engine: sa.Engine, query: str, limit: int, timeout: float) -> SqlResult:
    import psycopg

    checked = _check_calls(query)  # before anything reaches the server
    raw = engine.raw_connection()
    # The statement timeout is the session's to change (set_config is refused,
    # but not trusted alone): past the deadline the call is cancelled anyway.
    deadline: threading.Timer | None = None
    try:
        pg = raw.driver_connection
        assert isinstance(pg, psycopg.Connection)
        pg.rollback()
        deadline = threading.Timer(timeout, _cancel, (pg,))
        deadline.daemon = True
        deadline.start()
        with pg.cursor() as cur:
            # The first statement of the transaction: nothing before it ran.
            cur.execute("SET TRANSACTION READ ONLY")
            cur.execute("SELECT set_config('statement_timeout', %s, true)", (f"{timeout}s",))
            _not_superuser(cur)
            try:
                # prepare=True: the extended protocol, which takes one statement only;
                # a cursor is declared FOR a SELECT or VALUES only, and the server
                # makes only the rows fetched (not the whole result, then cut).
                # Declaring parses and plans, and runs nothing until a FETCH.
                cur.execute(_DECLARE + query.encode(), prepare=True)
                if checked is not None:
                    raise UsageError(
                        f"sql: the query's calls cannot be checked: {_one_line(checked)}"
                    )
                cur.execute(b"FETCH FORWARD 0 FROM wh_sql")  # its columns
                if cur.description is None:
                    raise UsageError("sql: only a SELECT may run here")

                # Row by row (libpq's single-row mode): a FETCH of many rows
                # was held whole, however big, before any was counted.
                fetch = f"FETCH FORWARD {int(limit) + 1} FROM wh_sql".encode()
                return _result(cur.description, cur.stream(fetch), limit)
            except psycopg.errors.QueryCanceled:
                raise UsageError("sql: over the time limit") from None
            except psycopg.Error as e:
                raise UsageError(f"sql: {_one_line(_pg_message(e))}") from None
    finally:
        if deadline is not None:
            deadline.cancel()
        # Never back into the pool: whatever the query did to the session ends here.
        raw.invalidate()


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _one_line(message: str) -> str:
    """The database's words with the query's newlines and other control
    characters in them written out (``\\n``): an error is one line."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], message)


def _cancel(pg: Any) -> None:
    # The call may have ended (and its connection closed) meanwhile.
    with contextlib.suppress(Exception):
        pg.cancel_safe()


def _not_allowed(function: str) -> str:
    return f"function {function!r} is not allowed here (docs/sql.md lists those that are)"


@functools.cache
def _reader() -> Any:
    """sqlglot's PostgreSQL dialect, subscripts kept as written.

    sqlglot shifts PostgreSQL's 1-based subscripts to its own 0-based ones,
    typing each subscript's whole operand to do so: work growing with the
    square of a chain (``a[1][1]…``, ``a[1:2][1:2]…``), seconds of the
    controller's CPU for a short query. Only the calls are checked here, so
    no index needs shifting: parsing stays linear in the query's length."""
    from sqlglot.dialects.postgres import Postgres

    class _CheckedPostgres(Postgres):
        INDEX_OFFSET = 0

    return _CheckedPostgres


def _check_calls(query: str) -> str | None:
    """Refuse (UsageError) a PostgreSQL query calling a function outside the
    allowed ones; None if every call is allowed, or why the query could not
    be parsed (the caller lets PostgreSQL name the error, and runs nothing)."""
    import logging

    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    # sqlglot warns on stderr of SQL it parses only in part; refused here anyway.
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    try:
        statements = [t for t in sqlglot.parse(query, read=_reader()) if t is not None]
    except RecursionError:
        return "it is nested too deeply"
    except SqlglotError as e:
        return str(e).splitlines()[0]
    for tree in statements:
        if isinstance(tree, exp.Command):  # not parsed, only passed on as text
            return f"{tree.name} is not read by the parser"
        for node in tree.find_all(exp.Anonymous):
            # A name sqlglot does not know: as written (a quoted one too).
            if str(node.name).lower() not in POSTGRESQL_FUNCTIONS:
                raise UsageError(f"sql: {_not_allowed(str(node.name))}")
    return None


_DECLARE = b"DECLARE wh_sql NO SCROLL CURSOR FOR "


def _not_superuser(cur: Any) -> None:
    """A read-only transaction still lets a superuser's SELECT read the
    server's files (``pg_read_file``, ``pg_ls_dir``): such a session drops,
    for this transaction, to ``pg_read_all_data`` (PostgreSQL 14 and later),
    which reads every table and no file; without that role it is refused."""
    cur.execute("SELECT current_setting('is_superuser')")
    row = cur.fetchone()
    if not row or row[0] != "on":
        return
    cur.execute("SELECT 1 FROM pg_roles WHERE rolname = 'pg_read_all_data'")
    if cur.fetchone() is None:
        raise UsageError(
            "sql: the catalog's database role is a superuser, whose SELECT may read the "
            "server's files, and this PostgreSQL has no pg_read_all_data role to run as"
        )
    cur.execute("SET LOCAL ROLE pg_read_all_data")


def _pg_message(e: Any) -> str:
    diag = getattr(e, "diag", None)
    primary = (diag and diag.message_primary) or str(e).strip().splitlines()[0]
    position = diag and diag.statement_position
    # In the query as given, not in the DECLARE around it.
    position = int(position) - len(_DECLARE) if position else 0
    return f"{primary} (at character {position})" if position > 0 else primary
