"""An ordinary user attacks the controller's JSON API (docs/security.md).

A real controller with its job manager (local executor, sandboxed steps)
over real keep server processes; alice sends what any HTTP client can send.
Each test performs one attack and asserts it fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cluster import Controller, KeepPool, controller

EMPTY = "d41d8cd98f00b204e9800998ecf8427e+0"


@pytest.fixture
def ctl(tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(tmp_path / "controller.db", keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=1)
        yield c


def _client(ctl: Controller, token: str) -> httpx.Client:
    return httpx.Client(base_url=ctl.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)


@pytest.fixture
def alice(ctl: Controller) -> Iterator[httpx.Client]:
    with _client(ctl, ctl.user("alice")) as client:
        yield client


@pytest.fixture
def one_file(alice: httpx.Client) -> str:
    """The PDH of a collection of one empty file (an input for jobs)."""
    r = alice.post("/api/v1/collections", json={"manifest_text": f". {EMPTY} 0:0:f\n"})
    assert r.status_code == 200, r.text
    pdh = r.json()["pdh"]
    assert isinstance(pdh, str)
    return pdh


@pytest.mark.parametrize("where", ["function", "code"])
def test_a_git_spec_cannot_pass_options_to_git_on_the_controller(
    where: str, alice: httpx.Client, one_file: str, tmp_path: Path
) -> None:
    """A job's git repository or revision is never an option of the controller's
    git: "--upload-pack=CMD" would run CMD there, as the controller's user."""
    ran = tmp_path / "ran"
    for repo, revision in (
        (f"--upload-pack=touch {ran};", str(tmp_path)),
        (str(tmp_path), f"--output={ran}"),
    ):
        if where == "function":
            body = {"function": f"git:{repo}@{revision}:x.py", "input": one_file}
        else:
            code = f"git:{repo}@{revision}"
            body = {"function": "builtin:mapreduce", "input": one_file, "params": {"code": code}}
        r = alice.post("/api/v1/jobs", json=body)
        assert r.status_code == 400, r.text
        assert "starts with '-'" in r.json()["error"], r.text
        assert not ran.exists()


def test_a_git_spec_cannot_fetch_through_a_command_transport(
    alice: httpx.Client, one_file: str, tmp_path: Path
) -> None:
    """Only http(s), git and ssh are fetched: no "ext::" command, no other helper."""
    ran = tmp_path / "ran"
    for repo in (f"ext::sh -c touch% {ran}", "fd::3"):
        r = alice.post(
            "/api/v1/jobs", json={"function": f"git:{repo}@main:x.py", "input": one_file}
        )
        assert r.status_code == 400, r.text
        assert not ran.exists()
