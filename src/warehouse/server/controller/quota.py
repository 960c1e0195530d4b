"""The per-user quota on stored bytes (DESIGN §9.2; docs/server.md, "Quota"):
a put that would take its user past it is refused before anything is recorded."""

from __future__ import annotations

from warehouse import catalog
from warehouse.catalog.holdings import holding
from warehouse.errors import ForbiddenError
from warehouse.server.controller.state import ControllerState

__all__ = ["check_quota", "over_quota"]


def over_quota(user: str, quota: int, stored: int, adding: int) -> str | None:
    """Why a put of ``adding`` bytes by ``user``, who holds ``stored``, is
    refused under ``quota`` (0: none), or None when it is not. A put adding
    nothing passes even over the quota (a job's outputs may take a user there)."""
    if not quota or not adding or stored + adding <= quota:
        return None
    return (
        f"{user}'s quota of stored bytes is {quota} (the controller's "
        f"--quota-bytes-per-user): {user} holds {stored} bytes, and this put of "
        f"{adding} would make {stored + adding}; nothing was recorded (remove names of "
        "what is no longer needed: GC frees it)"
    )


def check_quota(state: ControllerState, user: catalog.User, pdh: str, size: int) -> None:
    """ForbiddenError unless ``user`` may record the collection ``pdh`` of
    ``size`` bytes. Admins are not held to it; a collection the user holds
    already adds nothing."""
    quota = state.config.quota_bytes_per_user
    if not quota or user.admin:
        return
    held = holding(state.engine, user.name, pdh)
    problem = over_quota(user.name, quota, held.stored, 0 if held.holds else size)
    if problem is not None:
        raise ForbiddenError(problem)
