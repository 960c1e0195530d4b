"""S3 credentials in the catalog, on SQLite and PostgreSQL: made with a
token, the secret made again from the key and never stored, ending with
their token or by themselves (docs/s3-gateway.md, "Credentials")."""

from __future__ import annotations

import time

import pytest
import sqlalchemy as sa

from warehouse import catalog
from warehouse.catalog import auth
from warehouse.catalog.s3credentials import (
    create_s3_credential,
    list_s3_credentials,
    revoke_s3_credential,
    s3_identity,
    s3_secret,
)
from warehouse.catalog.schema import s3_credentials
from warehouse.errors import NotFoundError, UsageError

KEY = b"k" * 32


def test_a_credential_lives_with_its_token(catalog_engine: sa.Engine) -> None:
    engine = catalog_engine
    catalog.add_user(engine, "alice")
    catalog.add_user(engine, "bob", admin=True)
    token = catalog.create_token(engine, "alice", label="laptop")
    made, secret = create_s3_credential(engine, token, KEY, label="rclone")
    assert made.user == "alice" and made.token_id == auth.token_id(token)
    assert (
        s3_secret(KEY, made.access_key_id, s3_identity(engine, made.access_key_id).salt) == secret
    )
    assert s3_secret(b"other key" * 4, made.access_key_id, "x") != secret
    # Nothing in the row is the secret.
    with engine.connect() as conn:
        row = conn.execute(sa.select(s3_credentials)).one()
    assert secret not in " ".join(str(v) for v in row)
    assert [c.access_key_id for c in list_s3_credentials(engine, "alice")] == [made.access_key_id]
    assert list_s3_credentials(engine, "bob") == []
    # Another user cannot revoke it: not found, as another's token.
    with pytest.raises(NotFoundError):
        revoke_s3_credential(engine, made.access_key_id, user="bob")
    # Its token revoked, it is gone from the list and answers no one.
    auth.revoke_secret(engine, token)
    assert s3_identity(engine, made.access_key_id) is None
    assert list_s3_credentials(engine) == []
    with pytest.raises(NotFoundError):
        create_s3_credential(engine, token, KEY)


def test_revoked_expired_and_job_tokens(catalog_engine: sa.Engine) -> None:
    engine = catalog_engine
    catalog.add_user(engine, "root", admin=True)
    token = catalog.create_token(engine, "root")
    made, _ = create_s3_credential(engine, token, KEY)
    assert s3_identity(engine, made.access_key_id).admin
    assert revoke_s3_credential(engine, made.access_key_id).user == "root"
    assert s3_identity(engine, made.access_key_id) is None
    # A job's token of an admin's job: never an admin.
    job = catalog.create_token(engine, "root", label=auth.JOB_TOKEN_LABEL + "7")
    by_job, _ = create_s3_credential(engine, job, KEY)
    who = s3_identity(engine, by_job.access_key_id)
    assert who is not None and who.job_token and not who.admin
    # An expired token's credential answers no one.
    short = catalog.create_token(engine, "root", ttl=0.5)
    brief, _ = create_s3_credential(engine, short, KEY)
    deadline = time.monotonic() + 30
    while s3_identity(engine, brief.access_key_id) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    with pytest.raises(UsageError):
        revoke_s3_credential(engine, "WHS3lower")
    assert s3_identity(engine, "not a key") is None
