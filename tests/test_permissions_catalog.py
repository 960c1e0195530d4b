"""Groups, grants, holders and the mode in the catalog, on SQLite and PostgreSQL;
the migration that brings them to an existing catalog."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from postgres import fresh_schema
from warehouse import catalog
from warehouse.catalog import grants as perms_db
from warehouse.catalog.db import write
from warehouse.errors import ConflictError, ForbiddenError, NotFoundError, UsageError
from warehouse.permissions import Level, Mode, Principal

P1 = "0123456789abcdef0123456789abcdef+1"
P2 = "fedcba9876543210fedcba9876543210+2"
ROOT = Principal("root", admin=True)


@pytest.fixture
def engine(catalog_engine: sa.Engine) -> sa.Engine:
    for user in ("alice", "bob", "carol"):
        catalog.add_user(catalog_engine, user)
    catalog.add_collection(catalog_engine, P1, "", 1, 1, "alice")
    catalog.set_name(catalog_engine, "run42", P1, expect=None, user="alice")
    return catalog_engine


def _who(engine: sa.Engine, user: str) -> Principal:
    return perms_db.principal_of(engine, user, admin=False)


def test_an_upgraded_catalog_is_open_and_only_an_admin_changes_the_mode(
    engine: sa.Engine,
) -> None:
    assert perms_db.get_mode(engine) is Mode.OPEN
    assert perms_db.key_level(engine, _who(engine, "bob"), P1) is Level.READ
    with pytest.raises(ForbiddenError):
        perms_db.set_mode(engine, Mode.PRIVATE, _who(engine, "alice"))
    perms_db.set_mode(engine, Mode.PRIVATE, ROOT)
    perms_db.set_mode(engine, Mode.PRIVATE, ROOT)  # again: no second row
    assert perms_db.get_mode(engine) is Mode.PRIVATE
    assert perms_db.key_level(engine, _who(engine, "bob"), P1) is Level.NONE
    assert perms_db.key_level(engine, _who(engine, "alice"), P1) is Level.MANAGE


def test_groups_have_an_owner_who_alone_changes_the_members(engine: sa.Engine) -> None:
    alice = _who(engine, "alice")
    perms_db.add_group(engine, "lab", alice)
    with pytest.raises(ConflictError):
        perms_db.add_group(engine, "lab", _who(engine, "bob"))
    with pytest.raises(ConflictError, match="user's name"):
        perms_db.add_group(engine, "bob", alice)
    with pytest.raises(UsageError):
        perms_db.add_group(engine, "../x", alice)
    with pytest.raises(ForbiddenError):
        perms_db.add_member(engine, "lab", "bob", _who(engine, "bob"))
    perms_db.add_member(engine, "lab", "bob", alice)
    perms_db.add_member(engine, "lab", "bob", alice)  # again: still one
    perms_db.add_member(engine, "lab", "carol", ROOT)
    with pytest.raises(NotFoundError):
        perms_db.add_member(engine, "lab", "nobody", alice)
    with pytest.raises(NotFoundError):
        perms_db.add_member(engine, "nogroup", "bob", alice)
    [lab] = perms_db.list_groups(engine)
    assert (lab.name, lab.owner, lab.members) == ("lab", "alice", ("bob", "carol"))
    assert _who(engine, "bob").groups == {"lab"}
    perms_db.remove_member(engine, "lab", "carol", alice)
    with pytest.raises(NotFoundError):
        perms_db.remove_member(engine, "lab", "carol", alice)


def test_a_shared_name_gives_its_collection_and_unsharing_takes_it_back(
    engine: sa.Engine,
) -> None:
    perms_db.set_mode(engine, Mode.PRIVATE, ROOT)
    alice = _who(engine, "alice")
    perms_db.add_group(engine, "lab", alice)
    perms_db.add_member(engine, "lab", "bob", alice)
    bob = _who(engine, "bob")
    # bob may not share what he cannot read, and is told it does not exist.
    with pytest.raises(NotFoundError, match="no 'run42'"):
        perms_db.share(engine, "run42", "bob", Level.READ, bob)
    perms_db.share(engine, "run42", "lab", Level.READ, alice)
    assert perms_db.key_level(engine, bob, "run42") is Level.READ
    assert perms_db.key_level(engine, bob, P1) is Level.READ
    assert perms_db.key_level(engine, _who(engine, "carol"), P1) is Level.NONE
    # Reading is not managing: bob is forbidden (he knows it exists).
    with pytest.raises(ForbiddenError):
        perms_db.share(engine, "run42", "carol", Level.READ, bob)
    shown = perms_db.perms(engine, "run42", bob)
    assert shown.owners == (("user", "alice"),) and shown.level is Level.READ
    assert [(g.grantee_kind, g.grantee, g.level) for g in shown.grants] == [
        ("group", "lab", Level.READ)
    ]
    # Sharing again changes the level; a grant on the collection itself.
    perms_db.share(engine, "run42", "lab", Level.WRITE, alice)
    assert perms_db.key_level(engine, bob, "run42") is Level.WRITE
    perms_db.unshare(engine, "run42", "lab", alice)
    assert perms_db.key_level(engine, bob, P1) is Level.NONE
    with pytest.raises(NotFoundError):
        perms_db.unshare(engine, "run42", "lab", alice)
    perms_db.share(engine, P1, "carol", Level.READ, alice)
    assert perms_db.key_level(engine, _who(engine, "carol"), P1) is Level.READ
    with pytest.raises(NotFoundError, match="no user or group"):
        perms_db.share(engine, P1, "nobody", Level.READ, alice)


def test_the_one_read_checks_agree_with_the_whole_rules(engine: sa.Engine) -> None:
    """``name_level_for`` and ``require_read`` read the mode with the owner (or
    holder) at once; a grant taken back counts at the very next check."""
    with engine.connect() as conn:
        assert perms_db.name_level_for(conn, "alice", False, "run42") == (Level.MANAGE, True)
        assert perms_db.name_level_for(conn, "bob", False, "run42") == (Level.READ, True)
        assert perms_db.name_level_for(conn, "bob", False, "nothing") == (Level.READ, False)
    perms_db.require_read(engine, "bob", False, P1)  # open: everyone reads
    perms_db.set_mode(engine, Mode.PRIVATE, ROOT)
    alice = _who(engine, "alice")
    perms_db.add_group(engine, "lab", alice)
    perms_db.add_member(engine, "lab", "bob", alice)
    perms_db.require_read(engine, "alice", False, P1)  # her own
    for granted in (True, False, True, False):
        if granted:
            perms_db.share(engine, "run42", "lab", Level.WRITE, alice)
        else:
            perms_db.unshare(engine, "run42", "lab", alice)
        with engine.connect() as conn:
            level = perms_db.name_level_for(conn, "bob", False, "run42")
        assert level == ((Level.WRITE if granted else Level.NONE), True)
        if granted:
            perms_db.require_read(engine, "bob", False, P1)  # through the name
        else:
            with pytest.raises(NotFoundError, match="no collection 0123"):
                perms_db.require_read(engine, "bob", False, P1)


def test_levels_of_a_list_of_names_are_those_of_each(engine: sa.Engine) -> None:
    """``name_levels_in`` (a listing's few reads) agrees with ``name_level_in``."""
    for name, user in (("run43", "bob"), ("run44", "carol"), ("lab", "bob")):
        catalog.set_name(engine, name, P1, expect=None, user=user)
    alice = _who(engine, "alice")
    perms_db.add_group(engine, "lab2", alice)
    perms_db.add_member(engine, "lab2", "carol", alice)
    perms_db.share(engine, "run42", "lab2", Level.WRITE, alice)
    perms_db.share(engine, "run43", "alice", Level.READ, _who(engine, "bob"))
    listed = ["run42", "run43", "run44", "lab", "gone"]
    for mode in (Mode.OPEN, Mode.PRIVATE):
        with engine.connect() as conn:
            for user in ("alice", "bob", "carol"):
                who = perms_db.principal_in(conn, user, False)
                levels = perms_db.name_levels_in(conn, who, listed, mode)
                for name in listed[:-1]:
                    one, exists = perms_db.name_level_in(conn, who, name, mode)
                    assert exists and levels[name] is one, (mode, user, name)
                assert "gone" not in levels


def test_a_project_grant_applies_below_it(engine: sa.Engine) -> None:
    perms_db.set_mode(engine, Mode.PRIVATE, ROOT)
    bob = _who(engine, "bob")
    # A project need not exist as a name; an admin hands out its first grant.
    with pytest.raises(NotFoundError):
        perms_db.share(engine, "lab", "bob", Level.READ, _who(engine, "alice"))
    perms_db.share(engine, "lab", "alice", Level.MANAGE, ROOT)
    perms_db.share(engine, "lab", "bob", Level.READ, _who(engine, "alice"))
    assert perms_db.key_level(engine, bob, "lab/run42") is Level.READ
    assert perms_db.key_level(engine, bob, "labs/run42") is Level.NONE


def test_every_recorder_of_a_collection_holds_it(engine: sa.Engine) -> None:
    perms_db.set_mode(engine, Mode.PRIVATE, ROOT)
    catalog.add_collection(engine, P1, "", 1, 1, "bob")  # bob put the same bytes
    assert perms_db.key_level(engine, _who(engine, "bob"), P1) is Level.MANAGE
    assert perms_db.key_level(engine, _who(engine, "carol"), P1) is Level.NONE
    # Not recorded at all: no level, as for one nobody may read.
    assert perms_db.key_level(engine, ROOT, P2) is Level.NONE


def test_jobs_and_runs_are_their_submitters(engine: sa.Engine) -> None:
    perms_db.set_mode(engine, Mode.PRIVATE, ROOT)
    with pytest.raises(NotFoundError):
        perms_db.perms(engine, "job:7", _who(engine, "alice"))
    with pytest.raises(UsageError):
        perms_db.perms(engine, "job:x", _who(engine, "alice"))


def test_the_migration_makes_each_recorder_a_holder(
    catalog_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    other: contextlib.AbstractContextManager[str]
    if catalog_url.startswith("sqlite"):
        other = contextlib.nullcontext(f"sqlite:///{tmp_path / 'old.db'}")
    else:
        other = fresh_schema(request.getfixturevalue("pg_admin"))
    cfg = Config()
    cfg.set_main_option("script_location", "warehouse.catalog:migrations")
    with other as url:
        old = catalog.open_engine(url)
        try:
            with write(old) as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "0012_listing_parts")
                conn.execute(
                    sa.text(
                        "INSERT INTO collections (pdh, manifest_blocks, size, file_count, "
                        "created_at, created_by) VALUES (:p, '', 1, 1, 0, 'alice')"
                    ),
                    {"p": P1},
                )
                conn.execute(
                    sa.text(
                        'INSERT INTO collection_listings (pdh, "user", file_md5s, recorded_at)'
                        " VALUES (:p, 'bob', '{}', 0)"
                    ),
                    {"p": P1},
                )
            catalog.upgrade(old)
            assert perms_db.get_mode(old) is Mode.OPEN
            for user in ("alice", "bob"):
                with old.connect() as conn:
                    level = perms_db.collection_level_in(conn, Principal(user), P1, Mode.PRIVATE)
                assert level is Level.MANAGE
        finally:
            old.dispose()
