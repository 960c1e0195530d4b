"""Another local account tries to read a warehouse's files (docs/security.md).

Made under the loosest umask (0), in a directory everyone may enter: the
catalogs (token hashes, the signing key) must be 0600, homes and keep volumes
0700, blocks 0600. As root, the reads are also tried as `nobody`.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import start_keepd
from warehouse.blocks.volume import LocalVolume
from warehouse.embedded import EmbeddedWarehouse
from warehouse.server.controller import ControllerConfig, ControllerState


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory everyone may enter, made while the umask is 0."""
    old = os.umask(0)
    base = Path(tempfile.mkdtemp(prefix="wh-modes-"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        os.umask(old)
        shutil.rmtree(base)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _others_cannot_read(paths: list[Path]) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return
    for path in paths:
        cmd = "ls" if path.is_dir() else "cat"
        tried = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", cmd, str(path)],
            capture_output=True,
            text=True,
        )
        assert tried.returncode != 0 and "Permission denied" in tried.stderr, (path, tried)


def test_embedded_catalog_home_and_blocks_are_private(open_dir: Path) -> None:
    home = open_dir / "home"
    data = open_dir / "data.txt"
    data.write_text("private data\n")
    with EmbeddedWarehouse(home) as wh:
        wh.put([data])
        wh.engine  # noqa: B018 - the catalog is open (and in WAL mode)
        db = home / "warehouse.db"
        assert _mode(home) == 0o700
        assert _mode(db) == 0o600
        for extra in (home / "warehouse.db-wal", home / "warehouse.db-shm"):
            if extra.exists():
                assert _mode(extra) == 0o600, extra
        blocks = [p for p in (home / "blocks").rglob("*") if p.is_file()]
        assert blocks
        assert _mode(home / "blocks") == 0o700
        for block in blocks:
            assert _mode(block) == 0o600 and _mode(block.parent) == 0o700, block
    # Loosened by hand (or by an older version): tightened at the next open.
    db.chmod(0o644)
    home.chmod(0o755)
    with EmbeddedWarehouse(home) as wh:
        wh.engine  # noqa: B018
    assert _mode(db) == 0o600 and _mode(home) == 0o700
    _others_cannot_read([db, blocks[0]])


def test_controller_catalog_with_the_signing_key_is_private(open_dir: Path) -> None:
    db = open_dir / "controller.db"
    state = ControllerState.open(ControllerConfig(db_url=f"sqlite:///{db}"))
    try:
        assert state.signing_key  # kept in this file
        assert _mode(db) == 0o600
        for extra in (Path(f"{db}-wal"), Path(f"{db}-shm")):
            if extra.exists():
                assert _mode(extra) == 0o600, extra
    finally:
        state.close()
    _others_cannot_read([db])


def test_keep_volumes_are_private(open_dir: Path) -> None:
    volume = LocalVolume(open_dir / "vol")
    volume.put("d41d8cd98f00b204e9800998ecf8427e", b"")
    assert _mode(open_dir / "vol") == 0o700
    assert _mode(open_dir / "vol" / "d41") == 0o700
    assert _mode(open_dir / "vol" / "d41" / "d41d8cd98f00b204e9800998ecf8427e") == 0o600
    # A real keep server started under umask 0 makes its volume private too.
    server = start_keepd(open_dir / "served")
    try:
        assert _mode(open_dir / "served") == 0o700
    finally:
        server.stop()
    _others_cannot_read([open_dir / "vol" / "d41" / "d41d8cd98f00b204e9800998ecf8427e"])
