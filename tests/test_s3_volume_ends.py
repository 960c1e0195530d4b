"""An S3 volume's edges in a keep server (docs/s3.md, "A keep server with
local and S3 volumes"): a capacity that sends new blocks to the disk once
the bucket holds it, and the per-volume counts keepd's /metrics and /status
give (requests by kind, stored bytes). Its bucket gone: test_s3_faults.py."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from cluster import WH_BIN, _listening
from s3_helpers import s3_server, s3_spec, s3_specs  # noqa: F401 (fixtures)
from warehouse.server.keepd.metrics import Metrics
from warehouse.server.keepd.rules import Refused
from warehouse.server.keepd.storage import VolumeSet
from warehouse.volumes.base import open_volume


def _keepd(root: Path, volumes: list[str]) -> tuple[subprocess.Popen[str], str, str]:
    root.mkdir(parents=True, exist_ok=True)
    token = "admin-" + secrets.token_hex(16)
    (root / "signing.key").write_bytes(secrets.token_hex(32).encode())
    (root / "admin.token").write_text(token)
    argv = [WH_BIN, "keepd", "--listen", "127.0.0.1:0"]
    for v in volumes:
        argv += ["--volume", v]
    argv += ["--signing-key-file", str(root / "signing.key")]
    argv += ["--admin-token-file", str(root / "admin.token")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    return proc, _listening(root, proc, argv).url, token


def _block(n: int) -> tuple[str, bytes]:
    data = os.urandom(n)
    return hashlib.md5(data).hexdigest(), data


def test_a_capacity_bounds_what_a_bucket_takes(
    s3_specs: Callable[[], str],  # noqa: F811
) -> None:
    """A bucket with a capacity reports it less the bytes it holds, so the
    roomiest-volume rule weighs it like a disk of that size: new blocks go
    to the bucket with more room left, and to none once both are full."""
    small = open_volume(s3_specs().replace("?", "?capacity=1M&"))
    large = open_volume(s3_specs().replace("?", "?capacity=2M&"))
    assert (small.space().total_bytes, large.space().free_bytes) == (1 << 20, 2 << 20)
    volumes = VolumeSet([small, large], Metrics())
    blocks = [_block(700_000) for _ in range(4)]
    for _, data in blocks[:3]:
        assert volumes.store(data)
    where = [(small.stat(m) is not None, large.stat(m) is not None) for m, _ in blocks[:3]]
    assert where == [(False, True), (False, True), (True, False)]
    assert large.space().free_bytes == (2 << 20) - 1_400_000
    assert small.space().free_bytes == (1 << 20) - 700_000
    with pytest.raises(Refused):  # no volume has room for a fourth
        volumes.store(blocks[3][1])
    assert large.trash(blocks[0][0])
    assert large.space().free_bytes == (2 << 20) - 700_000


def test_keepd_reports_requests_by_kind_and_stored_bytes(
    tmp_path: Path,
    s3_spec: str,  # noqa: F811
) -> None:
    proc, url, token = _keepd(tmp_path / "k", [str(tmp_path / "disk"), s3_spec])
    auth = {"Authorization": f"Bearer {token}"}
    try:
        md5, data = _block(6000)
        assert httpx.put(f"{url}/{md5}", content=data, headers=auth).status_code == 200
        assert httpx.get(f"{url}/{md5}+6000", headers=auth).content == data
        text = httpx.get(f"{url}/metrics").text
        name = s3_spec.split("?")[0]
        counts = dict(
            re.findall(
                rf'wh_keepd_volume_requests_total{{kind="(\w+)",volume="{re.escape(name)}"}} (\S+)',
                text,
            )
        )
        assert counts.get("PUT") == "1.0" and counts.get("GET") == "1.0", text
        assert "wh_keepd_volume_stored_bytes{" not in text  # no whole index yet
        assert httpx.get(f"{url}/index", headers=auth).status_code == 200
        text = httpx.get(f"{url}/metrics").text
        assert f'wh_keepd_volume_stored_bytes{{volume="{name}"}} 6000.0' in text, text
        assert f'wh_keepd_volume_stored_bytes{{volume="{tmp_path / "disk"}"}} 0.0' in text
        status = httpx.get(f"{url}/status", headers=auth).json()
        s3 = next(v for v in status["volumes"] if v["path"] == name)
        assert (s3["block_count"], s3["stored_bytes"]) == (1, 6000)
        assert s3["requests"]["PUT"] == 1
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stdout:
            proc.stdout.close()
