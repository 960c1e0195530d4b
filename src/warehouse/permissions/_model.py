"""The values a permission decision is made of: levels, modes, principals, grants.

Plain values only (no database, no HTTP): the catalog reads them from its
tables, the controller passes them to ``_decide``.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from warehouse.errors import UsageError

__all__ = [
    "GRANTEE_KINDS",
    "Grant",
    "GroupRecord",
    "Level",
    "Mode",
    "Perms",
    "Principal",
    "check_target",
    "parse_level",
    "parse_mode",
]


class Level(enum.IntEnum):
    """What a principal may do with an object; each level includes those below."""

    NONE = 0
    READ = 1  # list it, read it, be given block signatures for it
    WRITE = 2  # change it: move a name, cancel a job
    MANAGE = 3  # change who may do what: share, unshare

    def __str__(self) -> str:
        return self.name.lower()


_GRANTABLE = {"read": Level.READ, "write": Level.WRITE, "manage": Level.MANAGE}


def parse_level(text: str) -> Level:
    """A level a grant may give: ``read``, ``write`` or ``manage``."""
    try:
        return _GRANTABLE[text]
    except KeyError:
        raise UsageError(f"bad level {text!r}: use read, write or manage") from None


class Mode(enum.StrEnum):
    """An installation's reading rule (docs/permissions.md)."""

    OPEN = "open"  # every user reads everything (the default, as before grants)
    PRIVATE = "private"  # nothing is readable unless owned or granted


def parse_mode(text: str) -> Mode:
    try:
        return Mode(text)
    except ValueError:
        raise UsageError(f"bad permission mode {text!r}: use open or private") from None


GRANTEE_KINDS = ("user", "group")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who asks: a user, the groups it belongs to, and whether it is an admin."""

    user: str
    groups: frozenset[str] = frozenset()
    admin: bool = False

    def is_(self, kind: str, name: str) -> bool:
        """Whether a grant (or ownership) to ``kind`` ``name`` is one to this principal."""
        if kind == "user":
            return name == self.user
        return kind == "group" and name in self.groups


@dataclass(frozen=True, slots=True)
class Grant:
    """``level`` on ``target`` for the user or group ``grantee``.

    ``target`` is a project or name path (``lab``, ``lab/run42``), a PDH, or
    ``job:ID`` / ``run:ID``.
    """

    target: str
    grantee_kind: str
    grantee: str
    level: Level


# Segments as names are spelled (catalog.values.check_name), joined by "/";
# or "job:N" / "run:N"; PDHs are checked by the caller (warehouse.keys).
_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9._@+=-]{0,254}"
_PATH = re.compile(rf"{_SEGMENT}(/{_SEGMENT})*")
_NUMBERED = re.compile(r"(job|run):[1-9][0-9]{0,17}")


def check_target(target: str) -> str:
    """``target`` if it may be the target of a grant (a PDH aside)."""
    if len(target) <= 1024 and (_PATH.fullmatch(target) or _NUMBERED.fullmatch(target)):
        return target
    raise UsageError(
        f"bad key {target[:300]!r}: give a name or project (lab, lab/run42), a PDH, "
        "job:ID or run:ID"
    )


@dataclass(frozen=True, slots=True)
class GroupRecord:
    name: str
    owner: str  # the user who made it: it adds and removes members
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Perms:
    """What ``wh perms KEY`` shows: the owners (kind, name), the grants that
    apply (on the key and the projects above it), the caller's own level and
    the installation's mode."""

    key: str
    owners: tuple[tuple[str, str], ...]
    grants: tuple[Grant, ...]
    level: Level
    mode: Mode
