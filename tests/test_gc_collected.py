"""Collections GC has collected never come back as roots (DESIGN §6): raising
the signature TTL or the history retention afterwards leaves gc and fsck
working, and storing the same data again brings a collection back."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import Runner
from gc_helpers import gc_cluster


def tree(root: Path, tag: str) -> Path:
    root.mkdir(parents=True)
    (root / "f").write_bytes(tag.encode() + os.urandom(5000))
    return root


def test_collected_collections_stay_collected_when_the_ttl_is_raised(
    run: Runner, tmp_path: Path
) -> None:
    kept = run("put", str(tree(tmp_path / "k", "kept")), "--name", "kept").output.strip()
    junk_src = tree(tmp_path / "j", "junk")
    junk = run("put", str(junk_src)).output.strip()
    run("gc", "settings", "signature_ttl=0")
    report = json.loads(run("gc", "--json").output)
    assert report["trashed"] >= 2 and report["collected"] == 1
    run("gc", "settings", "signature_ttl=14d")  # junk is "recorded within the TTL" again
    again = json.loads(run("gc", "--json").output)
    assert again["roots"] == 1 and again["collected"] == 0
    assert "clean" in run("fsck").output
    # A collected collection cannot be named: its blocks are gone.
    out = run("name", "set", "j", junk, code=4)
    assert "collected by GC" in out.stderr
    # Storing the same data again brings it back, as a root for the TTL.
    assert run("put", str(junk_src), "--name", "j").output.strip() == junk
    assert json.loads(run("gc", "--json").output)["roots"] == 2
    assert "clean" in run("fsck").output
    assert run("name", "get", "kept").output.strip() == kept


def test_collected_collections_stay_collected_when_the_history_is_raised(
    run: Runner, tmp_path: Path
) -> None:
    old = run("put", str(tree(tmp_path / "a", "old")), "--name", "n").output.strip()
    new = run("put", str(tree(tmp_path / "b", "new")), "--name", "n", "--expect", old)
    assert new.exit_code == 0
    run("gc", "settings", "signature_ttl=0", "history_retention=0")
    assert json.loads(run("gc", "--json").output)["collected"] == 1
    run("gc", "settings", "history_retention=30d")  # the old PDH is in the history again
    assert json.loads(run("gc", "--json").output)["trashed"] == 0
    assert "clean" in run("fsck").output


@pytest.fixture
def remote_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("WH_HOME", str(tmp_path / "home"))
    return tmp_path


def test_remote_gc_and_fsck_after_the_history_retention_is_raised(
    remote_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with gc_cluster(remote_env / "c", count=2, ttl=1) as (_, ctl):
        monkeypatch.setenv("WH_URL", ctl.url)
        monkeypatch.setenv("WH_TOKEN", ctl.admin_token)
        run = Runner()
        old = run("put", str(tree(remote_env / "a", "old")), "--name", "n").output.strip()
        run("put", str(tree(remote_env / "b", "new")), "--name", "n", "--expect", old)
        run("gc", "settings", "history_retention=0")
        time.sleep(1.5)  # past the signature TTL
        first = json.loads(run("gc", "--json").output)
        assert first["collected"] == 1 and first["trashed"] >= 2
        run("gc", "settings", "history_retention=30d")
        assert json.loads(run("gc", "--json").output)["trashed"] == 0
        assert "clean" in run("fsck").output


def test_copy_brings_back_a_collection_the_destination_collected(
    remote_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The source is the embedded warehouse; the destination a cluster whose GC
    # collects what `wh copy` left there unnamed.
    src = tree(remote_env / "s", "copied")
    pdh = Runner()("put", str(src)).output.strip()
    with gc_cluster(remote_env / "c", count=2, ttl=1) as (_, ctl):
        config = remote_env / "xdg" / "warehouse" / "config.toml"
        config.parent.mkdir(parents=True)
        config.write_text(f'[clusters.dest]\nurl = "{ctl.url}"\ntoken = "{ctl.admin_token}"\n')
        config.chmod(0o600)
        monkeypatch.setenv("XDG_CONFIG_HOME", str(remote_env / "xdg"))
        run = Runner()
        assert "copied 1 of 1 blocks" in run("copy", pdh, "--to", "dest").output
        monkeypatch.setenv("WH_URL", ctl.url)
        monkeypatch.setenv("WH_TOKEN", ctl.admin_token)
        run("put", str(tree(remote_env / "k", "kept")), "--name", "kept")
        time.sleep(1.5)  # past the signature TTL
        assert json.loads(run("gc", "--json").output)["collected"] == 1
        monkeypatch.delenv("WH_URL")
        monkeypatch.delenv("WH_TOKEN")
        # Its blocks are gone there: a copy sends them again, and may name it.
        out = run("copy", pdh, "--to", "dest", "--name", "back").output
        assert "copied 1 of 1 blocks" in out, out
        monkeypatch.setenv("WH_URL", ctl.url)
        monkeypatch.setenv("WH_TOKEN", ctl.admin_token)
        assert run("name", "get", "back").output.strip() == pdh
        assert "clean" in run("fsck").output
