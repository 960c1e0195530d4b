"""Keep services and cluster-wide settings (the blob signing key)."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

import sqlalchemy as sa

from warehouse.catalog.db import by_code_point, connect, duplicate_key, write
from warehouse.catalog.schema import keep_services, settings
from warehouse.errors import NotFoundError

__all__ = [
    "KeepService",
    "get_setting",
    "list_keep_services",
    "register_keep_service",
    "retire_keep_service",
    "signing_key",
]


@dataclass(frozen=True, slots=True)
class KeepService:
    # Stable: the server's own id (kept on its volume), or one derived from
    # the URL for a server that sends none; used in rendezvous hashing.
    id: str
    url: str
    last_seen: float


def service_id(url: str) -> str:
    return "keep-" + hashlib.md5(url.encode()).hexdigest()[:15]


def register_keep_service(engine: sa.Engine, url: str, sid: str | None = None) -> KeepService:
    """Record a keep server at ``url``. With its own id ``sid``, the row of
    that id follows it to a new address (a restart on another port), and a
    row of another id at this address (an earlier server there) is replaced."""
    url = url.rstrip("/")
    now = time.time()
    sid = sid or service_id(url)
    try:
        _register(engine, sid, url, now)
    except sa.exc.IntegrityError as e:
        # Registered by another process between our read and our insert
        # (PostgreSQL): now it is there, so this only marks it seen.
        if not duplicate_key(e):
            raise
        _register(engine, sid, url, now)
    return KeepService(sid, url, now)


def _register(engine: sa.Engine, sid: str, url: str, now: float) -> None:
    with write(engine) as conn:
        conn.execute(
            keep_services.delete().where(keep_services.c.url == url, keep_services.c.id != sid)
        )
        found = conn.execute(sa.select(keep_services).where(keep_services.c.id == sid)).first()
        if found is None:
            conn.execute(
                keep_services.insert().values(id=sid, url=url, registered_at=now, last_seen=now)
            )
        else:
            conn.execute(
                keep_services.update()
                .where(keep_services.c.id == sid)
                .values(url=url, last_seen=now)
            )


def retire_keep_service(engine: sa.Engine, key: str) -> KeepService:
    """Forget the keep server with id or URL ``key`` (GC, balance and
    clients stop using it); NotFoundError if there is none."""
    key = key.rstrip("/")
    with write(engine) as conn:
        found = conn.execute(
            sa.select(keep_services).where(
                sa.or_(keep_services.c.id == key, keep_services.c.url == key)
            )
        ).first()
        if found is None:
            raise NotFoundError(f"no keep service {key}")
        conn.execute(keep_services.delete().where(keep_services.c.id == found.id))
    return KeepService(found.id, found.url, found.last_seen)


def list_keep_services(
    engine: sa.Engine, *, after: str = "", limit: int | None = None
) -> list[KeepService]:
    """Keep services by id: those after the id ``after``, at most ``limit`` (None: all)."""
    ordered = by_code_point(engine, keep_services.c.id)
    query = sa.select(keep_services).order_by(ordered).limit(limit)
    if after:
        query = query.where(ordered > after)
    with connect(engine) as conn:
        rows = conn.execute(query).all()
    return [KeepService(r.id, r.url, r.last_seen) for r in rows]


def get_setting(engine: sa.Engine, key: str, default: str | None = None) -> str | None:
    with connect(engine) as conn:
        value = conn.execute(sa.select(settings.c.value).where(settings.c.key == key)).scalar()
    return default if value is None else str(value)


def signing_key(engine: sa.Engine) -> bytes:
    """The cluster's blob signing key, made on first use."""
    existing = get_setting(engine, "blob_signing_key")
    if existing is not None:
        return existing.encode()
    try:
        with write(engine) as conn:
            # Another process may have made it while we looked: the first one wins.
            value = conn.execute(
                sa.select(settings.c.value).where(settings.c.key == "blob_signing_key")
            ).scalar()
            if value is None:
                value = secrets.token_hex(32)
                conn.execute(settings.insert().values(key="blob_signing_key", value=value))
    except sa.exc.IntegrityError as e:
        # On PostgreSQL both may have looked before either wrote: read the winner's.
        if not duplicate_key(e):
            raise
        value = get_setting(engine, "blob_signing_key")
    return str(value).encode()
