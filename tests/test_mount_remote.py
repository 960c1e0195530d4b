"""``wh mount`` through a real controller: it reads with the user's token, so
in private mode bob's mount shows none of alice's names or collections, and
a controller gone under a mount gives EIO, not a hang (docs/mount.md)."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cluster import Controller, KeepPool, controller
from mount_helpers import DEADLINE, fuse_or_skip, mounted
from warehouse.cli import cli

fuse_or_skip()


def _env(ctl: Controller, token: str, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    # A gone controller is not waited for (the default waits 30 s for one starting).
    return {**env, "WH_URL": ctl.url, "WH_TOKEN": token, "WH_WAIT": "1", "WH_CACHE_SIZE": "0"}


def _wh(ctl: Controller, token: str, *args: str) -> Result:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("WH_")}
    env.update(WH_URL=ctl.url, WH_TOKEN=token)
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, (args, result.output, result.stderr)
    return result


def _put(ctl: Controller, token: str, where: Path, name: str) -> str:
    where.mkdir(parents=True)
    (where / f"{name}.txt").write_text(f"{name}'s data\n")
    return _wh(ctl, token, "put", str(where), "--name", name).output.split()[-1]


_STAT = """
import os, sys
try:
    os.stat(sys.argv[1])
except OSError as e:
    print(e.errno)
else:
    print(0)
"""


def _errno_of(path: Path) -> int:
    """The errno a stat of ``path`` fails with (0: it did not), in a
    process of its own with a bound: a hang fails the test, not the run."""
    done = subprocess.run(
        [sys.executable, "-c", _STAT, str(path)], capture_output=True, text=True, timeout=DEADLINE
    )
    return int(done.stdout.strip())


def test_in_private_mode_bobs_mount_shows_none_of_alices(
    tmp_path: Path, keep_servers: KeepPool
) -> None:
    with controller(tmp_path / "c.db", keep_servers) as ctl:
        alice, bob = ctl.user("alice"), ctl.user("bob")
        _wh(ctl, ctl.admin_token, "perms-mode", "private")
        secret = _put(ctl, alice, tmp_path / "a", "alices")
        _put(ctl, bob, tmp_path / "b", "bobs")
        mnt = tmp_path / "bob-mnt"
        with mounted(mnt, _env(ctl, bob, tmp_path)):
            assert os.listdir(mnt / "by_name") == ["bobs"]
            assert (mnt / "by_name" / "bobs" / "bobs.txt").read_text() == "bobs's data\n"
            assert _errno_of(mnt / "by_name" / "alices") in (errno.ENOENT, errno.EACCES)
            assert _errno_of(mnt / "by_id" / secret) in (errno.ENOENT, errno.EACCES)
        # Alice reads her own, a file of tens of MB too, through the keep servers.
        (tmp_path / "big").mkdir()
        data = os.urandom(24 << 20)
        (tmp_path / "big" / "big.bin").write_bytes(data)
        _wh(ctl, alice, "put", str(tmp_path / "big"), "--name", "alices-big")
        mnt = tmp_path / "alice-mnt"
        with mounted(mnt, _env(ctl, alice, tmp_path)):
            assert sorted(os.listdir(mnt / "by_name")) == ["alices", "alices-big"]
            text = (mnt / "by_id" / secret / "alices.txt").read_text()
            assert text == "alices's data\n"
            through = (mnt / "by_name" / "alices-big" / "big.bin").read_bytes()
            assert hashlib.md5(through).digest() == hashlib.md5(data).digest()


def test_a_controller_gone_under_a_mount_gives_eio(tmp_path: Path, keep_servers: KeepPool) -> None:
    with ExitStack() as stack:
        ctl = stack.enter_context(controller(tmp_path / "c.db", keep_servers))
        alice = ctl.user("alice")
        _put(ctl, alice, tmp_path / "one", "one")
        unseen = _put(ctl, alice, tmp_path / "two", "two")
        mnt = tmp_path / "mnt"
        with mounted(mnt, _env(ctl, alice, tmp_path)) as proc:
            assert (mnt / "by_name" / "one" / "one.txt").read_text() == "one's data\n"
            stack.close()  # the controller stops; the mount stays
            assert _errno_of(mnt / "by_id" / unseen) == errno.EIO
            with pytest.raises(OSError) as caught:
                os.listdir(mnt / "by_name")
            assert caught.value.errno == errno.EIO
            assert proc.poll() is None  # still serving, and unmounted as always below
