"""Open the catalog database and bring its schema up to date.

SQLite (the embedded default) runs in WAL mode with full fsync on commit and
a generous busy timeout, so many ``wh`` processes can share one catalog;
write transactions start with ``BEGIN IMMEDIATE`` so two writers queue up
instead of failing on a lock upgrade. PostgreSQL URLs work unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

__all__ = ["HEAD_REVISION", "connect", "open_engine", "upgrade", "write"]

# The newest migration; checked against the migration scripts by a test, so a
# new script without this bump fails the suite.
HEAD_REVISION = "0002"

_IMMEDIATE = "warehouse_write"


def open_engine(url: str) -> sa.Engine:
    if url.startswith("sqlite"):
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
    cur.execute("PRAGMA journal_mode=WAL")
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
    """Run any migrations not yet applied (cheap when the schema is current)."""
    if current_revision(engine) == HEAD_REVISION:
        return
    # Alembic is imported only when there is work, to keep `wh` start-up quick.
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", "warehouse.catalog:migrations")
    with write(engine) as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
