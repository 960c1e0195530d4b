"""Usage per volume (docs/usage.md, "Per volume"): requests by kind and the
bytes stored, on an embedded warehouse's local and S3 volumes and on keep
servers reporting to a controller, kept across a controller's restart; the
GB-months integral, and `wh cost --volumes` by the shipped EC2 table.

What each figure must be is counted here from what the test did (blocks of
known sizes put and read, requests sent to each keep server), not read back
from the code.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster import Keepd, controller, keep_pool, start_keepd
from conftest import Runner
from s3_helpers import s3_server, s3_spec, s3_specs  # noqa: F401  (fixtures)
from waiting import wait_for
from warehouse.catalog.volumeusage import record_volume_rows
from warehouse.embedded import EmbeddedWarehouse
from warehouse.server.controller import ControllerConfig, ControllerState, create_app
from warehouse.server.serving import ServerThread
from warehouse.usage.volumes import MONTH_SECONDS, VolumeRow, summarize

EC2 = Path(__file__).resolve().parent.parent / "examples" / "prices" / "ec2-2010.toml"
_SIZES = [1000, 20_000, 300_000]


def _volumes(run: Runner, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(run("usage", "--volumes", "--json", *args).stdout)
    return out


def _on_disk(root: Path) -> tuple[int, int]:
    """Block files under a local volume's directory, and their bytes (as
    the test sees the directory, not as the volume lists itself)."""
    files = [
        Path(d) / f
        for d, _, names in os.walk(root)
        for f in names
        if len(f) == 32 and all(c in "0123456789abcdef" for c in f)
    ]
    return len(files), sum(f.stat().st_size for f in files)


def test_an_embedded_local_volume_counts_its_requests_and_bytes(
    home: Path, run: Runner, tmp_path: Path
) -> None:
    with EmbeddedWarehouse(home) as wh:
        blocks = [os.urandom(n) for n in _SIZES]
        locs = [wh.store.put(b).locator for b in blocks]
        wh.store.flush()
        wh.store.put(blocks[0])  # stored already: a request, no bytes
        for loc in locs * 2:
            assert wh.store.get(loc, cache=False) == blocks[locs.index(loc)]
    got = _volumes(run)
    [row] = got["volumes"]
    assert row["volume"] == str(home / "blocks")
    assert (row["puts"], row["gets"], row["lists"], row["deletes"]) == (4, 6, 0, 0)
    assert row["stored_bytes"] == sum(_SIZES) == _on_disk(home / "blocks")[1]

    # A second process adds to the first's figures: three puts of one more block.
    extra = os.urandom(4096)
    with EmbeddedWarehouse(home) as wh:
        for _ in range(3):
            wh.store.put(extra)
    [row] = _volumes(run)["volumes"]
    assert (row["puts"], row["gets"]) == (7, 6)
    assert row["stored_bytes"] == sum(_SIZES) + 4096 == _on_disk(home / "blocks")[1]
    # A window opening after all that holds the bytes, not the requests.
    [later] = _volumes(run, "--since", str(time.time() + 1))["volumes"]
    assert (later["puts"], later["gets"], later["stored_bytes"]) == (0, 0, row["stored_bytes"])


def test_an_embedded_s3_volume_counts_what_it_sends(
    home: Path,
    run: Runner,
    s3_spec: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WH_VOLUME", s3_spec)
    with EmbeddedWarehouse(home) as wh:
        blocks = [os.urandom(n) for n in _SIZES]
        locs = [wh.store.put(b).locator for b in blocks]
        wh.store.put(blocks[1])
        for loc in locs:
            assert wh.store.get(loc, cache=False) == blocks[locs.index(loc)]
        name = wh.volume.name
    [row] = _volumes(run)["volumes"]
    assert row["volume"] == name
    # A new block: a HEAD (is it there?) and a PUT. One stored already: a
    # HEAD and a COPY onto itself (its "last wanted" time). A read: a GET.
    # HEAD is billed as a GET, COPY as a PUT.
    assert row["puts"] == 3 + 1
    assert row["gets"] == (3 + 1) + 3
    assert row["deletes"] == 0
    assert row["stored_bytes"] == sum(_SIZES)


def test_gb_months_are_the_integral_of_the_samples() -> None:
    rows = [
        VolumeRow("v", 0.0, 1_000_000_000, 5, 1, 0, 0),
        VolumeRow("v", 3600.0, 3_000_000_000, 7, 2, 1, 0),
        VolumeRow("w", 4000.0, None, 0, 9, 0, 0),
        VolumeRow("x", 100.0, None, 0, 9, 0, 0),  # before the window, never sampled: none
    ]
    v, w = summarize(rows, since=1800.0, now=7200.0)
    # 1 GB held from 1,800 s to 3,600 s, then 3 GB to 7,200 s.
    assert v.byte_seconds == 1_800 * 10**9 + 3_600 * 3 * 10**9
    assert v.gb_months == Decimal(1_800 + 3 * 3_600) / MONTH_SECONDS
    assert (v.gets, v.puts, v.lists) == (7, 2, 1)  # the row before the window is not in it
    assert (w.volume, w.puts, w.stored_bytes, w.byte_seconds) == ("w", 9, None, 0)


def test_wh_cost_prices_the_volumes_by_the_ec2_table(home: Path, run: Runner) -> None:
    with EmbeddedWarehouse(home) as wh:
        engine = wh.engine
    t0 = time.time() - 10 * MONTH_SECONDS
    # 2 GB held for half a month, then nothing: 1 GB-month.
    record_volume_rows(
        engine,
        [
            VolumeRow("s3://bucket/x", t0, 2 * 10**9, 25_000, 3_000, 2_000, 7),
            VolumeRow("s3://bucket/x", t0 + MONTH_SECONDS / 2, 0, 0, 0, 0, 0),
        ],
    )
    out = json.loads(run("cost", "--prices", str(EC2), "--volumes", "--json").stdout)
    amounts = {line["item"]: Decimal(line["amount"]) for line in out["lines"]}
    # $0.15 per GB-month; $0.01 per 1,000 PUT, $0.01 per 10,000 GET; no LIST
    # or DELETE price in the table.
    assert amounts["volume storage"] == Decimal("0.15")
    assert (amounts["get requests"], amounts["put requests"]) == (Decimal("0.025"), Decimal("0.03"))
    assert amounts["list requests"] == amounts["delete requests"] == 0
    assert Decimal(out["total"]) == Decimal("0.205")
    text = run("cost", "--prices", str(EC2), "--volumes").stdout
    assert "put requests\t3\t1,000 requests\t0.01\t0.03\n" in text
    # --months prices what steps wrote: with --volumes it would price storage twice.
    bad = run("cost", "--prices", str(EC2), "--volumes", "--months", "1", code=2)
    assert bad.stderr.startswith("Error:") and "--months" in bad.stderr
    bad = run("usage", "--volumes", "--user", "alice", code=2)
    assert bad.stderr.startswith("Error:")


def _put(k: Keepd, token: str, data: bytes) -> str:
    r = httpx.put(
        f"{k.url}/{hashlib.md5(data).hexdigest()}",
        content=data,
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 200, r.text
    return r.text.strip()


def _restarted(db: Path, key: bytes) -> tuple[ServerThread, ControllerState]:
    config = ControllerConfig(
        db_url=f"sqlite:///{db}",
        signing_key=key,
        scratch=db.parent,
        git_roots=(tempfile.gettempdir(),),
    )
    state = ControllerState.open(config)
    return ServerThread(create_app(config, state)).start(), state


def test_keep_servers_report_to_the_controller_and_it_keeps_them(
    tmp_path: Path, run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "c.db"
    with keep_pool(tmp_path / "none", 0) as pool, controller(db, pool, scratch=tmp_path) as c:
        alice = c.user("alice")
        servers = [
            start_keepd(
                tmp_path / f"keep{i}",
                "--controller",
                c.url,
                "--usage-interval",
                "0.5",
                env={"WH_TOKEN": c.admin_token},
            )
            for i in range(2)
        ]
        try:
            # Each server's first report (for which it lists its volume once)
            # is in before the test asks anything of it.
            admin = {"Authorization": f"Bearer {c.admin_token}"}
            wait_for(
                lambda: (
                    len(httpx.get(f"{c.url}/api/v1/usage/volumes", headers=admin).json()["volumes"])
                    == 2
                ),
                "both keep servers' first report",
            )
            a, b = servers
            blocks = [os.urandom(n) for n in _SIZES]
            signed = [_put(a, alice, d) for d in blocks]
            _put(a, alice, blocks[0])  # again: a PUT, no new bytes
            _put(b, alice, b"tiny")
            for loc in signed + signed[:1]:
                r = httpx.get(f"{a.url}/{loc}", headers={"Authorization": f"Bearer {alice}"})
                assert r.status_code == 200
            assert httpx.get(f"{b.url}/index", headers=admin).status_code == 200
        finally:
            for k in servers:
                k.stop()  # a clean stop sends what was counted since the last report
        expected = {
            # puts, gets, lists (each server walks its volume once, for the
            # bytes held, before its first report), deletes, bytes
            str(tmp_path / "keep0"): (4, 4, 1, 0, sum(_SIZES)),
            str(tmp_path / "keep1"): (1, 0, 1 + 1, 0, 4),
        }
        for i in range(2):
            assert _on_disk(tmp_path / f"keep{i}")[1] == expected[str(tmp_path / f"keep{i}")][4]

        def figures(found: dict[str, Any]) -> dict[str, tuple[int, ...]]:
            return {
                v["volume"]: (v["puts"], v["gets"], v["lists"], v["deletes"], v["stored_bytes"])
                for v in found["volumes"]
            }

        monkeypatch.setenv("WH_URL", c.url)
        monkeypatch.setenv("WH_TOKEN", c.admin_token)
        assert figures(_volumes(run)) == expected
        # The request lines of the cost, by hand: $0.01 per 1,000 PUT, $0.001 per 1,000 GET.
        out = json.loads(run("cost", "--prices", str(EC2), "--volumes", "--json").stdout)
        amounts = {line["item"]: float(line["amount"]) for line in out["lines"]}
        assert amounts["put requests"] == pytest.approx(5 * 0.01 / 1000, abs=1e-15)
        assert amounts["get requests"] == pytest.approx(4 * 0.001 / 1000, abs=1e-15)

        # Volumes are the installation's: a user is refused them, both ways.
        as_alice = {"Authorization": f"Bearer {alice}"}
        assert httpx.get(f"{c.url}/api/v1/usage/volumes", headers=as_alice).status_code == 403
        forged = {
            "rows": [{"volume": "x", "at": 1, "gets": 1, "puts": 0, "lists": 0, "deletes": 0}]
        }
        r = httpx.post(f"{c.url}/api/v1/usage/volumes", json=forged, headers=as_alice)
        assert r.status_code == 403
        monkeypatch.setenv("WH_TOKEN", alice)
        assert run("usage", "--volumes", code=6).stderr.startswith("Error:")
        admin_token, key = c.admin_token, pool.signing_key

    # The controller restarted: the same figures, from its catalog.
    server, state = _restarted(db, key)
    try:
        monkeypatch.setenv("WH_URL", server.url)
        monkeypatch.setenv("WH_TOKEN", admin_token)
        assert figures(_volumes(run)) == expected
    finally:
        server.stop()
        state.close()
