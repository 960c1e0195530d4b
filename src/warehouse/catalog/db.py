"""Open the catalog database and bring its schema up to date.

SQLite (the embedded default) runs in WAL mode with full fsync on commit and
a generous busy timeout, so many ``wh`` processes can share one catalog;
write transactions start with ``BEGIN IMMEDIATE`` so two writers queue up
instead of failing on a lock upgrade.

PostgreSQL (``postgresql+psycopg://user:password@host/db``) runs at READ
COMMITTED, so two writers can both find a row missing and both insert it: the
second insert fails on the key. Callers catch that with ``duplicate_key`` and
turn it into the outcome a serialized run would have given (a conflict, or
reading what the other writer stored). Migrations take an advisory lock, so
several processes may upgrade one database at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from warehouse.catalog.values import HEAD_REVISION
from warehouse.errors import UsageError
from warehouse.private import private_sqlite
from warehouse.settings import catalog_url_problem
from warehouse.sqlitewal import use_wal

__all__ = [
    "HEAD_REVISION",
    "by_code_point",
    "connect",
    "duplicate_key",
    "insert_ignoring_duplicates",
    "open_engine",
    "upgrade",
    "write",
]

# A new migration bumps HEAD_REVISION, in catalog/values.py (a test checks).

_IMMEDIATE = "warehouse_write"

# pg_advisory_xact_lock key held while migrating ("whcatalg" in ASCII).
_MIGRATION_LOCK = 0x7768_6361_7461_6C67


def open_engine(url: str) -> sa.Engine:
    if (problem := catalog_url_problem(url)) is not None:
        # Before SQLAlchemy, whose own errors are tracebacks (an unknown driver).
        raise UsageError(problem)
    if url.startswith("sqlite"):
        private_sqlite(url)  # 0600: it holds token hashes and the signing key
        engine = sa.create_engine(url, connect_args={"timeout": 60})
        sa.event.listen(engine, "connect", _sqlite_connect)
        sa.event.listen(engine, "begin", _sqlite_begin)
    else:
        engine = sa.create_engine(url, pool_pre_ping=True)
    return engine


def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    # Let SQLAlchemy's "begin" event issue BEGIN itself (the driver's own
    # implicit BEGIN is always DEFERRED).
    dbapi_conn.isolation_level = None
    cur = dbapi_conn.cursor()
    use_wal(cur)
    cur.execute("PRAGMA synchronous=FULL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _sqlite_begin(conn: sa.Connection) -> None:
    immediate = conn.get_execution_options().get(_IMMEDIATE, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


@contextmanager
def write(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A write transaction (serialized on SQLite, row-locked on PostgreSQL)."""
    with engine.connect() as conn:
        conn = conn.execution_options(**{_IMMEDIATE: True})
        with conn.begin():
            yield conn


def duplicate_key(exc: sa.exc.IntegrityError) -> bool:
    """Whether ``exc`` is a unique or primary key violation (a lost insert race)."""
    sqlstate = getattr(exc.orig, "sqlstate", None)
    if sqlstate is not None:  # psycopg
        return bool(sqlstate == "23505")
    return "UNIQUE constraint failed" in str(exc.orig)  # sqlite3


def insert_ignoring_duplicates(
    conn: sa.Connection, table: sa.Table, rows: list[dict[str, Any]], key: list[str]
) -> None:
    """Insert ``rows``, leaving out those whose ``key`` columns are taken (by an
    earlier row, or another writer's meanwhile) without failing the transaction."""
    if not rows:
        return
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        conn.execute(pg_insert(table).on_conflict_do_nothing(index_elements=key), rows)
    else:
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        conn.execute(sqlite_insert(table).on_conflict_do_nothing(index_elements=key), rows)


def by_code_point(engine: sa.Engine, column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
    """``column`` ordered by code point on every backend (SQLite's default).

    A PostgreSQL database usually sorts text by its locale (``a`` before
    ``B``); the "C" collation sorts the way SQLite and Python do.
    """
    if engine.dialect.name == "postgresql":
        return column.collate("C")
    return column


@contextmanager
def connect(engine: sa.Engine) -> Iterator[sa.Connection]:
    """A read transaction."""
    with engine.connect() as conn, conn.begin():
        yield conn


def current_revision(engine: sa.Engine) -> str | None:
    with connect(engine) as conn:
        if not sa.inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


def upgrade(engine: sa.Engine) -> None:
    """Run any migrations not yet applied (cheap when the schema is current).

    A new, empty database gets the tables of ``schema`` at once, as the
    migrations would leave them (a test keeps the two equal on both
    backends), stamped with the newest revision: no Alembic to load and no
    eleven migrations to replay (half a second of CPU for each new ``$WH_HOME``).
    """
    if current_revision(engine) == HEAD_REVISION:
        return
    if _create_if_empty(engine):
        return
    # Alembic is imported only when there is work, to keep `wh` start-up quick.
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", "warehouse.catalog:migrations")
    with write(engine) as conn:
        if engine.dialect.name == "postgresql":
            # Concurrent upgrades of a fresh database would both create the
            # tables; the second waits here, then finds the schema current.
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_MIGRATION_LOCK)))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


# Alembic's own table, as Alembic makes it: a later migration reads it.
_VERSION = sa.Table(
    "alembic_version",
    sa.MetaData(),
    sa.Column("version_num", sa.String(32), nullable=False),
    sa.PrimaryKeyConstraint("version_num", name="alembic_version_pkc"),
)


def _create_if_empty(engine: sa.Engine) -> bool:
    """Make the newest schema in a database holding no table; whether it is now current."""
    from warehouse.catalog.schema import metadata

    with write(engine) as conn:
        if engine.dialect.name == "postgresql":
            # As for migrations: one of several processes creates, the others wait.
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_MIGRATION_LOCK)))
        tables = sa.inspect(conn).get_table_names()
        if not tables:
            metadata.create_all(conn)
            _VERSION.create(conn)
            conn.execute(_VERSION.insert().values(version_num=HEAD_REVISION))
            return True
        if _VERSION.name not in tables:
            return False
        return bool(conn.execute(sa.select(_VERSION.c.version_num)).scalar() == HEAD_REVISION)
