"""Users and API tokens. Tokens are shown once; the catalog keeps their SHA-256.

A token is known by its *id*: the first 16 hex digits of that hash, which
names it in listings and revocations without revealing it. Revoking deletes
the row, so the token stops working at the next request.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from dataclasses import dataclass

import sqlalchemy as sa

from warehouse.catalog.db import by_code_point, connect, duplicate_key, write
from warehouse.catalog.schema import tokens, users
from warehouse.catalog.values import check_account
from warehouse.errors import ConflictError, NotFoundError, UsageError

__all__ = [
    "JOB_TOKEN_LABEL",
    "MAX_LABEL",
    "TokenInfo",
    "User",
    "add_user",
    "check_label",
    "check_token_id",
    "create_token",
    "get_user",
    "list_tokens",
    "list_users",
    "revoke_label",
    "revoke_secret",
    "revoke_token",
    "token_id",
    "token_key",
    "user_for_token",
]

ID_LENGTH = 16
# A job's token is labelled this and the job's id (docs/security.md); what a
# job's token may not do is decided by it, so no one else's may begin so.
JOB_TOKEN_LABEL = "job "
MAX_LABEL = 200
_ID = re.compile(f"[0-9a-f]{{{ID_LENGTH}}}")


@dataclass(frozen=True, slots=True)
class User:
    name: str
    admin: bool


@dataclass(frozen=True, slots=True)
class TokenInfo:
    id: str
    user: str
    label: str
    created_at: float
    expires_at: float | None


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_token_id(ident: str) -> None:
    if not _ID.fullmatch(ident):
        raise UsageError(f"a token id is {ID_LENGTH} hex digits, not {ident!r}")


def token_id(token: str) -> str:
    """The public id of a secret token."""
    return _hash(token)[:ID_LENGTH]


def add_user(engine: sa.Engine, name: str, *, admin: bool = False) -> User:
    check_account(name)
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


def list_users(engine: sa.Engine, *, after: str = "", limit: int | None = None) -> list[User]:
    """Users in code point order of names: those after the name ``after``, at
    most ``limit`` (None: all)."""
    ordered = by_code_point(engine, users.c.name)
    query = sa.select(users).order_by(ordered).limit(limit)
    if after:
        query = query.where(ordered > after)
    with connect(engine) as conn:
        rows = conn.execute(query).all()
    return [User(r.name, bool(r.admin)) for r in rows]


def check_label(label: str) -> None:
    """Refuse a label a user gives a token: too long, or a job token's own."""
    if len(label) > MAX_LABEL:
        raise UsageError(f"label: at most {MAX_LABEL} characters, not {len(label)}")
    if label.startswith(JOB_TOKEN_LABEL):
        raise UsageError(
            f"label: {JOB_TOKEN_LABEL.strip()!r} and a space begin only a job's own token's label"
        )


def create_token(
    engine: sa.Engine,
    user: str,
    *,
    label: str = "",
    ttl: float | None = None,
    not_after: float | None = None,
) -> str:
    """A new secret token for ``user`` (returned once, never stored in clear),
    valid for ``ttl`` seconds but never past the time ``not_after``."""
    get_user(engine, user)
    token = "wh" + secrets.token_urlsafe(30)
    now = time.time()
    expires_at = None if ttl is None else now + ttl
    if not_after is not None:
        expires_at = not_after if expires_at is None else min(expires_at, not_after)
    with write(engine) as conn:
        conn.execute(
            tokens.insert().values(
                token_hash=_hash(token),
                user=user,
                label=label,
                created_at=now,
                expires_at=expires_at,
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


def token_info(engine: sa.Engine, token: str) -> TokenInfo | None:
    """What the catalog knows of a secret token, or None if it is unknown or expired."""
    with connect(engine) as conn:
        r = conn.execute(sa.select(tokens).where(tokens.c.token_hash == _hash(token))).first()
    if r is None or (r.expires_at is not None and r.expires_at < time.time()):
        return None
    return TokenInfo(r.token_hash[:ID_LENGTH], r.user, r.label, r.created_at, r.expires_at)


def token_key(info: TokenInfo) -> str:
    """The key ``list_tokens`` pages by: creation time and id, as ``TIME:ID``."""
    return f"{info.created_at!r}:{info.id}"


def _token_after(key: str) -> tuple[float, str]:
    created, _, ident = key.partition(":")
    try:
        at = float(created)
    except ValueError:
        at = float("nan")
    if at != at or not _ID.fullmatch(ident):  # NaN compares with nothing
        raise UsageError(f"after: {key[:64]!r} is not TIME:ID (a token's key)")
    return at, ident


def list_tokens(
    engine: sa.Engine, user: str | None = None, *, after: str = "", limit: int | None = None
) -> list[TokenInfo]:
    """Unexpired tokens (of ``user``, or everyone's), oldest first: those after
    the one whose ``token_key`` is ``after`` (it need not exist any more), at
    most ``limit`` (None: all)."""
    now = time.time()
    alive = sa.or_(tokens.c.expires_at.is_(None), tokens.c.expires_at >= now)
    # The id is the hash's first 16 digits: ids ordered as hashes are.
    ident = sa.func.substr(tokens.c.token_hash, 1, ID_LENGTH)
    query = sa.select(tokens).where(alive).limit(limit)
    if user is not None:
        query = query.where(tokens.c.user == user)
    if after:
        at, after_id = _token_after(after)
        query = query.where(
            sa.or_(
                tokens.c.created_at > at,
                sa.and_(tokens.c.created_at == at, by_code_point(engine, ident) > after_id),
            )
        )
    with connect(engine) as conn:
        ordered = query.order_by(tokens.c.created_at, by_code_point(engine, tokens.c.token_hash))
        rows = conn.execute(ordered).all()
    return [
        TokenInfo(r.token_hash[:ID_LENGTH], r.user, r.label, r.created_at, r.expires_at)
        for r in rows
    ]


def revoke_token(engine: sa.Engine, ident: str, *, user: str | None = None) -> TokenInfo:
    """Revoke the token with id ``ident`` (only if it is ``user``'s, when given).

    Another user's token is reported as not found: its existence is not told.
    """
    check_token_id(ident)
    where = sa.func.substr(tokens.c.token_hash, 1, ID_LENGTH) == ident
    if user is not None:
        where = sa.and_(where, tokens.c.user == user)
    with write(engine) as conn:
        rows = conn.execute(sa.select(tokens).where(where)).all()
        if not rows:
            raise NotFoundError(f"no token {ident}")
        if len(rows) > 1:  # two hashes sharing 64 bits: never seen, refused anyway
            raise ConflictError(f"token id {ident} is ambiguous")
        conn.execute(tokens.delete().where(tokens.c.token_hash == rows[0].token_hash))
    r = rows[0]
    return TokenInfo(ident, r.user, r.label, r.created_at, r.expires_at)


def revoke_secret(engine: sa.Engine, token: str) -> bool:
    """Revoke a token known by its secret (signing out, a job ending); True if it was valid."""
    with write(engine) as conn:
        done = conn.execute(tokens.delete().where(tokens.c.token_hash == _hash(token)))
    return bool(done.rowcount)


def revoke_label(engine: sa.Engine, user: str, label: str) -> int:
    """Revoke every token of ``user`` labelled ``label``; how many there were."""
    with write(engine) as conn:
        done = conn.execute(
            tokens.delete().where(sa.and_(tokens.c.user == user, tokens.c.label == label))
        )
    return int(done.rowcount)
