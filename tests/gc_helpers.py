"""A keep pool and controller for GC tests: short signature TTL and trash lifetime."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cluster import Controller, KeepPool, controller, keep_pool
from warehouse.remote.api import ApiClient


@contextmanager
def gc_cluster(
    root: Path, count: int = 3, ttl: int = 3600, lifetime: float = 3600.0
) -> Iterator[tuple[KeepPool, Controller]]:
    """Keep servers and a controller with a short signature TTL and trash lifetime."""
    options = ("--signature-ttl", str(ttl), "--trash-lifetime", str(lifetime))
    with (
        keep_pool(root, count, *options) as pool,
        controller(
            root / "controller.db",
            pool,
            signature_ttl=ttl,
            trash_lifetime=lifetime,
            keep_admin_token=pool.admin_token,
        ) as ctl,
    ):
        yield pool, ctl


def remote_gc(ctl: Controller, action: str = "run", dry_run: bool = False) -> dict[str, object]:
    api = ApiClient(ctl.url, ctl.admin_token)
    try:
        out: dict[str, object] = api.post(f"/gc/{action}", {"dry_run": dry_run})
        return out
    finally:
        api.close()
