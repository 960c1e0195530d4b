"""The caller as a principal, and the permission checks routes make
(docs/permissions.md). The rules themselves are ``warehouse.permissions``'s."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import sqlalchemy as sa

from warehouse import catalog
from warehouse.catalog import grants
from warehouse.catalog.db import connect
from warehouse.errors import NotFoundError
from warehouse.jobs.jobrecords import JobRecord
from warehouse.keys import Key, parse_key
from warehouse.lineage.hiding import HIDDEN
from warehouse.permissions import Level, Mode, Principal, refusal

__all__ = [
    "hide_input",
    "hide_job",
    "hide_key",
    "hide_name",
    "hide_run",
    "hide_watch",
    "principal",
    "readable_jobs",
    "readable_names",
    "readable_pdhs",
    "readable_runs",
    "readable_watches",
    "require_collection_read",
    "require_key",
    "shown_jobs",
]


def principal(engine: sa.Engine, user: catalog.User) -> Principal:
    # A job's token reaches here as its submitter, never as an admin (auth.caller).
    return grants.principal_of(engine, user.name, admin=user.admin)


def require_collection_read(engine: sa.Engine, user: catalog.User, pdh: str) -> None:
    """NotFoundError, worded as for a collection never recorded, unless ``user``
    may read ``pdh``. Open mode costs one read of the mode."""
    grants.require_read(engine, user.name, user.admin, pdh)


def require_key(engine: sa.Engine, user: catalog.User, key: str, needed: Level, what: str) -> None:
    """NotFoundError (hidden) or ForbiddenError unless ``user`` has ``needed`` on ``key``."""
    if user.admin:
        return
    problem = refusal(what, needed, grants.key_level(engine, principal(engine, user), key))
    if problem is not None:
        raise problem


def readable_pdhs(engine: sa.Engine, user: catalog.User, pdhs: list[str]) -> set[str]:
    """Those of ``pdhs`` ``user`` may read (all of them in open mode)."""
    if user.admin:
        return set(pdhs)
    with connect(engine) as conn:
        mode = grants.mode_in(conn)
        if mode is Mode.OPEN:
            return set(pdhs)
        who = grants.principal_in(conn, user.name, user.admin)
        return {p for p in pdhs if grants.collection_level_in(conn, who, p, mode) >= Level.READ}


def hide_name(engine: sa.Engine, user: catalog.User, name: str) -> Level:
    """``user``'s level on the name ``name``; NotFoundError, worded as for a
    name that does not exist, for an existing one it may not read. (A name
    not there yet is the catalog's to refuse or create.)"""
    if user.admin:
        return Level.MANAGE
    with connect(engine) as conn:
        level, exists = grants.name_level_for(conn, user.name, user.admin, name)
    if exists and level < Level.READ:
        raise NotFoundError(f"no name {name!r}")
    return level


def readable_names(engine: sa.Engine, user: catalog.User, found: list[str]) -> set[str]:
    """Those of the names ``found`` ``user`` may read (all of them in open mode)."""
    if user.admin:
        return set(found)
    with connect(engine) as conn:
        mode = grants.mode_in(conn)
        if mode is Mode.OPEN:
            return set(found)
        who = grants.principal_in(conn, user.name, user.admin)
        levels = grants.name_levels_in(conn, who, found, mode)
    return {n for n in found if levels.get(n, Level.NONE) >= Level.READ}


def _readable(
    engine: sa.Engine,
    user: catalog.User,
    found: list[tuple[int, str]],
    level_in: Callable[[sa.Connection, Principal, int, str, Mode], Level],
) -> set[int]:
    """Of the objects ``found`` (id, owner), those ``user`` may read, each
    object's level read by ``level_in``."""
    if user.admin:
        return {i for i, _ in found}
    # Its owner manages an object whatever the mode, groups and grants say:
    # only the others' need the catalog (a run's owner polling it reads none).
    mine = {i for i, o in found if o == user.name}
    others = [(i, o) for i, o in found if o != user.name]
    if not others:
        return mine
    with connect(engine) as conn:
        mode = grants.mode_in(conn)
        if mode is Mode.OPEN:
            return {i for i, _ in found}
        who = grants.principal_in(conn, user.name, user.admin)
        return mine | {i for i, o in others if level_in(conn, who, i, o, mode) >= Level.READ}


def readable_jobs(engine: sa.Engine, user: catalog.User, found: list[tuple[int, str]]) -> set[int]:
    """Of the jobs ``found`` (id, submitter), those ``user`` may read."""
    return _readable(engine, user, found, grants.job_level_in)


def hide_job(engine: sa.Engine, user: catalog.User, job_id: int, submitter: str) -> None:
    """NotFoundError, worded as for no such job, unless ``user`` may read it."""
    if job_id not in readable_jobs(engine, user, [(job_id, submitter)]):
        raise NotFoundError(f"no job {job_id}")


def hide_input(engine: sa.Engine, user: catalog.User, key: str) -> None:
    """A job's input (a PDH or a name, maybe with a path) must be the
    submitter's to read: its steps read it through the controller's own token."""
    hide_key(engine, user, key)


def hide_key(engine: sa.Engine, user: catalog.User, key: str) -> Key:
    """``key`` split at the name it starts with (a name may hold "/"), once
    ``user`` may read what it names: else NotFoundError, worded as for a key
    that names nothing (a name in a project the user may not read answers
    as its first segment would: ``no name 'lab'``)."""
    k = catalog.split_key(engine, key)
    if k.is_pdh:
        require_collection_read(engine, user, k.head)
        return k
    try:
        hide_name(engine, user, k.head)
    except NotFoundError:
        raise NotFoundError(f"no name {parse_key(key).head!r}") from None
    return k


def shown_jobs(engine: sa.Engine, user: catalog.User, found: list[JobRecord]) -> list[JobRecord]:
    """The jobs ``found`` (each one ``user`` reads) as ``user`` may see them:
    its function's collection (``function_pdh``, and in ``function`` when
    that is ``PDH/PATH``) reads ``hidden`` unless ``user`` reads it too, as
    a job shared is not its function shared. A built-in's is public code."""
    private = [r.function_pdh for r in found if not r.function.startswith("builtin:")]
    readable = readable_pdhs(engine, user, private)
    return [
        r
        if r.function.startswith("builtin:") or r.function_pdh in readable
        else dataclasses.replace(
            r, function=r.function.replace(r.function_pdh, HIDDEN), function_pdh=HIDDEN
        )
        for r in found
    ]


def readable_runs(engine: sa.Engine, user: catalog.User, found: list[tuple[int, str]]) -> set[int]:
    """Of the workflow runs ``found`` (id, owner), those ``user`` may read."""
    return _readable(engine, user, found, grants.run_level_in)


def hide_run(engine: sa.Engine, user: catalog.User, run_id: int, owner: str) -> None:
    """NotFoundError, worded as for no such run, unless ``user`` may read it."""
    if run_id not in readable_runs(engine, user, [(run_id, owner)]):
        raise NotFoundError(f"no workflow run {run_id}")


def readable_watches(engine: sa.Engine, user: catalog.User, owners: list[str]) -> list[bool]:
    """For Regol watches of these owners, whether ``user`` may read each: in
    private mode only its own (watches are not shared by grants yet)."""
    if user.admin or grants.get_mode(engine) is Mode.OPEN:
        return [True] * len(owners)
    return [o == user.name for o in owners]


def hide_watch(engine: sa.Engine, user: catalog.User, watch_id: int, owner: str) -> None:
    """NotFoundError, worded as for no such watch, unless ``user`` may read it."""
    if not readable_watches(engine, user, [owner])[0]:
        raise NotFoundError(f"no watch {watch_id}")
