"""A corrupt stored copy is repaired by the next write and never counts as
healthy: embedded put, remote put, balance and fsck (docs/storage.md)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from conftest import Runner
from gc_helpers import gc_cluster
from warehouse.blocks.volume import LocalVolume
from warehouse.errors import CorruptDataError


def flip_byte(path: Path, offset: int = 100) -> None:
    """One byte changed in place, as a stray writer or a bad disk would."""
    time.sleep(0.02)  # a later write than the block's own
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def data_tree(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "big").write_bytes(os.urandom(300_000))
    return root


def stored_path(volume: Path, md5: str) -> Path:
    return volume / md5[:3] / md5


def data_block(manifest: str) -> str:
    """The md5 of the (only) data block of a one-stream manifest."""
    return manifest.split()[1].split("+")[0]


def test_embedded_put_of_the_same_data_replaces_a_corrupt_copy(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    src = data_tree(tmp_path / "src")
    pdh = json.loads(run("put", str(src), "--json").output)["pdh"]
    md5 = data_block(run("manifest", pdh).output)
    path = stored_path(home / "blocks", md5)
    flip_byte(path)
    again = json.loads(run("put", str(src), "--json").output)
    assert again["pdh"] == pdh
    assert again["blocks_new"] == 1  # the bad copy was found and written anew
    assert path.read_bytes() == (src / "big").read_bytes()
    run("get", pdh, str(tmp_path / "out"))
    assert (tmp_path / "out" / "big").read_bytes() == (src / "big").read_bytes()
    assert "clean" in run("fsck").output


def test_embedded_fsck_moves_a_corrupt_copy_aside_and_says_how_to_repair(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    src = data_tree(tmp_path / "src")
    pdh = json.loads(run("put", str(src), "--name", "d", "--json").output)["pdh"]
    md5 = data_block(run("manifest", pdh).output)
    path = stored_path(home / "blocks", md5)
    # Bit rot: the bytes change, the mtime does not. Only a read can tell.
    st = path.stat()
    flip_byte(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    report = json.loads(run("fsck", "--json", code=5).output)
    assert report["corrupt"] == [f"{md5} on local"]
    assert report["repairs"] == [
        f"{md5}: no good copy is left; put the same data again to restore it"
    ]
    text = run("fsck", code=5).output  # now missing: it was moved aside
    assert f"missing {md5} in {pdh}" in text
    assert "put the same data again" in text
    assert not path.exists()
    assert json.loads(run("put", str(src), "--json").output)["blocks_new"] == 1
    assert "clean" in run("fsck").output


@pytest.fixture
def remote_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("WH_HOME", str(tmp_path / "home"))
    return tmp_path


def test_remote_put_fsck_and_balance_repair_corrupt_copies(
    remote_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with gc_cluster(remote_env / "c", count=3) as (pool, ctl):
        monkeypatch.setenv("WH_URL", ctl.url)
        monkeypatch.setenv("WH_TOKEN", ctl.admin_token)
        run = Runner()
        src = data_tree(remote_env / "src")
        want = (src / "big").read_bytes()
        pdh = json.loads(run("put", str(src), "--name", "d", "--json").output)["pdh"]
        md5 = data_block(run("manifest", pdh).output)
        holders = [s for s in pool.servers if md5 in s.blocks()]
        assert len(holders) == 2
        # 1. A put of the same data rewrites the corrupt copy (HEAD and PUT
        # both verify a copy changed since it was last known good).
        bad = stored_path(holders[0].volume, md5)
        flip_byte(bad)
        out = json.loads(run("put", str(src), "--json").output)
        assert out["pdh"] == pdh and out["copies"] == 2
        assert bad.read_bytes() == want
        # 2. Bit rot (mtime unchanged): fsck finds it, moves it aside, and
        # says balance will pull a good copy; balance does; fsck is clean.
        st = bad.stat()
        flip_byte(bad)
        os.utime(bad, ns=(st.st_atime_ns, st.st_mtime_ns))
        report = json.loads(run("fsck", "--json", code=5).output)
        assert report["corrupt"] == [f"{md5} on {holders[0].url}"]
        assert len(report["repairs"]) == 1
        assert report["repairs"][0].startswith(f"balance will pull {md5}+{len(want)} to ")
        assert holders[1].url in report["repairs"][0]
        assert not bad.exists()  # moved aside by the server that found it
        out = json.loads(run("balance", "--json").output)
        assert out["pulled"] == 1
        volumes = [LocalVolume(s.volume) for s in pool.servers]
        assert sum(v.stat(md5) is not None for v in volumes) == 2
        assert "clean" in run("fsck").output
        run("get", pdh, str(remote_env / "out"))
        assert (remote_env / "out" / "big").read_bytes() == want


def test_a_corrupt_copy_that_cannot_be_moved_aside_is_still_called_corrupt(
    tmp_path: Path,
) -> None:
    # On a read-only (or full) volume the rename aside fails; that failure once
    # replaced the verdict, so keepd answered 503 "cannot read" for a corrupt
    # copy. A non-empty directory where the quarantined name would go makes
    # the rename fail for any user, root included.
    vol = LocalVolume(tmp_path / "v", trash_lifetime=0.0)
    data = os.urandom(5000)
    md5 = hashlib.md5(data).hexdigest()
    vol.put(md5, data)
    path = vol.path_for(md5)
    raw = bytearray(path.read_bytes())
    raw[7] ^= 0xFF
    path.write_bytes(bytes(raw))
    now = int(time.time())
    for deadline in range(now - 5, now + 600):
        (path.parent / f"{md5}.corrupt.{deadline}" / "x").mkdir(parents=True)
    reads = [
        lambda: vol.get(md5),
        lambda: vol.get_into(md5, bytearray(len(data) + 1)),
        lambda: vol.get_mapped(md5),
    ]
    for read in reads:
        with pytest.raises(CorruptDataError, match="could not be moved aside"):
            read()
    assert path.exists() and not vol.check(md5, len(data))
