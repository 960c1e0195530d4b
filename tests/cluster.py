"""Real installations for tests: keep server processes and controllers on 127.0.0.1."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
import sqlalchemy as sa

from warehouse import catalog
from warehouse.blocks.volume import LocalVolume
from warehouse.catalog.schema import (
    block_writes,
    collection_listing_parts,
    collection_listings,
    collections,
)
from warehouse.server.controller import ControllerConfig, ControllerState, create_app
from warehouse.server.serving import ServerThread

WH_BIN = str(Path(sys.executable).with_name("wh"))


@dataclass
class Keepd:
    """One `wh keepd` process with one volume."""

    volume: Path
    proc: subprocess.Popen[str]
    url: str
    argv: list[str] = field(default_factory=list)

    def blocks(self) -> set[str]:
        return {b.md5 for b in LocalVolume(self.volume).index()}

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.stopped()

    def stopped(self) -> None:
        """Wait for the process asked to stop (killed after 15 s)."""
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


def start_keepd(
    volume: Path, *extra: str, port: int = 0, env: dict[str, str] | None = None
) -> Keepd:
    return _listening(*_spawn_keepd(volume, *extra, port=port, env=env))


def _spawn_keepd(
    volume: Path, *extra: str, port: int = 0, env: dict[str, str] | None = None
) -> tuple[Path, subprocess.Popen[str], list[str]]:
    volume.mkdir(parents=True, exist_ok=True)
    argv = [WH_BIN, "keepd", "--volume", str(volume), "--listen", f"127.0.0.1:{port}", *extra]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}
    )
    return volume, proc, argv


def _listening(volume: Path, proc: subprocess.Popen[str], argv: list[str]) -> Keepd:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("keepd listening on "):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"keepd did not start: {line!r}")
    return Keepd(volume, proc, line.removeprefix("keepd listening on "), argv)


@dataclass
class KeepPool:
    """Standalone keep servers sharing one signing key and admin token."""

    root: Path
    signing_key: bytes
    admin_token: str
    servers: list[Keepd] = field(default_factory=list)
    # Extra keepd options, e.g. a short --signature-ttl and --trash-lifetime for GC.
    options: tuple[str, ...] = ()

    def add(self, i: int, port: int = 0) -> Keepd:
        return self.start([i], port)[0]

    def start(self, numbers: list[int], port: int = 0) -> list[Keepd]:
        """Servers ``numbers``, started together (each start is mostly imports)."""
        key_file = self.root / "signing.key"
        token_file = self.root / "admin.token"
        key_file.write_bytes(self.signing_key)
        token_file.write_text(self.admin_token)
        spawned = [
            _spawn_keepd(
                self.root / f"keep{i}",
                "--signing-key-file",
                str(key_file),
                "--admin-token-file",
                str(token_file),
                *self.options,
                port=port,
            )
            for i in numbers
        ]
        try:
            started = [_listening(*each) for each in spawned]
        except BaseException:
            for _, proc, _ in spawned:
                proc.kill()
                proc.wait()
            raise
        for i, server in zip(numbers, started, strict=True):
            if i < len(self.servers):
                self.servers[i] = server
            else:
                self.servers.append(server)
        return started

    def restart(self, i: int) -> Keepd:
        """Start server i again on its old port and volume (after a kill)."""
        port = int(self.servers[i].url.rsplit(":", 1)[1])
        self.servers[i].stop()
        return self.add(i, port)

    def restart_all(self) -> None:
        """Stop and start every server (keepd empties expired trash at start-up)."""
        for i in range(len(self.servers)):
            self.restart(i)

    def close(self) -> None:
        # Asked together, they shut down together.
        for s in self.servers:
            if s.proc.poll() is None:
                s.proc.terminate()
        for s in self.servers:
            s.stopped()


@contextmanager
def keep_pool(root: Path, count: int = 4, *options: str) -> Iterator[KeepPool]:
    root.mkdir(parents=True, exist_ok=True)
    key, admin = secrets.token_hex(32).encode(), "admin-" + secrets.token_hex(16)
    pool = KeepPool(root, key, admin, options=options)
    try:
        pool.start(list(range(count)))
        yield pool
    finally:
        pool.close()


def pool_fixture(scope: Literal["function", "module"] = "function") -> Any:
    """A ``pool`` fixture of two keep servers, new for each test (under its
    ``tmp_path``) or for each module."""
    if scope == "module":

        @pytest.fixture(scope="module", name="pool")
        def module_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeepPool]:
            with keep_pool(tmp_path_factory.mktemp("keep"), 2) as p:
                yield p

        return module_pool

    @pytest.fixture(name="pool")
    def pool(tmp_path: Path) -> Iterator[KeepPool]:
        with keep_pool(tmp_path / "keep", 2) as p:
            yield p

    return pool


@dataclass
class Controller:
    url: str
    state: ControllerState
    admin_token: str

    def user(self, name: str, admin: bool = False) -> str:
        """A new user; returns its token."""
        catalog.add_user(self.state.engine, name, admin=admin)
        return catalog.create_token(self.state.engine, name)


@contextmanager
def controller(
    db: Path | str, pool: KeepPool, replication: int = 2, **settings: Any
) -> Iterator[Controller]:
    """A controller in this process (a fresh catalog: a SQLite file, or a database
    URL) over the pool's keep servers; ``settings``: more ControllerConfig fields."""
    url = db if isinstance(db, str) else f"sqlite:///{db}"
    # The tests' git repositories are made under the temporary directory.
    settings.setdefault("git_roots", (tempfile.gettempdir(),))
    config = ControllerConfig(
        db_url=url, signing_key=pool.signing_key, replication=replication, **settings
    )
    state = ControllerState.open(config)
    for s in pool.servers:
        catalog.register_keep_service(state.engine, s.url)
    catalog.add_user(state.engine, "root", admin=True)
    admin = catalog.create_token(state.engine, "root")
    server = ServerThread(create_app(config, state)).start()
    try:
        yield Controller(server.url, state, admin)
    finally:
        server.stop()
        state.close()


def ctl_fixture(**settings: Any) -> Any:
    """A ``ctl`` fixture: a controller for each test over the ``pool``
    fixture's keep servers, its catalog and scratch under ``tmp_path``;
    ``settings``: more ControllerConfig fields."""

    @pytest.fixture(name="ctl")
    def ctl(tmp_path: Path, pool: KeepPool) -> Iterator[Controller]:
        with controller(tmp_path / "c.db", pool, scratch=tmp_path, **settings) as c:
            yield c

    return ctl


def row_counts(engine: sa.Engine) -> dict[str, int]:
    """The rows a put records, by table."""
    with engine.connect() as conn:
        return {
            t.name: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
            for t in (collections, collection_listings, collection_listing_parts, block_writes)
        }


def wh_serve(env: dict[str, str], *options: str, stderr: Any = subprocess.DEVNULL) -> Any:
    """``wh serve --listen 127.0.0.1:0 OPTIONS`` as a process in ``env`` (its
    WH_HOME), stdout piped for its "listening" lines (see ``listening``)."""
    return subprocess.Popen(
        [WH_BIN, "serve", "--listen", "127.0.0.1:0", *options],
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )


def listening(
    proc: subprocess.Popen[str], keep: int = 0, scheme: str = "http"
) -> tuple[str, list[str]]:
    """The URLs of the controller and of its ``keep`` keep servers, from the
    lines that say they listen."""
    assert proc.stdout is not None
    first = proc.stdout.readline().split()
    assert first[:3] == ["controller", "listening", "on"], first
    assert first[3].startswith(f"{scheme}://127.0.0.1:"), first
    keeps = [proc.stdout.readline() for _ in range(keep)]
    assert all(k.startswith(f"keepd listening on {scheme}://127.0.0.1:") for k in keeps), keeps
    return first[3], [k.split()[-1] for k in keeps]


def admin_and_alice(env: dict[str, str], url: str) -> dict[str, str]:
    """An admin made by the installation's own command (its WH_HOME in ``env``),
    then the ordinary user alice; returns ``env`` acting as alice on ``url``."""
    admin = subprocess.run(
        [WH_BIN, "user", "add", "admin", "--admin"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert admin.returncode == 0, admin.stderr
    remote = {**env, "WH_URL": url, "WH_TOKEN": admin.stdout.strip()}
    alice = subprocess.run(
        [WH_BIN, "user", "add", "alice"], env=remote, capture_output=True, text=True, timeout=120
    )
    assert alice.returncode == 0, alice.stderr
    return {**remote, "WH_TOKEN": alice.stdout.strip()}
