"""Users and API tokens. Tokens are shown once; the catalog keeps their SHA-256."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

import sqlalchemy as sa

from warehouse.catalog.db import by_code_point, connect, duplicate_key, write
from warehouse.catalog.names import check_name
from warehouse.catalog.schema import tokens, users
from warehouse.errors import ConflictError, NotFoundError

__all__ = ["User", "add_user", "create_token", "get_user", "list_users", "user_for_token"]


@dataclass(frozen=True, slots=True)
class User:
    name: str
    admin: bool


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def add_user(engine: sa.Engine, name: str, *, admin: bool = False) -> User:
    check_name(name)
    try:
        with write(engine) as conn:
            if conn.execute(sa.select(users.c.name).where(users.c.name == name)).first():
                raise ConflictError(f"user {name!r} exists")
            conn.execute(users.insert().values(name=name, admin=admin, created_at=time.time()))
    except sa.exc.IntegrityError as e:
        # Added by someone else between our read and our insert (PostgreSQL).
        if not duplicate_key(e):
            raise
        raise ConflictError(f"user {name!r} exists") from None
    return User(name, admin)


def get_user(engine: sa.Engine, name: str) -> User:
    with connect(engine) as conn:
        row = conn.execute(sa.select(users).where(users.c.name == name)).first()
    if row is None:
        raise NotFoundError(f"no user {name!r}")
    return User(row.name, bool(row.admin))


def list_users(engine: sa.Engine) -> list[User]:
    with connect(engine) as conn:
        rows = conn.execute(sa.select(users).order_by(by_code_point(engine, users.c.name))).all()
    return [User(r.name, bool(r.admin)) for r in rows]


def create_token(engine: sa.Engine, user: str, *, label: str = "", ttl: float | None = None) -> str:
    """A new secret token for ``user`` (returned once, never stored in clear)."""
    get_user(engine, user)
    token = "wh" + secrets.token_urlsafe(30)
    now = time.time()
    with write(engine) as conn:
        conn.execute(
            tokens.insert().values(
                token_hash=_hash(token),
                user=user,
                label=label,
                created_at=now,
                expires_at=None if ttl is None else now + ttl,
            )
        )
    return token


def user_for_token(engine: sa.Engine, token: str) -> User | None:
    """The user a token belongs to, or None if it is unknown or expired."""
    query = (
        sa.select(users.c.name, users.c.admin, tokens.c.expires_at)
        .join(tokens, tokens.c.user == users.c.name)
        .where(tokens.c.token_hash == _hash(token))
    )
    with connect(engine) as conn:
        row = conn.execute(query).first()
    if row is None or (row.expires_at is not None and row.expires_at < time.time()):
        return None
    return User(row.name, bool(row.admin))
