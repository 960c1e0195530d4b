"""Read-only SQL over the catalog (``wh sql``), on SQLite and PostgreSQL.

The database itself refuses anything but reading, so no statement text is
inspected here:

- SQLite: a connection of its own with ``PRAGMA query_only`` and an
  authorizer that allows only reading tables and calling functions (so no
  ``ATTACH``, ``PRAGMA`` or write of any kind); Python's driver refuses a
  second statement.
- PostgreSQL: a connection of its own in a ``READ ONLY`` transaction with a
  statement timeout, rolled back and closed afterwards (so no session state
  such as an advisory lock outlives the call); the statement is sent with the
  extended protocol, which refuses a second statement, as the query of a
  ``DECLARE ... CURSOR``, which takes only a SELECT or VALUES (so no ``SET``,
  ``SHOW``...), and only the rows within the limit are fetched.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from warehouse.errors import UsageError

__all__ = ["MAX_QUERY", "MAX_ROWS", "SqlResult", "run_readonly"]

MAX_QUERY = 65536  # characters of SQL accepted
MAX_ROWS = 100_000  # the most rows one call returns
MAX_BYTES = 64 << 20  # the most characters of values one call holds
_BATCH = 1000  # rows fetched at once
TIMEOUT = 30.0  # seconds one statement may run

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
    if not query.strip():
        raise UsageError("sql: the query is empty")
    if len(query) > MAX_QUERY:
        raise UsageError(f"sql: the query is over {MAX_QUERY} characters")
    if not 1 <= limit <= MAX_ROWS:
        raise UsageError(f"sql: the row limit must be 1 to {MAX_ROWS}")
    if engine.dialect.name == "sqlite":
        return _sqlite(engine, query, limit, timeout)
    if engine.dialect.name == "postgresql":
        return _postgresql(engine, query, limit, timeout)
    raise UsageError(f"sql: no read-only mode for {engine.dialect.name}")


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


def _result(description: Any, fetch: Callable[[int], list[Any]], limit: int) -> SqlResult:
    """The rows ``fetch(n)`` gives (at most n a call, none at the end), up to
    ``limit`` rows and MAX_BYTES of values."""
    columns = [str(d[0]) for d in description]
    rows: list[list[Value]] = []
    held = 0
    while len(rows) <= limit:
        batch = fetch(min(_BATCH, limit + 1 - len(rows)))
        if not batch:
            break
        for row in batch:
            values = [_value(v) for v in row]
            held += sum(len(v) if isinstance(v, str) else 8 for v in values)
            if held > MAX_BYTES:
                raise UsageError(
                    f"sql: the result is over {MAX_BYTES >> 20} MiB: select fewer rows or columns"
                )
            rows.append(values)
    return SqlResult(columns, rows[:limit], truncated=len(rows) > limit)


# The authorizer's action codes that a plain SELECT needs; everything else
# (writes, ATTACH, PRAGMA, transactions, ...) is denied by SQLite.
_SQLITE_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
_SQLITE_ALLOWED.add(getattr(sqlite3, "SQLITE_RECURSIVE", 33))  # WITH RECURSIVE


def _sqlite_authorize(action: int, *_args: Any) -> int:
    return sqlite3.SQLITE_OK if action in _SQLITE_ALLOWED else sqlite3.SQLITE_DENY


def _sqlite(engine: sa.Engine, query: str, limit: int, timeout: float) -> SqlResult:
    path = engine.url.database
    if not path or path == ":memory:":
        raise UsageError("sql: the catalog is not a SQLite file")
    conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    try:
        conn.execute("PRAGMA query_only=ON")
        # No one value bigger than a whole result (zeroblob(1e9) is a query).
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_BYTES)
        conn.set_authorizer(_sqlite_authorize)
        deadline = time.monotonic() + timeout
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            cur = conn.execute(query)
            if cur.description is None:
                raise UsageError("sql: only a SELECT may run here")
            result = _result(cur.description, cur.fetchmany, limit)
        except sqlite3.ProgrammingError as e:  # e.g. two statements
            raise UsageError(f"sql: {e}") from None
        except sqlite3.DatabaseError as e:
            message = str(e)
            if message == "interrupted":
                message = "over the time limit"
            elif message == "not authorized":
                message = "not authorized: only a single SELECT that reads may run here"
            raise UsageError(f"sql: {message}") from None
        return result
    finally:
        conn.close()


def _postgresql(engine: sa.Engine, query: str, limit: int, timeout: float) -> SqlResult:
    import psycopg

    raw = engine.raw_connection()
    try:
        pg = raw.driver_connection
        assert isinstance(pg, psycopg.Connection)
        pg.rollback()
        with pg.cursor() as cur:
            # The first statement of the transaction: nothing before it ran.
            cur.execute("SET TRANSACTION READ ONLY")
            cur.execute("SELECT set_config('statement_timeout', %s, true)", (f"{timeout}s",))
            _not_superuser(cur)
            try:
                # prepare=True: the extended protocol, which takes one statement only;
                # a cursor is declared FOR a SELECT or VALUES only, and the server
                # makes only the rows fetched (not the whole result, then cut).
                cur.execute(_DECLARE + query.encode(), prepare=True)
                cur.execute(b"FETCH FORWARD 0 FROM wh_sql")  # its columns
                if cur.description is None:
                    raise UsageError("sql: only a SELECT may run here")

                def fetch(n: int) -> list[Any]:
                    cur.execute(f"FETCH FORWARD {int(n)} FROM wh_sql".encode())
                    return cur.fetchall()

                return _result(cur.description, fetch, limit)
            except psycopg.Error as e:
                raise UsageError(f"sql: {_pg_message(e)}") from None
    finally:
        # Never back into the pool: whatever the query did to the session ends here.
        raw.invalidate()


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
