"""The catalog on SQLite and on PostgreSQL: migrations, names with compare-and-swap,
users, keep services, accounting, and what happens when writers race.

Every test taking ``engine`` (or ``catalog_url``) runs once per backend; see
``tests/postgres.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from postgres import fresh_schema, wait_until_blocked
from warehouse import catalog
from warehouse.catalog import schema
from warehouse.catalog.cluster import service_id
from warehouse.catalog.db import HEAD_REVISION, current_revision, write
from warehouse.errors import ConflictError, ForbiddenError, NotFoundError, UsageError

P1 = "a" * 32 + "+1"
P2 = "b" * 32 + "+2"
P3 = "c" * 32 + "+3"
P4 = "d" * 32 + "+4"  # not recorded by the engine fixture


@pytest.fixture
def engine(catalog_engine: sa.Engine) -> sa.Engine:
    # Names point only at recorded collections.
    for pdh in (P1, P2, P3):
        catalog.add_collection(catalog_engine, pdh, "", 0, 0, "alice")
    return catalog_engine


def test_head_revision_matches_the_migration_scripts() -> None:
    cfg = Config()
    cfg.set_main_option("script_location", "warehouse.catalog:migrations")
    assert ScriptDirectory.from_config(cfg).get_current_head() == HEAD_REVISION


def _described(engine: sa.Engine) -> dict[str, Any]:
    """Every table as the database reports it: columns, keys, indexes, constraints."""
    found: dict[str, Any] = {}
    with engine.connect() as conn:
        inspector = sa.inspect(conn)
        for table in inspector.get_table_names():
            found[table] = {
                "columns": [
                    (c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
                    for c in inspector.get_columns(table)
                ],
                "primary key": inspector.get_pk_constraint(table)["constrained_columns"],
                "foreign keys": sorted(
                    (tuple(f["constrained_columns"]), f["referred_table"], str(f["options"]))
                    for f in inspector.get_foreign_keys(table)
                ),
                "indexes": sorted(
                    (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                    for i in inspector.get_indexes(table)
                ),
                "unique": sorted(
                    tuple(u["column_names"]) for u in inspector.get_unique_constraints(table)
                ),
                "checks": sorted(str(c["sqltext"]) for c in inspector.get_check_constraints(table)),
            }
    return found


def test_a_new_catalog_is_made_as_the_migrations_make_it(
    catalog_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # A new catalog is made from schema.py at once; an old one is migrated. Both
    # must end the same: a migration without its schema.py change fails here.
    if catalog_url.startswith("sqlite"):
        other: contextlib.AbstractContextManager[str] = contextlib.nullcontext(
            f"sqlite:///{tmp_path / 'migrated.db'}"
        )
    else:
        other = fresh_schema(request.getfixturevalue("pg_admin"))
    cfg = Config()
    cfg.set_main_option("script_location", "warehouse.catalog:migrations")
    with other as migrated_url:
        made, migrated = catalog.open_engine(catalog_url), catalog.open_engine(migrated_url)
        try:
            catalog.upgrade(made)
            with write(migrated) as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
            assert _described(made) == _described(migrated)
            # Alembic reads the made one as current: nothing left to run.
            with write(made) as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
            assert current_revision(made) == HEAD_REVISION
            assert _described(made) == _described(migrated)
        finally:
            made.dispose()
            migrated.dispose()


def test_upgrade_creates_every_table_and_is_idempotent(engine: sa.Engine) -> None:
    assert current_revision(engine) == HEAD_REVISION
    catalog.upgrade(engine)
    tables = set(sa.inspect(engine).get_table_names())
    assert {
        *("collections", "names", "name_history", "name_writers", "block_writes"),
        *("users", "tokens", "keep_services", "settings"),
    } <= tables
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_name_compare_and_swap_and_history(engine: sa.Engine) -> None:
    rec = catalog.set_name(engine, "raw", P1, expect=None, user="alice")
    assert (rec.pdh, rec.version, rec.owner) == (P1, 1, "alice")
    with pytest.raises(ConflictError, match=re.escape(P1)):
        catalog.set_name(engine, "raw", P2, expect=None, user="alice")
    with pytest.raises(ConflictError):
        catalog.set_name(engine, "raw", P2, expect=P3, user="alice")
    assert catalog.get_name(engine, "raw").pdh == P1, "a failed swap changes nothing"
    catalog.set_name(engine, "raw", P2, expect=P1, user="alice")
    catalog.set_name(engine, "raw", P3, expect=P2, user="alice")
    log = catalog.name_log(engine, "raw")
    assert [(c.version, c.old_pdh, c.new_pdh) for c in log] == [
        (1, None, P1),
        (2, P1, P2),
        (3, P2, P3),
    ]
    assert [r.name for r in catalog.list_names(engine)] == ["raw"]
    assert catalog.list_names(engine, "zz") == []


def test_only_owner_and_writers_move_a_name(engine: sa.Engine) -> None:
    catalog.set_name(engine, "shared", P1, expect=None, user="alice")
    with pytest.raises(ForbiddenError):
        catalog.set_name(engine, "shared", P2, expect=P1, user="bob")
    with pytest.raises(ForbiddenError):
        catalog.add_writer(engine, "shared", "bob", user="bob")
    catalog.add_writer(engine, "shared", "bob", user="alice")
    catalog.set_name(engine, "shared", P2, expect=P1, user="bob")
    assert catalog.get_name(engine, "shared").owner == "alice"
    catalog.set_name(engine, "shared", P3, expect=P2, user="carol", admin=True)


@pytest.mark.parametrize(
    "bad",
    [
        *(
            "",
            "a//b",
            "a/",
            "/a",
            "a/.b",
            ".hidden",
            "-x",
            "x" * 256,
            "a b",
            P1,
            "é",
            "e\u0301",
            " run",
            "run ",
        ),
        # Shaped like a PDH with hints or a leading zero: wh get reads it as a PDH.
        *(P1 + "+Kx", P1.split("+")[0] + "+007", P1.upper()),
    ],
)
def test_bad_names_are_refused(engine: sa.Engine, bad: str) -> None:
    with pytest.raises(UsageError):
        catalog.set_name(engine, bad, P1, expect=None, user="alice")
    assert catalog.list_names(engine) == []


def test_a_pdh_that_is_not_one_is_bad_input(engine: sa.Engine) -> None:
    for bad in ("zz", P1 + "+Kx", P1.upper()):
        with pytest.raises(UsageError, match="not a portable data hash"):
            catalog.set_name(engine, "n", bad, expect=None, user="alice")


def test_missing_name(engine: sa.Engine) -> None:
    with pytest.raises(NotFoundError):
        catalog.get_name(engine, "nope")
    with pytest.raises(NotFoundError):
        catalog.name_log(engine, "nope")


def test_accounting_per_user(engine: sa.Engine) -> None:
    catalog.record_block_writes(engine, "alice", [("a" * 32, 10, True), ("b" * 32, 5, False)])
    catalog.record_block_writes(engine, "bob", [("a" * 32, 10, False)])
    rows = {r.user: r for r in catalog.accounting(engine)}
    assert (rows["alice"].writes, rows["alice"].new_blocks, rows["alice"].bytes_new) == (2, 1, 10)
    assert (rows["bob"].writes, rows["bob"].new_blocks, rows["bob"].bytes_written) == (1, 0, 10)


def test_collections_are_recorded_once(engine: sa.Engine) -> None:
    first = catalog.add_collection(engine, P4, "x+1", 1, 1, "alice")
    again = catalog.add_collection(engine, P4, "x+1", 1, 1, "bob")
    assert again == first
    assert P4 in [c.pdh for c in catalog.list_collections(engine)]
    assert len(catalog.list_collections(engine)) == 4
    with pytest.raises(NotFoundError):
        catalog.get_collection(engine, "e" * 32 + "+5")


def test_names_list_in_code_point_order_and_prefixes_match_case(engine: sa.Engine) -> None:
    for name in ["b", "a", "B", "A-1", "a.2", "Z9"]:
        catalog.set_name(engine, name, P1, expect=None, user="alice")
    assert [r.name for r in catalog.list_names(engine)] == ["A-1", "B", "Z9", "a", "a.2", "b"]
    assert [r.name for r in catalog.list_names(engine, "a")] == ["a", "a.2"]
    assert [r.name for r in catalog.list_names(engine, "A")] == ["A-1"]


def test_users_and_tokens(engine: sa.Engine) -> None:
    catalog.add_user(engine, "bob")
    catalog.add_user(engine, "Alice", admin=True)
    with pytest.raises(ConflictError):
        catalog.add_user(engine, "bob")
    assert catalog.list_users(engine) == [catalog.User("Alice", True), catalog.User("bob", False)]
    token = catalog.create_token(engine, "bob", label="laptop")
    assert catalog.user_for_token(engine, token) == catalog.User("bob", False)
    assert catalog.user_for_token(engine, token + "x") is None
    expired = catalog.create_token(engine, "bob", ttl=-1)
    assert catalog.user_for_token(engine, expired) is None
    with pytest.raises(NotFoundError):
        catalog.create_token(engine, "nobody")


def test_keep_services_and_the_signing_key(engine: sa.Engine) -> None:
    a = catalog.register_keep_service(engine, "http://127.0.0.1:9001/")
    again = catalog.register_keep_service(engine, "http://127.0.0.1:9001")
    assert again.id == a.id and again.last_seen >= a.last_seen
    catalog.register_keep_service(engine, "http://127.0.0.1:9002")
    services = catalog.list_keep_services(engine)
    assert len(services) == 2 and [s.id for s in services] == sorted(s.id for s in services)
    key = catalog.signing_key(engine)
    assert len(key) == 64 and catalog.signing_key(engine) == key


def test_a_keep_server_with_its_own_id_moves_and_is_retired(engine: sa.Engine) -> None:
    old = catalog.register_keep_service(engine, "http://127.0.0.1:9001")  # no id: from the URL
    sid = "keep-0123456789abcde"
    catalog.register_keep_service(engine, "http://127.0.0.1:9002", sid)
    # Restarted on another port: its own row follows it; none is added.
    catalog.register_keep_service(engine, "http://127.0.0.1:9003", sid)
    assert {(s.id, s.url) for s in catalog.list_keep_services(engine)} == {
        (old.id, "http://127.0.0.1:9001"),
        (sid, "http://127.0.0.1:9003"),
    }
    # Started where an older server was: that row is replaced.
    catalog.register_keep_service(engine, "http://127.0.0.1:9001", sid)
    assert [(s.id, s.url) for s in catalog.list_keep_services(engine)] == [
        (sid, "http://127.0.0.1:9001")
    ]
    assert catalog.retire_keep_service(engine, "http://127.0.0.1:9001/").id == sid
    assert catalog.list_keep_services(engine) == []
    with pytest.raises(NotFoundError):
        catalog.retire_keep_service(engine, sid)


def test_collection_digests_are_filled_in_later(engine: sa.Engine) -> None:
    catalog.add_collection(engine, P1, "x+1", 1, 1, "alice")
    filled = catalog.add_collection(engine, P1, "x+1", 1, 1, "bob", file_md5s='{"f": "0"}')
    assert filled.created_by == "alice"
    assert catalog.get_collection(engine, P1).file_md5s == '{"f": "0"}'


# -- writers racing ------------------------------------------------------------

PDHS = [f"{i:032x}+{i}" for i in range(1, 21)]


def _record_all(engine: sa.Engine) -> None:
    for pdh in PDHS:
        catalog.add_collection(engine, pdh, "", 0, 0, "alice")


def _together(n: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(0..n-1)`` in ``n`` threads released at once: results or exceptions."""
    start = threading.Barrier(n)

    def run(i: int) -> Any:
        start.wait()
        try:
            return work(i)
        except Exception as e:
            return e

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(run, range(n)))


@pytest.mark.parametrize("expect", [None, P1], ids=["create", "swap"])
def test_twenty_writers_with_one_expectation_make_one_change(
    engine: sa.Engine, expect: str | None
) -> None:
    _record_all(engine)
    if expect is not None:
        catalog.set_name(engine, "hot", expect, expect=None, user="alice")
    results = _together(
        20, lambda i: catalog.set_name(engine, "hot", PDHS[i], expect=expect, user="alice")
    )
    won = [r for r in results if isinstance(r, catalog.NameRecord)]
    lost = [r for r in results if isinstance(r, ConflictError)]
    assert len(won) == 1 and len(lost) == 19, results
    assert catalog.get_name(engine, "hot").pdh == won[0].pdh
    changes = [c for c in catalog.name_log(engine, "hot") if c.old_pdh == expect]
    assert [(c.old_pdh, c.new_pdh) for c in changes] == [(expect, won[0].pdh)]
    assert len(catalog.name_log(engine, "hot")) == (1 if expect is None else 2)


def test_twenty_writers_record_one_collection(engine: sa.Engine) -> None:
    results = _together(20, lambda i: catalog.add_collection(engine, P4, "x+1", 1, 1, f"user{i}"))
    assert all(isinstance(r, catalog.CollectionRecord) for r in results), results
    assert len({r.created_by for r in results}) == 1
    assert [c.pdh for c in catalog.list_collections(engine)].count(P4) == 1


def test_twenty_writers_take_one_signing_key(engine: sa.Engine) -> None:
    keys = _together(20, lambda i: catalog.signing_key(engine))
    assert all(isinstance(k, bytes) for k in keys), keys
    assert len(set(keys)) == 1


def _race(
    engine: sa.Engine, competitor: Callable[[sa.Connection], object], call: Callable[[], Any]
) -> Any:
    """``call()`` while another transaction does ``competitor`` and commits only once
    ``call`` waits for it: on PostgreSQL, after ``call`` has read and found nothing."""
    with ThreadPoolExecutor(1) as pool:
        with write(engine) as conn:
            competitor(conn)
            future = pool.submit(call)
            wait_until_blocked(engine, conn)
        try:
            return future.result(timeout=30)
        except Exception as e:
            return e


def _name_row(pdh: str, version: int) -> dict[str, object]:
    return {
        "name": "raced",
        "pdh": pdh,
        "version": version,
        "owner": "bob",
        "updated_at": time.time(),
        "updated_by": "bob",
    }


def test_a_creation_that_loses_a_race_is_a_conflict(engine: sa.Engine) -> None:
    def create(conn: sa.Connection) -> None:
        conn.execute(schema.names.insert().values(_name_row(P1, 1)))

    result = _race(
        engine, create, lambda: catalog.set_name(engine, "raced", P2, expect=None, user="alice")
    )
    assert isinstance(result, ConflictError), result
    assert P1 in str(result)
    assert catalog.get_name(engine, "raced").pdh == P1


def test_a_swap_that_loses_a_race_is_a_conflict(engine: sa.Engine) -> None:
    catalog.set_name(engine, "raced", P1, expect=None, user="bob")

    def swap(conn: sa.Connection) -> None:
        conn.execute(
            schema.names.update().where(schema.names.c.name == "raced").values(_name_row(P2, 2))
        )

    result = _race(
        engine, swap, lambda: catalog.set_name(engine, "raced", P3, expect=P1, user="bob")
    )
    assert isinstance(result, ConflictError), result
    assert P2 in str(result)
    assert catalog.get_name(engine, "raced").pdh == P2


def test_a_user_added_twice_at_once_is_a_conflict(engine: sa.Engine) -> None:
    def add(conn: sa.Connection) -> None:
        conn.execute(schema.users.insert().values(name="bob", admin=False, created_at=0.0))

    result = _race(engine, add, lambda: catalog.add_user(engine, "bob"))
    assert isinstance(result, ConflictError), result


def test_a_collection_recorded_twice_at_once_is_recorded_once(engine: sa.Engine) -> None:
    first = catalog.CollectionRecord(P4, "x+1", 1, 1, 1.0, "bob", None)

    def add(conn: sa.Connection) -> None:
        conn.execute(schema.collections.insert().values(**dataclasses.asdict(first)))

    result = _race(
        engine, add, lambda: catalog.add_collection(engine, P4, "x+1", 1, 1, "alice", "{}")
    )
    assert isinstance(result, catalog.CollectionRecord), result
    assert result.created_by == "bob"
    assert catalog.get_collection(engine, P4).file_md5s == "{}"


def test_a_keep_service_registered_twice_at_once_is_one_service(engine: sa.Engine) -> None:
    url = "http://127.0.0.1:9001"
    sid = service_id(url)

    def add(conn: sa.Connection) -> None:
        conn.execute(
            schema.keep_services.insert().values(id=sid, url=url, registered_at=0, last_seen=0)
        )

    result = _race(engine, add, lambda: catalog.register_keep_service(engine, url))
    assert isinstance(result, catalog.KeepService), result
    [service] = catalog.list_keep_services(engine)
    assert service.id == sid and service.last_seen > 0


def test_the_first_signing_key_wins_a_race(engine: sa.Engine) -> None:
    def add(conn: sa.Connection) -> None:
        conn.execute(schema.settings.insert().values(key="blob_signing_key", value="f" * 64))

    result = _race(engine, add, lambda: catalog.signing_key(engine))
    assert result == b"f" * 64


def test_a_writer_granted_twice_at_once_is_granted(engine: sa.Engine) -> None:
    catalog.set_name(engine, "raced", P1, expect=None, user="alice")

    def grant(conn: sa.Connection) -> None:
        conn.execute(schema.name_writers.insert().values(name="raced", user="bob"))

    result = _race(engine, grant, lambda: catalog.add_writer(engine, "raced", "bob", user="alice"))
    assert result is None, result
    catalog.set_name(engine, "raced", P2, expect=P1, user="bob")


UPGRADE = """
import sys
from warehouse import catalog
engine = catalog.open_engine(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
catalog.upgrade(engine)
"""


@pytest.mark.parametrize("start", ["empty", "0010_placement"])
def test_processes_upgrading_a_fresh_catalog_at_once_all_succeed(
    catalog_url: str, start: str
) -> None:
    # An empty catalog is created from schema.py; an older one goes through Alembic.
    if start != "empty":
        older = catalog.open_engine(catalog_url)
        cfg = Config()
        cfg.set_main_option("script_location", "warehouse.catalog:migrations")
        with write(older) as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, start)
        assert current_revision(older) == start
        older.dispose()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", UPGRADE, catalog_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    for p in procs:  # every process has imported and connected: release them together
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    errors = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 2, errors
    engine = catalog.open_engine(catalog_url)
    try:
        assert current_revision(engine) == HEAD_REVISION
        assert {"names", "users", "settings"} <= set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_a_name_points_only_at_a_recorded_collection(engine: sa.Engine) -> None:
    with pytest.raises(NotFoundError):
        catalog.set_name(engine, "n", "e" * 32 + "+5", expect=None, user="alice")
    catalog.set_name(engine, "n", P1, expect=None, user="alice")
    again = catalog.set_name(engine, "n", P1, expect=None, user="alice")
    assert again.version == 1, "setting what it holds changes nothing"
    with pytest.raises(ConflictError):
        catalog.set_name(engine, "n", P1, expect=None, create=True, user="alice")
    assert len(catalog.name_log(engine, "n")) == 1


@pytest.mark.parametrize("package", ["catalog", "jobs"])
def test_every_public_name_of_a_lazy_package_loads(package: str) -> None:
    import importlib

    module = importlib.import_module(f"warehouse.{package}")
    assert sorted(module.__all__) == sorted(module._WHERE)
    for name in module.__all__:
        assert getattr(module, name) is not None
    with pytest.raises(AttributeError):
        _ = module.no_such_thing
