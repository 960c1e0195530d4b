"""Permission decisions as pure functions: values in, a level out (no I/O).

The rules (docs/permissions.md): admins manage everything; an owner (a user,
or a group the principal is in) manages what it owns; a grant on an object,
or on any project above it, gives its level to its grantee; in ``open`` mode
every user reads everything besides.
"""

from __future__ import annotations

from collections.abc import Iterable

from warehouse.errors import ForbiddenError, NotFoundError
from warehouse.permissions._model import Grant, Level, Mode, Principal

__all__ = [
    "Owner",
    "collection_level",
    "granted_level",
    "level_of",
    "project_paths",
    "refusal",
]

# An owner as the catalog keeps it: (kind, name), kind "user" or "group".
Owner = tuple[str, str]


def project_paths(path: str) -> tuple[str, ...]:
    """``path`` and every project above it, outermost first:
    ``lab/run42/a`` -> ``("lab", "lab/run42", "lab/run42/a")``."""
    parts = path.split("/")
    return tuple("/".join(parts[: i + 1]) for i in range(len(parts)))


def granted_level(principal: Principal, targets: Iterable[str], grants: Iterable[Grant]) -> Level:
    """The highest level the grants on any of ``targets`` give ``principal``."""
    wanted = set(targets)
    best = Level.NONE
    for grant in grants:
        if grant.target in wanted and principal.is_(grant.grantee_kind, grant.grantee):
            best = max(best, grant.level)
    return best


def level_of(
    principal: Principal,
    *,
    owners: Iterable[Owner],
    targets: Iterable[str],
    grants: Iterable[Grant],
    mode: Mode,
) -> Level:
    """What ``principal`` may do with one object.

    ``owners``: who owns it; ``targets``: the keys grants on it are made on
    (its own, and for a name the projects above it: ``project_paths``);
    ``grants``: grants on those targets (others are ignored).
    """
    if principal.admin:
        return Level.MANAGE
    if any(principal.is_(kind, name) for kind, name in owners):
        return Level.MANAGE
    level = granted_level(principal, targets, grants)
    if mode is Mode.OPEN:
        level = max(level, Level.READ)
    return level


def collection_level(
    principal: Principal,
    *,
    pdh: str,
    holders: Iterable[str],
    through: Iterable[Level],
    grants: Iterable[Grant],
    mode: Mode,
) -> Level:
    """What ``principal`` may do with the collection ``pdh``.

    A collection is content: whoever recorded it (``holders``, users who put
    it, which needs every block signed for them) held all its bytes, and
    manages it. Otherwise it is read through a grant on its PDH, or through
    anything leading to it that the principal may read (``through``: the
    principal's level on each name pointing at it and each job that made it).
    These give at most read: writing a name moves the name, not the bytes.
    """
    level = level_of(
        principal,
        owners=[("user", h) for h in holders],
        targets=[pdh],
        grants=grants,
        mode=mode,
    )
    if level < Level.READ and any(n >= Level.READ for n in through):
        level = Level.READ
    return level


def refusal(what: str, needed: Level, level: Level) -> Exception | None:
    """The error to raise when ``level`` falls short of ``needed``, else None.

    An object the principal may not even read is "not found", worded as for
    one that does not exist, so a private object's existence does not leak;
    one it reads but may not change is "forbidden".
    """
    if level >= needed:
        return None
    if level < Level.READ:
        return NotFoundError(f"no {what}")
    return ForbiddenError(f"{what}: this needs {needed} permission")
