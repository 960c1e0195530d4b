"""GC, balance and fsck over the API (admins only); see docs/gc.md.

Each run is synchronous: the answer is the report once the keep servers have
worked through their lists. One run at a time; another gets 409.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field

from warehouse.errors import ConflictError, UsageError
from warehouse.gc.cluster import cluster_balance, cluster_fsck, cluster_gc
from warehouse.gc.keep import KeepAdmin
from warehouse.gc.report import GcReport
from warehouse.gc.settings import load_settings, save_settings
from warehouse.remote.blockhttp import keep_timeout
from warehouse.server.controller.auth import Admin, state_of
from warehouse.server.controller.state import ControllerState

__all__ = ["router"]

router = APIRouter(prefix="/api/v1/gc", tags=["gc"])
_running = threading.Lock()


class RunIn(BaseModel):
    dry_run: bool = Field(default=False, description="Decide and report; change nothing.")


class ReportOut(BaseModel):
    action: str
    dry_run: bool
    roots: int
    marked: int
    servers: int
    copies: int
    trashed: int
    pulled: int
    kept: int
    young: int
    emptied: int
    checked: int
    collected: int = Field(default=0, description="gc: collections newly recorded as collected.")
    missing: list[str]
    under_replicated: list[str]
    corrupt: list[str]
    unreadable: list[str]
    unchecked: list[str] = Field(
        default_factory=list,
        description="fsck: keep servers given up on (down, hung, refusing), each with why.",
    )
    collections: dict[str, list[str]]
    actions: list[str]
    repairs: list[str] = Field(
        default_factory=list, description="fsck: what balance will do about each problem block."
    )
    message: str


class SettingsOut(BaseModel):
    history_retention: float
    job_retention: float
    signature_ttl: float = Field(description="The controller's; set in its configuration.")
    trash_lifetime: float = Field(description="The controller's; set in its configuration.")


class SettingsIn(BaseModel):
    history_retention: float | None = Field(default=None, ge=0)
    job_retention: float | None = Field(default=None, ge=0)


def _run(state: ControllerState, work: Callable[[KeepAdmin], GcReport]) -> ReportOut:
    if not _running.acquire(blocking=False):
        raise ConflictError("a gc, balance or fsck run is already going on")
    try:
        token = (
            state.config.keep_admin_token
            or os.environ.get("WH_KEEP_ADMIN_TOKEN")
            or state.system_token
        )
        # A hung server is given up on after keep_timeout (docs/gc.md): fsck
        # checks the others, gc and balance skip it and trash nothing.
        with KeepAdmin(state.services(), token, timeout=keep_timeout()) as admin:
            return ReportOut(**work(admin).to_dict())
    finally:
        _running.release()


@router.post("/run", response_model=ReportOut)
def run_gc(body: RunIn, user: Admin, request: Request) -> ReportOut:
    """Trash unreferenced blocks older than the signature TTL on every keep server."""
    state = state_of(request)
    ttl = state.config.signature_ttl
    return _run(
        state,
        lambda a: cluster_gc(state.engine, a, state.keep().get, ttl=ttl, dry_run=body.dry_run),
    )


@router.post("/balance", response_model=ReportOut)
def run_balance(body: RunIn, user: Admin, request: Request) -> ReportOut:
    """Pull under-replicated blocks to the next servers in their probe order;
    trash copies beyond the wanted count."""
    state = state_of(request)
    cfg = state.config
    return _run(
        state,
        lambda a: cluster_balance(
            state.engine,
            a,
            state.keep().get,
            ttl=cfg.signature_ttl,
            wanted=cfg.replication,
            dry_run=body.dry_run,
        ),
    )


@router.post("/fsck", response_model=ReportOut)
def run_fsck(user: Admin, request: Request) -> ReportOut:
    """Read every copy on every keep server; report missing, corrupt and
    under-replicated blocks and the collections they belong to."""
    state = state_of(request)
    cfg = state.config
    return _run(
        state,
        lambda a: cluster_fsck(
            state.engine, a, state.keep().get, ttl=cfg.signature_ttl, wanted=cfg.replication
        ),
    )


def _settings(state: ControllerState) -> SettingsOut:
    s = load_settings(state.engine)
    return SettingsOut(
        history_retention=s.history_retention,
        job_retention=s.job_retention,
        signature_ttl=state.config.signature_ttl,
        trash_lifetime=state.config.trash_lifetime,
    )


@router.get("/settings", response_model=SettingsOut)
def get_settings(user: Admin, request: Request) -> SettingsOut:
    return _settings(state_of(request))


@router.put("/settings", response_model=SettingsOut)
def put_settings(body: SettingsIn, user: Admin, request: Request) -> SettingsOut:
    """Change the retentions (seconds); the TTL and the trash lifetime are configuration."""
    changes = {k: v for k, v in body.model_dump().items() if v is not None}
    if not changes:
        raise UsageError("give history_retention and/or job_retention")
    state = state_of(request)
    save_settings(state.engine, changes)
    return _settings(state)
