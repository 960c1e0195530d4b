"""S3 credentials over the API: a user makes, lists and revokes its own
(docs/s3-gateway.md); admins see and revoke everyone's."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from warehouse.catalog.auth import MAX_LABEL
from warehouse.catalog.s3credentials import (
    create_s3_credential,
    list_s3_credentials,
    revoke_s3_credential,
)
from warehouse.errors import ForbiddenError
from warehouse.server.controller.auth import Caller, CallerToken, is_job_token, state_of

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/s3/credentials", tags=["s3"])


class CredentialCreate(BaseModel):
    label: str = Field(default="", max_length=MAX_LABEL)


class CredentialOut(BaseModel):
    access_key_id: str
    user: str
    label: str
    created_at: float
    token_id: str = Field(description="The token it was made with and lives with.")


class CredentialMade(CredentialOut):
    secret_access_key: str = Field(description="Shown once: the controller keeps no copy.")


def _not_a_job(request: Request, token: str, what: str) -> None:
    # As with tokens (docs/security.md): a step acts for its submitter only
    # while its job runs, and must not see or cut off the submitter's other
    # credentials. (One it makes itself ends with the job's token.)
    if is_job_token(state_of(request).engine, token):
        raise ForbiddenError(f"a job's token cannot {what} S3 credentials")


@router.post("", response_model=CredentialMade)
def create(
    body: CredentialCreate, user: Caller, token: CallerToken, request: Request
) -> CredentialMade:
    """A new access key id and secret for the caller, living with the token
    that asks (revoking that token ends it)."""
    state = state_of(request)
    made, secret = create_s3_credential(state.engine, token, state.signing_key, label=body.label)
    return CredentialMade(**asdict(made), secret_access_key=secret)


@router.get("", response_model=list[CredentialOut])
def list_credentials(
    user: Caller, token: CallerToken, request: Request, whose: str | None = None
) -> list[CredentialOut]:
    """The caller's credentials that work now (an admin: everyone's, or ``whose``'s)."""
    _not_a_job(request, token, "list")
    if whose is not None and whose != user.name and not user.admin:
        raise ForbiddenError("only admins list other users' S3 credentials")
    mine = whose if user.admin else user.name
    return [CredentialOut(**asdict(c)) for c in list_s3_credentials(state_of(request).engine, mine)]


@router.delete("/{access_key_id}", response_model=CredentialOut)
def revoke(access_key_id: str, user: Caller, token: CallerToken, request: Request) -> CredentialOut:
    """Revoke a credential: the caller's own (an admin: anyone's). It stops at once."""
    _not_a_job(request, token, "revoke")
    engine = state_of(request).engine
    done = revoke_s3_credential(engine, access_key_id, user=None if user.admin else user.name)
    return CredentialOut(**asdict(done))
