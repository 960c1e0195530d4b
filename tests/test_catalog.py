"""The catalog on SQLite: migrations, names with compare-and-swap, accounting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.config import Config
from alembic.script import ScriptDirectory

from warehouse import catalog
from warehouse.catalog.db import HEAD_REVISION, current_revision
from warehouse.errors import ConflictError, ForbiddenError, NotFoundError, UsageError

P1 = "a" * 32 + "+1"
P2 = "b" * 32 + "+2"
P3 = "c" * 32 + "+3"


@pytest.fixture
def engine(tmp_path: Path) -> sa.Engine:
    e = catalog.open_engine(f"sqlite:///{tmp_path / 'c.db'}")
    catalog.upgrade(e)
    return e


def test_head_revision_matches_the_migration_scripts() -> None:
    cfg = Config()
    cfg.set_main_option("script_location", "warehouse.catalog:migrations")
    assert ScriptDirectory.from_config(cfg).get_current_head() == HEAD_REVISION


def test_upgrade_creates_every_table_and_is_idempotent(engine: sa.Engine) -> None:
    assert current_revision(engine) == HEAD_REVISION
    catalog.upgrade(engine)
    tables = set(sa.inspect(engine).get_table_names())
    assert {"collections", "names", "name_history", "name_writers", "block_writes"} <= tables
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


@pytest.mark.parametrize("bad", ["", "a/b", ".hidden", "-x", "x" * 256, "a b", P1, "é"])
def test_bad_names_are_refused(engine: sa.Engine, bad: str) -> None:
    with pytest.raises(UsageError):
        catalog.set_name(engine, bad, P1, expect=None, user="alice")
    assert catalog.list_names(engine) == []


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
    first = catalog.add_collection(engine, P1, "x+1", 1, 1, "alice")
    again = catalog.add_collection(engine, P1, "x+1", 1, 1, "bob")
    assert again == first
    assert [c.pdh for c in catalog.list_collections(engine)] == [P1]
    with pytest.raises(NotFoundError):
        catalog.get_collection(engine, P2)
