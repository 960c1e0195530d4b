"""Groups, grants and the installation's permission mode, kept in the catalog.

The decisions are ``warehouse.permissions``'s (pure); this module reads what
they need (owners, holders, memberships, grants) and records changes to
them. Rules: docs/permissions.md.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import sqlalchemy as sa

from warehouse.catalog.db import by_code_point, connect, duplicate_key, write
from warehouse.catalog.schema import (
    collection_holders,
    collections,
    grants,
    group_members,
    groups,
    jobs,
    names,
    settings,
    users,
    workflow_runs,
)
from warehouse.catalog.values import check_account
from warehouse.errors import ConflictError, ForbiddenError, NotFoundError
from warehouse.keys import is_pdh
from warehouse.permissions import (
    Grant,
    GroupRecord,
    Level,
    Mode,
    Owner,
    Perms,
    Principal,
    check_target,
    collection_level,
    level_of,
    parse_mode,
    project_paths,
    refusal,
)

__all__ = [
    "GroupRecord",
    "Perms",
    "add_group",
    "add_member",
    "check_key",
    "collection_level_in",
    "get_mode",
    "granted_ids",
    "job_level_in",
    "key_level",
    "list_groups",
    "mode_in",
    "name_level_for",
    "name_level_in",
    "name_levels_in",
    "perms",
    "principal_in",
    "principal_of",
    "readable_among",
    "remove_member",
    "require_read",
    "run_level_in",
    "set_mode",
    "share",
    "unshare",
]

MODE_KEY = "permission_mode"


# -- the mode -----------------------------------------------------------------


def get_mode(engine: sa.Engine) -> Mode:
    """The installation's mode; ``open`` when none was ever set (an upgrade)."""
    with connect(engine) as conn:
        return mode_in(conn)


def mode_in(conn: sa.Connection) -> Mode:
    return _mode(conn.execute(_MODE).scalar())


_MODE = sa.select(settings.c.value).where(settings.c.key == MODE_KEY)


def _mode(value: str | None) -> Mode:
    return Mode.OPEN if value is None else parse_mode(value)


def set_mode(engine: sa.Engine, mode: Mode, by: Principal) -> None:
    if not by.admin:
        raise ForbiddenError("only an admin sets the permission mode")
    with write(engine) as conn:
        done = conn.execute(
            settings.update().where(settings.c.key == MODE_KEY).values(value=mode.value)
        )
        if not done.rowcount:
            conn.execute(settings.insert().values(key=MODE_KEY, value=mode.value))


# -- principals and groups ----------------------------------------------------


def principal_of(engine: sa.Engine, user: str, *, admin: bool) -> Principal:
    with connect(engine) as conn:
        return principal_in(conn, user, admin)


def granted_ids(engine: sa.Engine, who: Principal, kind: str) -> list[int]:
    """The ids of the ``kind`` objects (``job``, ``run``) granted to ``who``
    (to the user or one of its groups), at any level: a list may then be
    filtered in SQL, by owner or these ids."""
    g = grants.c
    to_who = ((g.grantee_kind == "user") & (g.grantee == who.user)) | (
        (g.grantee_kind == "group") & g.grantee.in_(sorted(who.groups))
    )
    query = sa.select(g.target).where(g.target.startswith(f"{kind}:"), to_who)
    with connect(engine) as conn:
        targets = conn.execute(query).scalars()
        return sorted({int(t.partition(":")[2]) for t in targets})


def principal_in(conn: sa.Connection, user: str, admin: bool) -> Principal:
    found = conn.execute(
        sa.select(group_members.c.group_name).where(group_members.c.user == user)
    ).scalars()
    return Principal(user, frozenset(found), admin)


def add_group(engine: sa.Engine, name: str, by: Principal) -> GroupRecord:
    """A new group owned by ``by``'s user (who adds and removes its members)."""
    check_account(name)
    try:
        with write(engine) as conn:
            if conn.execute(sa.select(users.c.name).where(users.c.name == name)).first():
                raise ConflictError(f"{name!r} is a user's name: a group needs another")
            if conn.execute(sa.select(groups.c.name).where(groups.c.name == name)).first():
                raise ConflictError(f"group {name!r} exists")
            conn.execute(groups.insert().values(name=name, owner=by.user, created_at=time.time()))
    except sa.exc.IntegrityError as e:
        if not duplicate_key(e):
            raise
        raise ConflictError(f"group {name!r} exists") from None
    return GroupRecord(name, by.user, ())


def list_groups(engine: sa.Engine) -> list[GroupRecord]:
    """Every group, in code point order, with its members."""
    with connect(engine) as conn:
        rows = conn.execute(sa.select(groups).order_by(by_code_point(engine, groups.c.name)))
        found = [(r.name, r.owner) for r in rows]
        members: dict[str, list[str]] = {}
        for group, user in conn.execute(
            sa.select(group_members.c.group_name, group_members.c.user)
        ):
            members.setdefault(group, []).append(user)
    return [GroupRecord(n, o, tuple(sorted(members.get(n, ())))) for n, o in found]


def _group_to_change(conn: sa.Connection, group: str, by: Principal) -> None:
    owner = conn.execute(sa.select(groups.c.owner).where(groups.c.name == group)).scalar()
    if owner is None:
        raise NotFoundError(f"no group {group!r}")
    if not (by.admin or owner == by.user):
        raise ForbiddenError(f"only group {group!r}'s owner or an admin changes its members")


def add_member(engine: sa.Engine, group: str, user: str, by: Principal) -> None:
    check_account(group)
    check_account(user)
    try:
        with write(engine) as conn:
            _group_to_change(conn, group, by)
            if conn.execute(sa.select(users.c.name).where(users.c.name == user)).first() is None:
                raise NotFoundError(f"no user {user!r}")
            mine = (group_members.c.group_name == group) & (group_members.c.user == user)
            if conn.execute(sa.select(group_members.c.user).where(mine)).first() is None:
                conn.execute(group_members.insert().values(group_name=group, user=user))
    except sa.exc.IntegrityError as e:
        if not duplicate_key(e):  # added twice at once: added
            raise


def remove_member(engine: sa.Engine, group: str, user: str, by: Principal) -> None:
    check_account(group)
    check_account(user)
    with write(engine) as conn:
        _group_to_change(conn, group, by)
        mine = (group_members.c.group_name == group) & (group_members.c.user == user)
        if not conn.execute(group_members.delete().where(mine)).rowcount:
            raise NotFoundError(f"{user!r} is not a member of group {group!r}")


# -- levels -------------------------------------------------------------------


def check_key(key: str) -> str:
    """``key`` if it may be shared: a PDH, a name or project path, job:ID, run:ID."""
    return key if is_pdh(key) else check_target(key)


def _grants_on(conn: sa.Connection, targets: Iterable[str]) -> list[Grant]:
    wanted = sorted(set(targets))
    if not wanted:
        return []
    rows = conn.execute(sa.select(grants).where(grants.c.target.in_(wanted)))
    return [Grant(r.target, r.grantee_kind, r.grantee, Level[r.level.upper()]) for r in rows]


def _name_level(
    conn: sa.Connection, who: Principal, name: str, owner: str | None, mode: Mode
) -> Level:
    targets = project_paths(name)
    owners = [] if owner is None else [("user", owner)]
    found = _grants_on(conn, targets)
    return level_of(who, owners=owners, targets=targets, grants=found, mode=mode)


def name_level_in(conn: sa.Connection, who: Principal, name: str, mode: Mode) -> tuple[Level, bool]:
    """``who``'s level on the name ``name``, and whether the name exists."""
    owner = conn.execute(sa.select(names.c.owner).where(names.c.name == name)).scalar()
    return _name_level(conn, who, name, owner, mode), owner is not None


def name_level_for(conn: sa.Connection, user: str, admin: bool, name: str) -> tuple[Level, bool]:
    """``name_level_in`` for ``user``, reading the mode with the name's owner:
    one read when ``user`` owns the name (its groups and the grants then
    change nothing: an owner manages), three otherwise."""
    mode_value, owner = conn.execute(
        sa.select(_MODE.scalar_subquery(), _owner_of(name).scalar_subquery())
    ).one()
    if admin or owner == user:
        return Level.MANAGE, owner is not None
    who = principal_in(conn, user, admin)
    return _name_level(conn, who, name, owner, _mode(mode_value)), owner is not None


# Keys a statement asks about at most (an IN list).
_AT_ONCE = 500


def name_levels_in(
    conn: sa.Connection, who: Principal, found: list[str], mode: Mode
) -> dict[str, Level]:
    """``who``'s level on each name of ``found`` that exists, in a few reads
    for the whole list (its owners, then the grants on every path above the
    names it does not own), not two a name."""
    owners: dict[str, str] = {}
    wanted = sorted(set(found))
    for i in range(0, len(wanted), _AT_ONCE):
        query = sa.select(names.c.name, names.c.owner).where(
            names.c.name.in_(wanted[i : i + _AT_ONCE])
        )
        owners.update((n, o) for n, o in conn.execute(query))
    others = [n for n, o in owners.items() if not who.is_("user", o)]
    paths = sorted({p for n in others for p in project_paths(n)})
    found_grants: list[Grant] = []
    for i in range(0, len(paths), _AT_ONCE):
        found_grants += _grants_on(conn, paths[i : i + _AT_ONCE])
    levels = {n: Level.MANAGE for n, o in owners.items() if who.is_("user", o)}
    for n in others:
        targets = project_paths(n)
        levels[n] = level_of(
            who, owners=[("user", owners[n])], targets=targets, grants=found_grants, mode=mode
        )
    return levels


def _owner_of(name: str) -> sa.Select[tuple[str]]:
    return sa.select(names.c.owner).where(names.c.name == name)


def job_level_in(
    conn: sa.Connection, who: Principal, ident: int, submitter: str, mode: Mode
) -> Level:
    target = f"job:{ident}"
    found = _grants_on(conn, [target])
    return level_of(who, owners=[("user", submitter)], targets=[target], grants=found, mode=mode)


def run_level_in(conn: sa.Connection, who: Principal, ident: int, owner: str, mode: Mode) -> Level:
    target = f"run:{ident}"
    found = _grants_on(conn, [target])
    return level_of(who, owners=[("user", owner)], targets=[target], grants=found, mode=mode)


def collection_level_in(conn: sa.Connection, who: Principal, pdh: str, mode: Mode) -> Level:
    """``who``'s level on the collection ``pdh`` (recorded or not: the caller
    says "not found" alike for both when it is below read)."""
    if who.admin:
        return Level.MANAGE
    holders = conn.execute(
        sa.select(collection_holders.c.user).where(collection_holders.c.pdh == pdh)
    ).scalars()
    level = collection_level(
        who, pdh=pdh, holders=list(holders), through=(), grants=_grants_on(conn, [pdh]), mode=mode
    )
    if level >= Level.MANAGE:
        return level
    # What a job made (its output or log) is its submitter's, who had to read
    # its input; whoever reads the job reads it too.
    made = sa.select(jobs.c.id, jobs.c.submitted_by).where(
        (jobs.c.output_pdh == pdh) | (jobs.c.log_pdh == pdh)
    )
    for ident, submitter in conn.execute(made):
        if who.is_("user", submitter):
            return Level.MANAGE
        if level < Level.READ and job_level_in(conn, who, ident, submitter, mode) >= Level.READ:
            level = Level.READ
    if level >= Level.READ:
        return level
    # Read through a name on it.
    for name, owner in conn.execute(
        sa.select(names.c.name, names.c.owner).where(names.c.pdh == pdh)
    ):
        if _name_level(conn, who, name, owner, mode) >= Level.READ:
            return Level.READ
    return level


def require_read(engine: sa.Engine, user: str, admin: bool, pdh: str) -> None:
    """NotFoundError, worded as for a collection never recorded, unless ``user``
    may read ``pdh``. In open mode (and for admins) it costs one read or none."""
    if admin:
        return
    held = (collection_holders.c.pdh == pdh) & (collection_holders.c.user == user)
    with connect(engine) as conn:
        # The mode and whether the caller recorded it, in one read: a holder
        # manages it, so its groups and the grants are not read.
        mode_value, holds = conn.execute(
            sa.select(_MODE.scalar_subquery(), sa.exists().where(held))
        ).one()
        mode = _mode(mode_value)
        if mode is Mode.OPEN or holds:
            return
        level = collection_level_in(conn, principal_in(conn, user, admin), pdh, mode)
    problem = refusal(f"collection {pdh}", Level.READ, level)
    if problem is not None:
        raise problem


def readable_among(engine: sa.Engine, user: str, pdhs: Iterable[str]) -> set[str]:
    """Of the collections ``pdhs``, those ``user`` may read, for whoever acts
    for it (a job's submission, in the API or in the background): its admin
    flag as the catalog keeps it. A user the catalog does not hold is an
    embedded warehouse's own, which is its admin. Open mode: one read."""
    wanted = set(pdhs)
    if not wanted:
        return wanted
    with connect(engine) as conn:
        mode_value, admin = conn.execute(
            sa.select(
                _MODE.scalar_subquery(),
                sa.select(users.c.admin).where(users.c.name == user).scalar_subquery(),
            )
        ).one()
        mode = _mode(mode_value)
        if mode is Mode.OPEN or admin is None or admin:
            return wanted
        # What the user recorded, or a job of its made, it manages (as
        # collection_level_in finds): asked for the whole batch in a few
        # reads, not three a collection (a workflow's submission asks many).
        mine = _held_or_made(conn, user, sorted(wanted))
        rest = wanted - mine
        if not rest:
            return mine
        who = principal_in(conn, user, False)
        return mine | {p for p in rest if collection_level_in(conn, who, p, mode) >= Level.READ}


def _held_or_made(conn: sa.Connection, user: str, pdhs: list[str]) -> set[str]:
    """Those of ``pdhs`` ``user`` recorded (a holder) or a job it submitted made."""
    found: set[str] = set()
    for i in range(0, len(pdhs), _AT_ONCE):
        part = pdhs[i : i + _AT_ONCE]
        held = sa.select(collection_holders.c.pdh).where(
            collection_holders.c.user == user, collection_holders.c.pdh.in_(part)
        )
        found.update(conn.execute(held).scalars())
        # Outputs first (indexed); a log only for what is left.
        for column in (jobs.c.output_pdh, jobs.c.log_pdh):
            left = [p for p in part if p not in found]
            if not left:
                break
            made = sa.select(column).where(jobs.c.submitted_by == user, column.in_(left))
            found.update(p for p in conn.execute(made).scalars() if p is not None)
    return found


def _owners_and_targets(conn: sa.Connection, key: str) -> tuple[list[Owner], tuple[str, ...], bool]:
    """Who owns ``key``, the targets grants on it are made on, and whether it exists."""
    if is_pdh(key):
        held = conn.execute(
            sa.select(collection_holders.c.user).where(collection_holders.c.pdh == key)
        ).scalars()
        exists = conn.execute(sa.select(collections.c.pdh).where(collections.c.pdh == key)).first()
        return [("user", h) for h in held], (key,), exists is not None
    kind, _, number = key.partition(":")
    if kind in ("job", "run") and number.isdigit():
        table, column = (
            (jobs, jobs.c.submitted_by)
            if kind == "job"
            else (
                workflow_runs,
                workflow_runs.c.owner,
            )
        )
        owner = conn.execute(sa.select(column).where(table.c.id == int(number))).scalar()
        return ([] if owner is None else [("user", owner)]), (key,), owner is not None
    owner = conn.execute(sa.select(names.c.owner).where(names.c.name == key)).scalar()
    # A project need not exist as a name: grants on it are made ahead.
    return ([] if owner is None else [("user", owner)]), project_paths(key), True


def _level_in(conn: sa.Connection, who: Principal, key: str, mode: Mode) -> tuple[Level, bool]:
    owners, targets, exists = _owners_and_targets(conn, key)
    if is_pdh(key):
        return collection_level_in(conn, who, key, mode), exists
    found = _grants_on(conn, targets)
    return level_of(who, owners=owners, targets=targets, grants=found, mode=mode), exists


def key_level(engine: sa.Engine, who: Principal, key: str) -> Level:
    """``who``'s level on ``key`` (NONE for one that does not exist)."""
    check_key(key)
    with connect(engine) as conn:
        level, exists = _level_in(conn, who, key, mode_in(conn))
    return level if exists else Level.NONE


# -- sharing ------------------------------------------------------------------


def _grantee(conn: sa.Connection, who: str) -> tuple[str, str]:
    """A group of that name if there is one, else a user (docs/permissions.md)."""
    check_account(who)
    if conn.execute(sa.select(groups.c.name).where(groups.c.name == who)).first():
        return "group", who
    if conn.execute(sa.select(users.c.name).where(users.c.name == who)).first():
        return "user", who
    raise NotFoundError(f"no user or group {who!r}")


def _to_manage(conn: sa.Connection, key: str, by: Principal) -> None:
    level, exists = _level_in(conn, by, key, mode_in(conn))
    problem = refusal(repr(key), Level.MANAGE, level if exists else Level.NONE)
    if problem is not None:
        raise problem


def share(engine: sa.Engine, key: str, who: str, level: Level, by: Principal) -> Grant:
    """Give ``who`` (a group, else a user) ``level`` on ``key``, replacing its
    earlier grant there. Needs manage on ``key``."""
    check_key(key)
    row = {"target": key, "level": str(level), "granted_by": by.user, "granted_at": time.time()}
    for attempt in range(2):
        try:
            with write(engine) as conn:
                _to_manage(conn, key, by)
                kind, name = _grantee(conn, who)
                mine = (
                    (grants.c.target == key)
                    & (grants.c.grantee_kind == kind)
                    & (grants.c.grantee == name)
                )
                conn.execute(grants.delete().where(mine))
                conn.execute(grants.insert().values(**row, grantee_kind=kind, grantee=name))
            return Grant(key, kind, name, level)
        except sa.exc.IntegrityError as e:
            # Shared twice at once (PostgreSQL): the second writes over the first.
            if not duplicate_key(e) or attempt:
                raise
    raise AssertionError("unreachable")


def unshare(engine: sa.Engine, key: str, who: str, by: Principal) -> None:
    """Take back ``who``'s grant on ``key`` (NotFoundError if it has none)."""
    check_key(key)
    with write(engine) as conn:
        _to_manage(conn, key, by)
        kind, name = _grantee(conn, who)
        mine = (
            (grants.c.target == key) & (grants.c.grantee_kind == kind) & (grants.c.grantee == name)
        )
        if not conn.execute(grants.delete().where(mine)).rowcount:
            raise NotFoundError(f"{kind} {name!r} has no grant on {key!r}")


def perms(engine: sa.Engine, key: str, by: Principal) -> Perms:
    """Owners and grants of ``key``, for a caller who may read it."""
    check_key(key)
    with connect(engine) as conn:
        mode = mode_in(conn)
        level, exists = _level_in(conn, by, key, mode)
        problem = refusal(repr(key), Level.READ, level if exists else Level.NONE)
        if problem is not None:
            raise problem
        owners, targets, _ = _owners_and_targets(conn, key)
        found = sorted(
            _grants_on(conn, targets), key=lambda g: (len(g.target), g.target, g.grantee)
        )
    return Perms(key, tuple(owners), tuple(found), level, mode)
