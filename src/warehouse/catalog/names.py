"""Names: compare-and-swap pointers to collections, with history (DESIGN §3.3)."""

from __future__ import annotations

import time

import sqlalchemy as sa

from warehouse.catalog.db import by_code_point, connect, duplicate_key, write
from warehouse.catalog.records import require_collection
from warehouse.catalog.schema import grants, name_history, name_writers, names
from warehouse.catalog.values import NameChange, NameRecord, check_name, check_writer
from warehouse.errors import ConflictError, ForbiddenError, NotFoundError, UsageError
from warehouse.keys import Key, is_pdh, name_candidates
from warehouse.keys import split_key as _split

__all__ = [
    "NameChange",
    "NameRecord",
    "add_writer",
    "check_name",
    "check_writer",
    "get_name",
    "list_names",
    "list_writers",
    "name_log",
    "remove_name",
    "remove_writer",
    "set_name",
    "split_key",
]


def split_key(engine: sa.Engine, text: str) -> Key:
    """``text`` split at the name it starts with (``keys.split_key``), every
    candidate looked up in one read. Whoever asks for a user must then check
    that the name is the user's to read, and refuse a hidden one as a key
    naming nothing (docs/permissions.md, "Projects")."""
    candidates = name_candidates(text)
    if len(candidates) == 1:
        return candidates[0]
    heads = [k.head for k in candidates if _valid(k.head)]
    with connect(engine) as conn:
        found = set(conn.execute(sa.select(names.c.name).where(names.c.name.in_(heads))).scalars())
    return _split(text, found.__contains__)


def _valid(name: str) -> bool:
    try:
        check_name(name)
    except UsageError:
        return False
    return True


def _project_clash(conn: sa.Connection, name: str) -> ConflictError | None:
    """Why ``name`` may not be made: a name above it would make it a path
    inside that name's collection, a name in it would make it a project.
    No name is both, so a key has one reading (docs/formats.md, "Keys")."""
    parts = name.split("/")
    if conn.dialect.name == "postgresql":
        # Two makers of lab and lab/x at once: one waits for the other, so
        # the second sees the first's name (SQLite serializes writes anyway).
        conn.execute(
            sa.text("SELECT pg_advisory_xact_lock(hashtext(:project))"),
            {"project": f"wh-project:{parts[0]}"},
        )
    above = ["/".join(parts[:i]) for i in range(1, len(parts))]
    if above:
        query = sa.select(names.c.name).where(names.c.name.in_(above)).limit(1)
        if (hit := conn.execute(query).scalar()) is not None:
            return ConflictError(
                f"name {name!r} cannot be made: {hit!r} is a name, so it cannot be a project"
            )
    inside = name + "/"
    query = (
        sa.select(names.c.name)
        .where(sa.func.substr(names.c.name, 1, len(inside)) == inside)
        .limit(1)
    )
    if conn.execute(query).first() is not None:
        # Which name is not said: it may be one the caller may not read.
        return ConflictError(
            f"name {name!r} cannot be made: it is a project (names are in it), not a name"
        )
    return None


# Built once: read on most requests (building it cost more than running it).
_BY_NAME = sa.select(names).where(names.c.name == sa.bindparam("name"))


def get_name(engine: sa.Engine, name: str) -> NameRecord:
    check_name(name)  # a bad name is bad input (exit 2) when read, as when set
    with connect(engine) as conn:
        row = conn.execute(_BY_NAME, {"name": name}).one_or_none()
    if row is None:
        raise NotFoundError(f"no name {name!r}")
    return NameRecord(**row._mapping)


def list_names(
    engine: sa.Engine, prefix: str = "", *, after: str = "", limit: int | None = None
) -> list[NameRecord]:
    """Names starting with ``prefix`` (case matters), in code point order:
    those after the name ``after``, at most ``limit`` (None: all)."""
    ordered = by_code_point(engine, names.c.name)
    query = sa.select(names).order_by(ordered).limit(limit)
    if prefix:
        # Not LIKE: SQLite's LIKE ignores case, PostgreSQL's does not.
        query = query.where(sa.func.substr(names.c.name, 1, len(prefix)) == prefix)
    if after:
        query = query.where(ordered > after)
    with connect(engine) as conn:
        return [NameRecord(**r._mapping) for r in conn.execute(query)]


def name_log(
    engine: sa.Engine, name: str, *, after: int = 0, limit: int | None = None
) -> list[NameChange]:
    """The changes of ``name`` by version: those after version ``after``, at
    most ``limit`` (None: all). NotFoundError if it never existed (a page
    past its last change is empty)."""
    check_name(name)
    mine = name_history.c.name == name
    query = (
        sa.select(name_history)
        .where(mine, name_history.c.version > after)
        .order_by(name_history.c.version)
        .limit(limit)
    )
    with connect(engine) as conn:
        rows = conn.execute(query).all()
        if not rows and conn.execute(sa.select(name_history.c.name).where(mine)).first() is None:
            raise NotFoundError(f"no name {name!r}")
    return [NameChange(r.name, r.version, r.old_pdh, r.new_pdh, r.by, r.at) for r in rows]


def _may_write(conn: sa.Connection, name: str, owner: str, user: str, admin: bool) -> bool:
    if admin or user == owner:
        return True
    q = sa.select(name_writers).where(name_writers.c.name == name, name_writers.c.user == user)
    return conn.execute(q).first() is not None


def set_name(
    engine: sa.Engine,
    name: str,
    pdh: str,
    *,
    expect: str | None,
    user: str,
    admin: bool = False,
    create: bool = False,
) -> NameRecord:
    """Point ``name`` at ``pdh`` (a recorded collection) if it holds ``expect`` now.

    ``expect=None``: the name must not exist, or (unless ``create``) already
    hold ``pdh``, which then succeeds without a new version. Anything else is
    a ``ConflictError`` and changes nothing.
    """
    check_name(name)
    if not is_pdh(pdh):
        raise UsageError(f"pdh: {pdh!r} is not a portable data hash")
    if expect is not None and not is_pdh(expect):
        raise UsageError(f"expect: {expect!r} is not a portable data hash")
    require_collection(engine, pdh)  # a name only points at a known collection
    try:
        return _swap(engine, name, pdh, expect=expect, user=user, admin=admin)
    except ConflictError as clash:
        if expect is None and not create:
            try:
                current = get_name(engine, name)
            except NotFoundError:  # no such name: a project's clash
                raise clash from None
            if current.pdh == pdh:
                return current
        raise


def _swap(
    engine: sa.Engine, name: str, pdh: str, *, expect: str | None, user: str, admin: bool
) -> NameRecord:
    try:
        return _set_name(engine, name, pdh, expect=expect, user=user, admin=admin)
    except sa.exc.IntegrityError as e:
        # PostgreSQL: another writer created the name (or recorded the same
        # version) between our read and our insert. It won; we lost the swap.
        if not duplicate_key(e):
            raise
        with connect(engine) as conn:
            current = conn.execute(sa.select(names.c.pdh).where(names.c.name == name)).scalar()
        raise _conflict(name, current, expect) from None


def _conflict(name: str, current: str | None, expect: str | None) -> ConflictError:
    return ConflictError(conflict_message(name, current, expect))


def conflict_message(name: str, current: str | None, expect: str | None) -> str:
    """Why a compare-and-swap of ``name`` failed (``expect`` None: creating it)."""
    if expect is None and current is not None:
        return (
            f"name {name!r} holds {current} already, so it cannot be created"
            f" (use --expect {current})"
        )
    return f"name {name!r} holds {current or 'nothing'}, not {expect or 'nothing'}" + (
        "" if current is None else f" (use --expect {current})"
    )


def _set_name(
    engine: sa.Engine, name: str, pdh: str, *, expect: str | None, user: str, admin: bool
) -> NameRecord:
    now = time.time()
    with write(engine) as conn:
        row = conn.execute(sa.select(names).where(names.c.name == name)).one_or_none()
        current = None if row is None else row.pdh
        if current != expect:
            raise _conflict(name, current, expect)
        if row is not None and not _may_write(conn, name, row.owner, user, admin):
            raise ForbiddenError(f"user {user!r} may not change name {name!r}")
        if row is not None and row.pdh == pdh:
            return NameRecord(**row._mapping)
        # A name removed before keeps its history: a new one continues its versions.
        version = (_last_version(conn, name) if row is None else row.version) + 1
        owner = user if row is None else row.owner
        if row is None and (clash := _project_clash(conn, name)) is not None:
            raise clash
        if row is None:
            # Whoever names it owns it alone, whatever writers a name of the same
            # spelling had (a catalog may hold some a removal raced with).
            conn.execute(name_writers.delete().where(name_writers.c.name == name))
            conn.execute(
                names.insert().values(
                    name=name, pdh=pdh, version=version, owner=user, updated_at=now, updated_by=user
                )
            )
        else:
            # The WHERE repeats the expectation so the swap is atomic on any backend.
            done = conn.execute(
                names.update()
                .where(names.c.name == name, names.c.pdh == expect, names.c.version == row.version)
                .values(pdh=pdh, version=version, updated_at=now, updated_by=user)
            )
            if done.rowcount != 1:
                # Another writer moved it after our read (PostgreSQL): say to what.
                moved = conn.execute(sa.select(names.c.pdh).where(names.c.name == name))
                raise _conflict(name, moved.scalar(), expect)
        conn.execute(
            name_history.insert().values(
                name=name, version=version, old_pdh=current, new_pdh=pdh, by=user, at=now
            )
        )
    return NameRecord(name, pdh, version, owner, now, user)


def _last_version(conn: sa.Connection, name: str) -> int:
    query = sa.select(sa.func.max(name_history.c.version)).where(name_history.c.name == name)
    return int(conn.execute(query).scalar() or 0)


def remove_name(
    engine: sa.Engine, name: str, *, expect: str, user: str, admin: bool = False
) -> NameChange:
    """Remove ``name`` if it holds ``expect`` now (compare-and-swap, as set).

    Only its owner or an admin may: a writer who could remove a name could
    name it again and own it, locking its owner out. The removal is a change
    in the name's history (its new PDH is None); the name's writers and the
    grants on it go with it, so whoever names it again owns it alone. The
    collection it held stays a GC root for the history retention, then only
    as long as something else keeps it (DESIGN §6).
    """
    check_name(name)
    if not is_pdh(expect):
        raise UsageError(f"expect: {expect!r} is not a portable data hash")
    now = time.time()
    with write(engine) as conn:
        row = conn.execute(sa.select(names).where(names.c.name == name)).one_or_none()
        if row is None and _last_version(conn, name):
            # Removed since the caller saw it: a lost race, as for set.
            raise _conflict(name, None, expect)
        if row is None:
            raise NotFoundError(f"no name {name!r}")
        if row.pdh != expect:
            raise _conflict(name, row.pdh, expect)
        if not (admin or row.owner == user):
            raise ForbiddenError(f"only the owner of {name!r} may remove it")
        # The WHERE repeats the expectation so the swap is atomic on any backend.
        done = conn.execute(
            names.delete().where(
                names.c.name == name, names.c.pdh == expect, names.c.version == row.version
            )
        )
        if done.rowcount != 1:
            moved = conn.execute(sa.select(names.c.pdh).where(names.c.name == name))
            raise _conflict(name, moved.scalar(), expect)
        conn.execute(name_writers.delete().where(name_writers.c.name == name))
        # Its grants too: else they would apply to whoever names it next.
        conn.execute(grants.delete().where(grants.c.target == name))
        version = row.version + 1
        conn.execute(
            name_history.insert().values(
                name=name, version=version, old_pdh=expect, new_pdh=None, by=user, at=now
            )
        )
    return NameChange(name, version, expect, None, user, now)


def list_writers(
    engine: sa.Engine, name: str, *, after: str = "", limit: int | None = None
) -> list[str]:
    """The users besides its owner (and admins) who may change ``name``, in
    code point order: those after the user ``after``, at most ``limit``
    (None: all)."""
    check_name(name)
    ordered = by_code_point(engine, name_writers.c.user)
    query = (
        sa.select(name_writers.c.user)
        .where(name_writers.c.name == name)
        .order_by(ordered)
        .limit(limit)
    )
    if after:
        query = query.where(ordered > after)
    with connect(engine) as conn:
        if conn.execute(sa.select(names.c.name).where(names.c.name == name)).first() is None:
            raise NotFoundError(f"no name {name!r}")
        return list(conn.execute(query).scalars())


def _owned(conn: sa.Connection, name: str, user: str, admin: bool, to: str) -> None:
    """Refuse unless ``name`` exists and ``user`` owns it (or is an admin).

    The name's row stays locked to the end of the transaction (PostgreSQL): a
    removal waits for a writer being added, then removes it too, rather than
    leave it behind for whoever names it again.
    """
    query = sa.select(names.c.owner).where(names.c.name == name).with_for_update()
    row = conn.execute(query).one_or_none()
    if row is None:
        raise NotFoundError(f"no name {name!r}")
    if not (admin or row.owner == user):
        raise ForbiddenError(f"only the owner of {name!r} may {to}")


def remove_writer(
    engine: sa.Engine, name: str, writer: str, *, user: str, admin: bool = False
) -> None:
    """Take back from ``writer`` the right to change ``name`` (its owner or an admin)."""
    check_name(name)
    check_writer(writer)
    with write(engine) as conn:
        _owned(conn, name, user, admin, "remove writers")
        done = conn.execute(
            name_writers.delete().where(name_writers.c.name == name, name_writers.c.user == writer)
        )
        if done.rowcount != 1:
            raise NotFoundError(f"user {writer!r} is not a writer of name {name!r}")


def add_writer(
    engine: sa.Engine, name: str, writer: str, *, user: str, admin: bool = False
) -> None:
    """Let ``writer`` change ``name`` (only its owner or an admin may)."""
    check_name(name)
    check_writer(writer)
    try:
        with write(engine) as conn:
            _owned(conn, name, user, admin, "add writers")
            exists = conn.execute(
                sa.select(name_writers).where(
                    name_writers.c.name == name, name_writers.c.user == writer
                )
            ).first()
            if exists is None:
                conn.execute(name_writers.insert().values(name=name, user=writer))
    except sa.exc.IntegrityError as e:
        # The same writer added at the same moment by someone else: done either way.
        if not duplicate_key(e):
            raise
