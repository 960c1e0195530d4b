"""A job's output and log count in its submitter's quota (docs/server.md,
"Quota"): the manager records them (a step's fragments are its submitter's
puts already; the log is not), and the submitter is held to them, through a
real controller running the job, on both catalog backends."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import Controller, KeepPool, controller
from permission_helpers import wh_as
from warehouse.catalog.holdings import holding

QUOTA = 10_000
# 7,000 bytes of log (stdout), which the manager stores, not the step.
BIG = "# wh: files\nimport os\nprint(os.urandom(3500).hex())\n"


@pytest.fixture
def ctl(tmp_path: Path, catalog_url: str, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(catalog_url, keep_servers, quota_bytes_per_user=QUOTA, scratch=tmp_path) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=1)
        yield c


def _put(ctl: Controller, token: str, where: Path, files: dict[str, str]) -> str:
    where.mkdir(parents=True)
    for name, text in files.items():
        (where / name).write_text(text)
    return wh_as(ctl, token, "put", str(where)).output.split()[-1]


def test_a_jobs_output_counts_in_its_submitters_quota(ctl: Controller, tmp_path: Path) -> None:
    alice, bob = ctl.user("alice"), ctl.user("bob")
    code = _put(ctl, alice, tmp_path / "code", {"big.py": BIG})
    data = _put(ctl, alice, tmp_path / "data", {"one.txt": "one line\n"})
    before = holding(ctl.state.engine, "alice", data).stored
    out = wh_as(
        ctl, alice, "job", "submit", f"{code}/big.py", "--input", data, "--wait", "--json"
    ).output
    job: dict[str, Any] = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert job["state"] == "complete", job
    held = holding(ctl.state.engine, "alice", job["log_pdh"])
    assert held.holds and held.stored >= before + 7000, (before, held)
    # So a put of 4,000 bytes more is past alice's quota: refused, exit 6.
    err = wh_as(ctl, alice, "put", str(_file(tmp_path / "more", 4000)), code=6).stderr
    assert "alice's quota of stored bytes is 10000" in err, err
    # bob ran nothing: the same put is his to make.
    wh_as(ctl, bob, "put", str(tmp_path / "more"))
    assert holding(ctl.state.engine, "bob", job["log_pdh"]).stored < 7000


def _file(root: Path, size: int) -> Path:
    root.mkdir(parents=True)
    (root / "data.bin").write_bytes(os.urandom(size))
    return root
