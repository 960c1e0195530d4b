"""A keep pool and controller for GC tests: short signature TTL and trash lifetime."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cluster import Controller, Keepd, start_keepd
from warehouse import catalog
from warehouse.remote.api import ApiClient
from warehouse.server.controller import ControllerConfig, ControllerState, create_app
from warehouse.server.serving import ServerThread


@dataclass
class GcPool:
    root: Path
    ttl: int
    lifetime: float
    key: bytes = field(default_factory=lambda: secrets.token_hex(32).encode())
    admin: str = field(default_factory=lambda: "admin-" + secrets.token_hex(16))
    servers: list[Keepd] = field(default_factory=list)

    def start(self, i: int, port: int = 0) -> Keepd:
        (self.root / "key").write_bytes(self.key)
        (self.root / "admin").write_text(self.admin)
        args = ["--signing-key-file", str(self.root / "key")]
        args += ["--admin-token-file", str(self.root / "admin")]
        args += ["--signature-ttl", str(self.ttl), "--trash-lifetime", str(self.lifetime)]
        server = start_keepd(self.root / f"keep{i}", *args, port=port)
        if i < len(self.servers):
            self.servers[i] = server
        else:
            self.servers.append(server)
        return server

    def restart_all(self) -> None:
        """Stop and start every server (keepd empties expired trash at start-up)."""
        for i, s in enumerate(self.servers):
            port = int(s.url.rsplit(":", 1)[1])
            s.stop()
            self.start(i, port)


@contextmanager
def gc_cluster(
    root: Path, count: int = 3, ttl: int = 3600, lifetime: float = 3600.0
) -> Iterator[tuple[GcPool, Controller]]:
    root.mkdir(parents=True, exist_ok=True)
    pool = GcPool(root, ttl, lifetime)
    try:
        for i in range(count):
            pool.start(i)
        config = ControllerConfig(
            db_url=f"sqlite:///{root / 'controller.db'}",
            signing_key=pool.key,
            signature_ttl=ttl,
            trash_lifetime=lifetime,
            keep_admin_token=pool.admin,
        )
        state = ControllerState.open(config)
        for s in pool.servers:
            catalog.register_keep_service(state.engine, s.url)
        catalog.add_user(state.engine, "root", admin=True)
        admin = catalog.create_token(state.engine, "root")
        server = ServerThread(create_app(config, state)).start()
        try:
            yield pool, Controller(server.url, state, admin)
        finally:
            server.stop()
            state.close()
    finally:
        for s in pool.servers:
            s.stop()


def remote_gc(ctl: Controller, action: str = "run", dry_run: bool = False) -> dict[str, object]:
    api = ApiClient(ctl.url, ctl.admin_token)
    try:
        out: dict[str, object] = api.post(f"/gc/{action}", {"dry_run": dry_run})
        return out
    finally:
        api.close()
