"""The permission decisions (pure): levels, owners, grants down a project, modes."""

from __future__ import annotations

import pytest

from warehouse.errors import ForbiddenError, NotFoundError, UsageError
from warehouse.permissions import (
    Grant,
    Level,
    Mode,
    Principal,
    check_target,
    collection_level,
    level_of,
    parse_level,
    parse_mode,
    project_paths,
    refusal,
)

ALICE = Principal("alice")
BOB = Principal("bob", frozenset({"lab"}))
ADMIN = Principal("root", admin=True)


def _name_level(who: Principal, name: str, grants: list[Grant], mode: Mode = Mode.PRIVATE) -> Level:
    return level_of(
        who, owners=[("user", "alice")], targets=project_paths(name), grants=grants, mode=mode
    )


def test_project_paths_run_from_the_outermost_project_down() -> None:
    assert project_paths("lab") == ("lab",)
    assert project_paths("lab/run42/a") == ("lab", "lab/run42", "lab/run42/a")


def test_the_owner_manages_and_nobody_else_reads_in_private_mode() -> None:
    assert _name_level(ALICE, "lab/run42", []) is Level.MANAGE
    assert _name_level(BOB, "lab/run42", []) is Level.NONE
    assert _name_level(ADMIN, "lab/run42", []) is Level.MANAGE


def test_open_mode_lets_everyone_read_but_not_write() -> None:
    assert _name_level(BOB, "lab/run42", [], Mode.OPEN) is Level.READ
    write = [Grant("lab", "user", "bob", Level.WRITE)]
    assert _name_level(BOB, "lab/run42", write, Mode.OPEN) is Level.WRITE


def test_a_grant_on_a_project_applies_to_everything_below_it() -> None:
    grants = [Grant("lab", "group", "lab", Level.READ)]
    assert _name_level(BOB, "lab/run42", grants) is Level.READ
    assert _name_level(BOB, "lab", grants) is Level.READ
    # Not to a project that merely starts with the same letters, nor above it.
    assert _name_level(BOB, "labs/run42", grants) is Level.NONE
    deeper = [Grant("lab/run42", "user", "bob", Level.WRITE)]
    assert _name_level(BOB, "lab", deeper) is Level.NONE


def test_the_highest_grant_wins_and_others_grants_do_not_count() -> None:
    grants = [
        Grant("lab", "group", "lab", Level.READ),
        Grant("lab/run42", "user", "bob", Level.MANAGE),
        Grant("lab", "user", "carol", Level.MANAGE),
        Grant("lab", "group", "other", Level.MANAGE),
    ]
    assert _name_level(BOB, "lab/run42", grants) is Level.MANAGE
    assert _name_level(BOB, "lab/run43", grants) is Level.READ


def test_a_group_that_owns_gives_its_members_manage() -> None:
    level = level_of(BOB, owners=[("group", "lab")], targets=["x"], grants=[], mode=Mode.PRIVATE)
    assert level is Level.MANAGE
    # A user named like the group is not the group.
    assert Principal("lab").is_("group", "lab") is False


def test_a_collection_is_read_by_its_holders_through_a_grant_or_a_readable_name() -> None:
    pdh = "d41d8cd98f00b204e9800998ecf8427e+0"

    def level(who: Principal, names: list[Level], grants: list[Grant]) -> Level:
        return collection_level(
            who, pdh=pdh, holders=["alice"], through=names, grants=grants, mode=Mode.PRIVATE
        )

    assert level(ALICE, [], []) is Level.MANAGE
    assert level(BOB, [], []) is Level.NONE
    assert level(BOB, [Level.NONE], []) is Level.NONE
    # A name bob may write gives him only read on what it points at.
    assert level(BOB, [Level.NONE, Level.WRITE], []) is Level.READ
    assert level(BOB, [], [Grant(pdh, "user", "bob", Level.READ)]) is Level.READ


def test_refusals_hide_what_cannot_be_read_and_forbid_what_cannot_be_changed() -> None:
    assert refusal("name 'x'", Level.READ, Level.READ) is None
    hidden = refusal("name 'x'", Level.WRITE, Level.NONE)
    assert isinstance(hidden, NotFoundError) and str(hidden) == "no name 'x'"
    assert isinstance(refusal("name 'x'", Level.WRITE, Level.READ), ForbiddenError)


def test_levels_modes_and_keys_are_checked() -> None:
    assert parse_level("write") is Level.WRITE and str(Level.MANAGE) == "manage"
    assert parse_mode("private") is Mode.PRIVATE
    for bad in ("none", "READ", ""):
        with pytest.raises(UsageError):
            parse_level(bad)
    with pytest.raises(UsageError):
        parse_mode("closed")
    for good in ("lab", "lab/run42", "job:12", "run:3"):
        assert check_target(good) == good
    for bad in ("", "/lab", "lab/", "lab//x", "../x", "job:0", "job:x", "a b"):
        with pytest.raises(UsageError):
            check_target(bad)
