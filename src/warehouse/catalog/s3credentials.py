"""S3 credentials: an access key id and a secret a user makes for itself,
for the S3 gateway's AWS Signature V4 (docs/s3-gateway.md).

SigV4 needs the server to hold the secret, so it cannot be kept as a hash
as tokens are. It is not kept at all: it is an HMAC of the controller's
signing key over the key id and a random salt, made again when a request
comes. The catalog alone (a backup, a dump) therefore holds no secret. A
credential is made with a token and acts as that token's user; it works
only while that token does (revoking or expiring the token ends it), and
can be revoked by itself.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from warehouse.catalog.auth import JOB_TOKEN_LABEL, check_label
from warehouse.catalog.db import connect, write
from warehouse.catalog.schema import names, s3_credentials, tokens, users
from warehouse.catalog.values import NameRecord
from warehouse.errors import NotFoundError, UsageError

__all__ = [
    "ACCESS_KEY_PREFIX",
    "S3Credential",
    "S3Identity",
    "check_access_key_id",
    "create_s3_credential",
    "list_s3_credentials",
    "revoke_s3_credential",
    "s3_identity",
    "s3_identity_and_name",
    "s3_secret",
]

# Access key ids look like AWS's (20 upper-case letters and digits), with
# a prefix of our own so that one is told from an AWS key at a glance.
ACCESS_KEY_PREFIX = "WHS3"
_KEY_ID = re.compile(ACCESS_KEY_PREFIX + r"[A-Z2-7]{16}")
_PURPOSE = b"warehouse s3 secret v1\0"


@dataclass(frozen=True, slots=True)
class S3Credential:
    access_key_id: str
    user: str
    label: str
    created_at: float
    token_id: str  # the id (as `wh token ls` shows it) of the token it lives with


@dataclass(frozen=True, slots=True)
class S3Identity:
    """Who a request signed with a credential acts as."""

    access_key_id: str
    user: str
    admin: bool
    salt: str
    job_token: bool  # made with a job's token: never an admin (as the API treats it)


def check_access_key_id(text: str) -> None:
    if not _KEY_ID.fullmatch(text):
        raise UsageError(
            f"an access key id is {ACCESS_KEY_PREFIX} and 16 letters or digits, not {text[:40]!r}"
        )


def s3_secret(signing_key: bytes, access_key_id: str, salt: str) -> str:
    """The secret of a credential, made again from the controller's key."""
    mac = hmac.new(signing_key, _PURPOSE + f"{access_key_id}\0{salt}".encode(), hashlib.sha256)
    return base64.b64encode(mac.digest()).decode()[:40]


def _alive() -> sa.ColumnElement[bool]:
    return sa.or_(tokens.c.expires_at.is_(None), tokens.c.expires_at >= time.time())


def create_s3_credential(
    engine: sa.Engine, token: str, signing_key: bytes, *, label: str = ""
) -> tuple[S3Credential, str]:
    """A new credential for the user of ``token``, living with it; returns
    it and its secret (shown once)."""
    check_label(label)
    token_hash = hashlib.sha256(token.encode()).hexdigest()  # as the tokens table keeps it
    with write(engine) as conn:
        row = conn.execute(
            sa.select(tokens.c.user).where(tokens.c.token_hash == token_hash, _alive())
        ).first()
        if row is None:
            raise NotFoundError("the token making the credential is unknown or expired")
        key_id = ACCESS_KEY_PREFIX + base64.b32encode(secrets.token_bytes(10)).decode()
        salt = secrets.token_hex(16)
        now = time.time()
        conn.execute(
            s3_credentials.insert().values(
                access_key_id=key_id,
                user=row.user,
                token_hash=token_hash,
                salt=salt,
                label=label,
                created_at=now,
            )
        )
    made = S3Credential(key_id, row.user, label, now, token_hash[:16])
    return made, s3_secret(signing_key, key_id, salt)


def list_s3_credentials(engine: sa.Engine, user: str | None = None) -> list[S3Credential]:
    """Credentials that work now (their token alive), of ``user`` or everyone's, oldest first."""
    query = (
        sa.select(s3_credentials)
        .join(tokens, tokens.c.token_hash == s3_credentials.c.token_hash)
        .where(_alive())
        .order_by(s3_credentials.c.created_at, s3_credentials.c.access_key_id)
    )
    if user is not None:
        query = query.where(s3_credentials.c.user == user)
    with connect(engine) as conn:
        rows = conn.execute(query).all()
    return [
        S3Credential(r.access_key_id, r.user, r.label, r.created_at, r.token_hash[:16])
        for r in rows
    ]


def revoke_s3_credential(
    engine: sa.Engine, access_key_id: str, *, user: str | None = None
) -> S3Credential:
    """Revoke a credential (only if it is ``user``'s, when given); another
    user's is reported as not found, as tokens are."""
    check_access_key_id(access_key_id)
    where = s3_credentials.c.access_key_id == access_key_id
    if user is not None:
        where = sa.and_(where, s3_credentials.c.user == user)
    with write(engine) as conn:
        row = conn.execute(sa.select(s3_credentials).where(where)).first()
        if row is None:
            raise NotFoundError(f"no S3 credential {access_key_id}")
        conn.execute(s3_credentials.delete().where(where))
    return S3Credential(row.access_key_id, row.user, row.label, row.created_at, row.token_hash[:16])


# Built once: the gateway asks it on every request, and building the
# statement (and its cache key) cost more than running it.
_IDENTITY = (
    sa.select(s3_credentials.c.user, s3_credentials.c.salt, users.c.admin, tokens.c.label)
    .join(tokens, tokens.c.token_hash == s3_credentials.c.token_hash)
    .join(users, users.c.name == s3_credentials.c.user)
    .where(
        s3_credentials.c.access_key_id == sa.bindparam("key_id"),
        sa.or_(tokens.c.expires_at.is_(None), tokens.c.expires_at >= sa.bindparam("now")),
    )
)


# The same, with the row of one name beside it (None where there is none).
_NAMED = _IDENTITY.add_columns(*(c.label(f"name_{c.name}") for c in names.c)).outerjoin(
    names, names.c.name == sa.bindparam("name")
)


def s3_identity(engine: sa.Engine, access_key_id: str) -> S3Identity | None:
    """Who the credential acts as, or None if it is unknown, revoked, or its
    token is gone or expired."""
    if not _KEY_ID.fullmatch(access_key_id):
        return None
    with connect(engine) as conn:
        row = conn.execute(_IDENTITY, {"key_id": access_key_id, "now": time.time()}).first()
    return None if row is None else _identity(access_key_id, row)


def s3_identity_and_name(
    engine: sa.Engine, access_key_id: str, name: str
) -> tuple[S3Identity | None, NameRecord | None]:
    """``s3_identity`` and the name ``name``'s record (None: no such name),
    in one read: the S3 gateway's every request on a name's bucket asks both.
    The name is the caller's to check it may read."""
    if not _KEY_ID.fullmatch(access_key_id):
        return None, None
    with connect(engine) as conn:
        params = {"key_id": access_key_id, "now": time.time(), "name": name}
        row = conn.execute(_NAMED, params).first()
    if row is None:
        return None, None
    record = None
    if row.name_name is not None:
        record = NameRecord(**{c.name: row._mapping[f"name_{c.name}"] for c in names.c})
    return _identity(access_key_id, row), record


def _identity(access_key_id: str, row: Any) -> S3Identity:
    job = str(row.label).startswith(JOB_TOKEN_LABEL)
    return S3Identity(access_key_id, row.user, bool(row.admin) and not job, row.salt, job)
