"""The per-user quota on stored bytes through a real controller (docs/server.md,
"Quota"): a put past it is refused before anything is recorded; GC frees what
a user no longer names."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from cluster import Controller, controller, keep_pool
from permission_helpers import wh_as
from warehouse.catalog.schema import collection_holders, collections
from warehouse.cli import cli

QUOTA = 10_000
TTL = 4  # seconds: GC's grace for what was recorded and not named


@pytest.fixture
def ctl(tmp_path: Path, catalog_url: str) -> Iterator[Controller]:
    options = ("--signature-ttl", str(TTL), "--trash-lifetime", "3600")
    with (
        keep_pool(tmp_path / "keep", 2, *options) as pool,
        controller(
            catalog_url,
            pool,
            signature_ttl=TTL,
            keep_admin_token=pool.admin_token,
            quota_bytes_per_user=QUOTA,
            scratch=tmp_path,
        ) as c,
    ):
        yield c


def _tree(root: Path, size: int) -> Path:
    root.mkdir(parents=True)
    (root / "data.bin").write_bytes(os.urandom(size))
    return root


def _rows(ctl: Controller) -> tuple[int, int]:
    with ctl.state.engine.connect() as conn:
        kept = conn.execute(sa.select(sa.func.count()).select_from(collections)).scalar()
        held = conn.execute(sa.select(sa.func.count()).select_from(collection_holders)).scalar()
    return int(kept or 0), int(held or 0)


def _names(ctl: Controller) -> str:
    return str(wh_as(ctl, ctl.admin_token, "name", "ls").output)


def test_a_put_past_the_quota_is_refused_until_gc_frees_bytes(
    ctl: Controller, tmp_path: Path
) -> None:
    alice, bob = ctl.user("alice"), ctl.user("bob")
    first = _tree(tmp_path / "first", 6000)
    pdh = wh_as(ctl, alice, "put", str(first), "--name", "first").output.split()[-1]

    # Past the quota: one Error line naming it and what alice holds; no
    # collection row, no holder, no name.
    before, names = _rows(ctl), _names(ctl)
    refused = wh_as(
        ctl, alice, "put", str(_tree(tmp_path / "second", 6000)), "--name", "second", code=6
    )
    assert refused.stderr.startswith("Error: alice's quota of stored bytes is 10000 ")
    assert "alice holds 6000 bytes, and this put of 6000 would make 12000" in refused.stderr
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert "Traceback" not in refused.output
    assert _rows(ctl) == before and _names(ctl) == names
    assert "second" not in names

    # The same data again adds nothing: it passes (and stays alice's only once).
    assert wh_as(ctl, alice, "put", str(first)).output.split()[-1] == pdh

    # Through POST /api/v1/collections (a client without the streamed put):
    # bob's collection, signed for alice (open mode: she reads it), would be
    # hers too: refused alike.
    bobs = wh_as(ctl, bob, "put", str(_tree(tmp_path / "bobs", 7000)), "--name", "bobs")
    bobs_pdh = bobs.output.split()[-1]
    with httpx.Client(
        base_url=ctl.url, headers={"Authorization": f"Bearer {alice}"}, timeout=60
    ) as api:
        text = api.get(f"/api/v1/collections/{bobs_pdh}").json()["manifest_text"]
        before = _rows(ctl)
        r = api.post("/api/v1/collections", json={"manifest_text": text})
        assert r.status_code == 403, r.text
        assert "alice holds 6000 bytes, and this put of 7000" in r.json()["error"]
        assert _rows(ctl) == before

    # bob is unaffected by alice's holdings (his own 7000 are under the quota).
    wh_as(ctl, bob, "put", str(_tree(tmp_path / "bobs2", 2000)), "--name", "bobs2")
    # An admin is not held to it.
    wh_as(ctl, ctl.admin_token, "put", str(_tree(tmp_path / "big", QUOTA + 1)))

    # alice removes her name; once GC has collected the collection (no name on
    # it now nor within the history's retention, older than its grace), she
    # holds nothing and may put again.
    wh_as(ctl, ctl.admin_token, "gc", "settings", "history_retention=1s")
    wh_as(ctl, alice, "name", "rm", "first", "--expect", pdh)
    time.sleep(TTL + 0.5)
    wh_as(ctl, ctl.admin_token, "gc")
    second = wh_as(ctl, alice, "put", str(tmp_path / "second"), "--name", "second")
    assert "second" in _names(ctl) and second.output.split()[-1] != pdh


def test_a_bad_quota_is_one_error_line() -> None:
    result = CliRunner().invoke(
        cli, ["serve", "--listen", "127.0.0.1:0", "--quota-bytes-per-user", "lots"]
    )
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("Error: --quota-bytes-per-user: 'lots' is not a size")
    assert result.stderr.count("\n") == 1


def test_a_collection_naming_a_byte_of_a_whole_block_counts_the_block(
    ctl: Controller, tmp_path: Path
) -> None:
    """What is kept is whole blocks: a manifest naming one byte of a block
    counts the block's bytes, when put and while held."""
    bob = ctl.user("bob")
    pdh = wh_as(ctl, bob, "put", str(_tree(tmp_path / "whole", 3000))).output.split()[-1]
    with httpx.Client(
        base_url=ctl.url, headers={"Authorization": f"Bearer {bob}"}, timeout=60
    ) as api:
        text = api.get(f"/api/v1/collections/{pdh}").json()["manifest_text"]
        signed = text.split()[1]
        r = api.post("/api/v1/collections", json={"manifest_text": f". {signed} 0:1:f\n"})
        assert r.status_code == 200 and r.json()["size"] == 1, r.text
        # 3000 + 3000 held; 4500 more would pass the quota.
        refused = wh_as(ctl, bob, "put", str(_tree(tmp_path / "more", 4500)), code=6)
        assert "bob holds 6000 bytes, and this put of 4500" in refused.stderr, refused.stderr
        # A second such collection would make 9000 + 3000: refused as it is put.
        r = api.post("/api/v1/collections", json={"manifest_text": f". {signed} 0:2:g\n"})
        assert r.status_code == 200, r.text
        r = api.post("/api/v1/collections", json={"manifest_text": f". {signed} 0:3:h\n"})
        assert r.status_code == 403, r.text
        assert "bob holds 9000 bytes, and this put of 3000" in r.json()["error"]
