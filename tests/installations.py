"""One test suite, two installations: the embedded warehouse and a remote one
(a controller plus 4 keep servers on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cluster import Controller, KeepPool, controller, keep_pool
from warehouse.blocks.volume import LocalVolume


@dataclass
class Installation:
    kind: str  # "embedded" or "remote"
    env: dict[str, str]
    volumes: list[LocalVolume]
    controller: Controller | None = None
    pool: KeepPool | None = field(default=None, repr=False)

    def stored_blocks(self) -> set[str]:
        return {b.md5 for v in self.volumes for b in v.index()}

    def copies(self, md5: str) -> list[Path]:
        """Every stored copy of a block."""
        return [p for v in self.volumes if (p := v.path_for(md5)).exists()]


@pytest.fixture(scope="session")
def keep_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeepPool]:
    with keep_pool(tmp_path_factory.mktemp("keep"), 4) as pool:
        yield pool


@pytest.fixture(params=["embedded", "remote"])
def installation(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Installation]:
    if request.param == "embedded":
        home = tmp_path / "wh-home"
        env = {"WH_HOME": str(home), "WH_USER": "alice"}
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("WH_URL", raising=False)
        yield Installation("embedded", env, [LocalVolume(home / "blocks")])
        return
    pool: KeepPool = request.getfixturevalue("keep_servers")
    with controller(tmp_path / "controller.db", pool) as ctl:
        env = {"WH_URL": ctl.url, "WH_TOKEN": ctl.user("alice"), "WH_HOME": str(tmp_path / "h")}
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        volumes = [LocalVolume(s.volume) for s in pool.servers]
        yield Installation("remote", env, volumes, ctl, pool)
