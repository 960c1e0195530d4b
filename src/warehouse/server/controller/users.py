"""Users, tokens, keep services, cluster settings and accounting over the API."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Request, Response
from pydantic import BaseModel, Field

from warehouse import catalog
from warehouse.catalog import auth as tokens
from warehouse.server.controller.auth import Admin, Caller, CallerToken, is_job_token, state_of
from warehouse.server.controller.paging import DEFAULT_LIMIT, bounded, link_next

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", tags=["users and cluster"])


class UserOut(BaseModel):
    name: str
    admin: bool
    # Only in /users/current: the cluster the caller is on (its +K hints' name).
    cluster: str | None = None


class UserCreate(BaseModel):
    name: str
    admin: bool = False


class TokenCreate(BaseModel):
    user: str | None = Field(default=None, description="Whose token (admins only); default: yours.")
    label: str = ""
    ttl: float | None = Field(default=None, gt=0, description="Seconds until it expires.")


class TokenOut(BaseModel):
    user: str
    token: str = Field(description="The secret, shown this once.")
    id: str = Field(description="Its public id, for listings and revoking.")


class TokenInfoOut(BaseModel):
    id: str = Field(description="The first 16 hex digits of the token's SHA-256.")
    user: str
    label: str
    created_at: float
    expires_at: float | None


def _info(t: tokens.TokenInfo) -> TokenInfoOut:
    return TokenInfoOut(
        id=t.id, user=t.user, label=t.label, created_at=t.created_at, expires_at=t.expires_at
    )


class KeepServiceIn(BaseModel):
    url: str = Field(pattern=r"^https?://[^/\s]+$")
    id: str | None = Field(
        default=None,
        pattern=r"^keep-[0-9a-f]{15}$",
        description="The server's own id, kept on its volume: a restarted server "
        "at a new address replaces its old row instead of adding one.",
    )


class KeepServiceOut(BaseModel):
    id: str
    url: str
    last_seen: float
    host: str | None = None  # its host label in the host map (docs/clusters.md)


class KeepConfig(BaseModel):
    blob_signing_key: str
    signature_ttl: int
    trash_lifetime: float


class AccountingOut(BaseModel):
    user: str
    writes: int
    new_blocks: int
    bytes_written: int
    bytes_new: int


@router.get("/users/current", response_model=UserOut)
def current_user(user: Caller, request: Request) -> UserOut:
    """The caller (keep servers ask this to check a token), and this cluster's name."""
    return UserOut(name=user.name, admin=user.admin, cluster=state_of(request).config.cluster)


@router.get("/users", response_model=list[UserOut])
def list_users(
    user: Admin, request: Request, response: Response, limit: int = DEFAULT_LIMIT, after: str = ""
) -> list[UserOut]:
    """Users by name (code point order): at most ``limit`` (default 1000, at
    most 10000), those after the name ``after``; a full page links to the next."""
    limit = bounded(limit)
    found = catalog.list_users(state_of(request).engine, after=after, limit=limit)
    link_next(request, response, len(found), limit, found[-1].name if found else after)
    return [UserOut(name=u.name, admin=u.admin) for u in found]


@router.post("/users", response_model=UserOut)
def add_user(body: UserCreate, user: Admin, request: Request) -> UserOut:
    made = catalog.add_user(state_of(request).engine, body.name, admin=body.admin)
    return UserOut(name=made.name, admin=made.admin)


@router.post("/tokens", response_model=TokenOut)
def create_token(body: TokenCreate, user: Caller, token: CallerToken, request: Request) -> TokenOut:
    """A new token: for yourself, or (admins) for anyone; never with a job's token."""
    whose = body.user or user.name
    if whose != user.name and not user.admin:
        raise HTTPException(403, "user: only admins make tokens for others")
    engine = state_of(request).engine
    # A job's token dies with its job: a step must not make one that outlives it.
    if is_job_token(engine, token):
        raise HTTPException(403, "a job's token cannot make tokens")
    tokens.check_label(body.label)
    made = catalog.create_token(engine, whose, label=body.label, ttl=body.ttl)
    return TokenOut(user=whose, token=made, id=tokens.token_id(made))


@router.get("/tokens", response_model=list[TokenInfoOut])
def list_tokens(
    user: Caller,
    token: CallerToken,
    request: Request,
    response: Response,
    whose: str | None = None,
    limit: int = DEFAULT_LIMIT,
    after: str = "",
) -> list[TokenInfoOut]:
    """Unexpired tokens, never their secrets: yours; admins: anyone's (``whose``,
    or all). Oldest first: at most ``limit`` (default 1000, at most 10000),
    those after the key ``after`` (``TIME:ID``, as the next link names it)."""
    # A step acts for its submitter only while its job runs: it may not see
    # (nor, below, revoke) the submitter's other tokens.
    if is_job_token(state_of(request).engine, token):
        raise HTTPException(403, "a job's token cannot list tokens")
    if whose not in (None, user.name) and not user.admin:
        raise HTTPException(403, "whose: only admins list others' tokens")
    if whose is None and not user.admin:
        whose = user.name
    limit = bounded(limit)
    found = tokens.list_tokens(state_of(request).engine, whose, after=after, limit=limit)
    link_next(request, response, len(found), limit, tokens.token_key(found[-1]) if found else after)
    return [_info(t) for t in found]


@router.delete("/tokens/{token_id}", response_model=TokenInfoOut)
def revoke_token(token_id: str, user: Caller, token: CallerToken, request: Request) -> TokenInfoOut:
    """Revoke a token by its id (yours; admins: anyone's); it stops working at
    once. Never with a job's token."""
    engine = state_of(request).engine
    if is_job_token(engine, token):
        raise HTTPException(403, "a job's token cannot revoke tokens")
    owner = None if user.admin else user.name
    return _info(tokens.revoke_token(engine, token_id, user=owner))


@router.get("/keep_services", response_model=list[KeepServiceOut])
def list_keep_services(
    user: Caller, request: Request, response: Response, limit: int = DEFAULT_LIMIT, after: str = ""
) -> list[KeepServiceOut]:
    """Keep servers by id: at most ``limit`` (default 1000, at most 10000),
    those after the id ``after``; a full page links to the next."""
    state = state_of(request)
    hosts = state.config.host_map.keep if state.config.host_map is not None else {}
    limit = bounded(limit)
    found = catalog.list_keep_services(state.engine, after=after, limit=limit)
    link_next(request, response, len(found), limit, found[-1].id if found else after)
    return [
        KeepServiceOut(id=s.id, url=s.url, last_seen=s.last_seen, host=hosts.get(s.url.rstrip("/")))
        for s in found
    ]


@router.post("/keep_services", response_model=KeepServiceOut)
def register_keep_service(body: KeepServiceIn, user: Admin, request: Request) -> KeepServiceOut:
    s = catalog.register_keep_service(state_of(request).engine, body.url, body.id)
    return KeepServiceOut(id=s.id, url=s.url, last_seen=s.last_seen)


@router.delete("/keep_services/{key:path}", response_model=KeepServiceOut)
def retire_keep_service(key: str, user: Admin, request: Request) -> KeepServiceOut:
    """Forget a keep server (by id or URL): GC, balance, fsck and clients stop
    using it. Its blocks are not moved; run balance afterwards."""
    s = catalog.retire_keep_service(state_of(request).engine, key)
    return KeepServiceOut(id=s.id, url=s.url, last_seen=s.last_seen)


@router.get("/cluster/keep-config", response_model=KeepConfig)
def keep_config(user: Admin, request: Request) -> KeepConfig:
    """What a keep server needs to sign and check locators like the controller."""
    state = state_of(request)
    return KeepConfig(
        blob_signing_key=state.signing_key.decode(),
        signature_ttl=state.config.signature_ttl,
        trash_lifetime=state.config.trash_lifetime,
    )


@router.get("/accounting", response_model=list[AccountingOut])
def accounting(
    user: Caller,
    request: Request,
    response: Response,
    since: float = 0.0,
    limit: int = DEFAULT_LIMIT,
    after: str = "",
) -> list[AccountingOut]:
    """Block writes per user (admins see everyone, others themselves), by
    name: at most ``limit`` (default 1000, at most 10000), those after the
    name ``after``; a full page links to the next."""
    limit = bounded(limit)
    whose = None if user.admin else user.name
    rows = catalog.accounting(state_of(request).engine, since, user=whose, after=after, limit=limit)
    link_next(request, response, len(rows), limit, rows[-1].user if rows else after)
    return [
        AccountingOut(
            user=r.user,
            writes=r.writes,
            new_blocks=r.new_blocks,
            bytes_written=r.bytes_written,
            bytes_new=r.bytes_new,
        )
        for r in rows
    ]
