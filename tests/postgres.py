"""Catalogs on both backends for tests: a fresh SQLite file or a fresh PostgreSQL schema.

PostgreSQL is a real server: ``WH_TEST_PG_URL`` names a database the tests
may create schemas in (``make test`` sets it from ``scripts/postgres.sh``).
Each test gets its own schema, reached through a URL whose ``search_path``
is that schema, and the schema is dropped afterwards. Without
``WH_TEST_PG_URL`` the PostgreSQL cases are skipped, except in CI (``CI``
set), where they fail: CI must test both backends.

Fixtures (imported by ``conftest.py``, so every test module may use them):

- ``catalog_url``: a URL for an empty catalog, once per backend
  (test ids ``[sqlite]`` and ``[postgresql]``);
- ``catalog_engine``: an engine on ``catalog_url`` with the schema migrated;
- ``pg_url``, ``pg_admin``: the base PostgreSQL URL and an engine on it, for
  tests that only make sense there.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from warehouse import catalog

__all__ = [
    "PG_ENV",
    "catalog_engine",
    "catalog_url",
    "fresh_schema",
    "pg_admin",
    "pg_url",
    "wait_until_blocked",
]

PG_ENV = "WH_TEST_PG_URL"
BACKENDS = ["sqlite", "postgresql"]


def _base_url() -> str:
    url = os.environ.get(PG_ENV, "")
    if url:
        return url
    if os.environ.get("CI"):
        pytest.fail(
            f"{PG_ENV} is not set: CI must test the catalog on PostgreSQL "
            "(`make test` sets it from scripts/postgres.sh)",
            pytrace=False,
        )
    pytest.skip(
        f"PostgreSQL: {PG_ENV} is not set (run `make test`, or set it to "
        "postgresql+psycopg://user:password@host:port/db)"
    )


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[sa.Engine]:
    engine = sa.create_engine(_base_url(), poolclass=sa.pool.NullPool)
    try:
        with engine.connect():
            pass
    except sa.exc.OperationalError as e:
        pytest.fail(f"{PG_ENV} names no PostgreSQL we can reach: {e.orig}", pytrace=False)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def pg_url(pg_admin: sa.Engine) -> str:
    """The PostgreSQL database the tests may use (skipped without one, outside CI)."""
    return pg_admin.url.render_as_string(hide_password=False)


@contextmanager
def fresh_schema(admin: sa.Engine) -> Iterator[str]:
    """A new, empty schema and a URL that works in it; dropped afterwards.

    Far quicker than a database per test (a few milliseconds), and the
    catalog code cannot tell the difference: everything it names lands in
    the schema through ``search_path``.
    """
    schema = f"wh_t{secrets.token_hex(6)}"
    with admin.begin() as conn:
        conn.exec_driver_sql(f"CREATE SCHEMA {schema}")
    url = admin.url.update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(params=BACKENDS)
def catalog_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty catalog database: a SQLite file, or a PostgreSQL schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'catalog.db'}"
        return
    admin: sa.Engine = request.getfixturevalue("pg_admin")
    with fresh_schema(admin) as url:
        yield url


@pytest.fixture
def catalog_engine(catalog_url: str) -> Iterator[sa.Engine]:
    """An engine on a migrated, empty catalog, on each backend in turn."""
    engine = catalog.open_engine(catalog_url)
    catalog.upgrade(engine)
    yield engine
    engine.dispose()


def wait_until_blocked(engine: sa.Engine, holder: sa.Connection, timeout: float = 10.0) -> None:
    """Wait until another session waits for a lock ``holder`` holds.

    PostgreSQL says who blocks whom, so a race test can be sure the other
    side reached its conflicting statement. SQLite serializes writers at
    BEGIN: a short pause is all there is to wait for.
    """
    if engine.dialect.name != "postgresql":
        time.sleep(0.2)
        return
    pid = holder.exec_driver_sql("SELECT pg_backend_pid()").scalar()
    query = sa.text("SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))")
    deadline = time.monotonic() + timeout
    with engine.connect() as conn:
        while not conn.execute(query, {"pid": pid}).scalar():
            if time.monotonic() > deadline:
                raise TimeoutError("the other session never blocked on our lock")
            conn.rollback()  # a fresh snapshot of pg_stat_activity
            time.sleep(0.01)
