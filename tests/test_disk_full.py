"""A full disk under the controller is a clear error (507 over the API, one
`Error:` line and exit code 1 on the command line), never a bare 500, and
changes nothing. The disk is a real small file system (a tmpfs, mounted as
root); under $CI a machine that cannot mount one fails the test."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cluster import KeepPool, controller
from conftest import wh_process
from warehouse import EMPTY_LOCATOR, catalog
from warehouse.errors import NotFoundError


@contextlib.contextmanager
def small_disk(where: Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs of ``size`` at ``where``; skipped where none can be mounted,
    except under $CI, where that is a failure (the test would prove nothing)."""
    where.mkdir()
    done = None
    if os.geteuid() == 0 and shutil.which("mount"):
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
            capture_output=True,
            text=True,
        )
    if done is None or done.returncode != 0:
        why = done.stderr.strip() if done is not None else "not root, or no mount(8)"
        if os.environ.get("CI"):
            pytest.fail(f"a tmpfs cannot be mounted here ({why}): the full disk is not tried")
        pytest.skip(f"a tmpfs cannot be mounted here ({why})")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill(disk: Path) -> Path:
    """Every free byte of ``disk`` taken by one file (returned: remove it to free them)."""
    filler = disk / "filler"
    with filler.open("wb") as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    return filler


def test_name_set_on_a_controller_whose_disk_is_full(
    tmp_path: Path, keep_servers: KeepPool
) -> None:
    with small_disk(tmp_path / "disk") as disk, controller(disk / "c.db", keep_servers) as ctl:
        alice, bob = ctl.user("alice"), ctl.user("bob")
        api = httpx.Client(
            base_url=f"{ctl.url}/api/v1", headers={"Authorization": f"Bearer {bob}"}, timeout=60
        )
        with contextlib.closing(api):
            pdh = api.post(
                "/collections", json={"manifest_text": f". {EMPTY_LOCATOR} 0:0:f\n"}
            ).json()["pdh"]
            filler = fill(disk)
            # SQLite reuses its log's room at first: names are set until it
            # needs more, then each one is refused, saying why.
            answers = []
            for i in range(2000):
                r = api.put(f"/names/n{i}", json={"pdh": pdh})
                answers.append(r.status_code)
                if r.status_code != 200:
                    break
            assert answers[-1] == 507, answers[-5:]
            assert set(answers[:-1]) <= {200}
            error = r.json()["error"]
            assert error == "the controller's disk is full: nothing was changed; try again later"
            refused = f"n{len(answers) - 1}"
            with pytest.raises(NotFoundError):
                catalog.get_name(ctl.state.engine, refused)
            # Another user on the command line: one line, exit code 1.
            env = {"WH_URL": ctl.url, "WH_TOKEN": alice}
            done = wh_process("name", "set", "alices", pdh, env=env, home=tmp_path / "h")
            assert done.returncode == 1, done.stderr
            assert done.stderr == (
                f"Error: the controller at {ctl.url} has no room: the controller's disk "
                "is full: nothing was changed; try again later\n"
            )
            # Room again: the same request is taken.
            filler.unlink()
            assert api.put(f"/names/{refused}", json={"pdh": pdh}).status_code == 200
            done = wh_process("name", "set", "alices", pdh, env=env, home=tmp_path / "h")
            assert done.returncode == 0, done.stderr


FILLS_THE_DISK = """\
import os, sys
print("filling the log", flush=True)
try:
    while True:
        os.write(1, b"x" * 65536)
except OSError:
    os._exit(0)  # as a program ignoring its write errors would
"""


def _job_ends(api: httpx.Client, job: int) -> dict[str, object]:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        got = api.get(f"/jobs/{job}").json()
        if got["state"] in ("complete", "failed", "cancelled"):
            return got  # type: ignore[no-any-return]
        time.sleep(0.2)
    raise AssertionError(f"job {job} did not end: {got}")


def test_a_step_that_fills_the_disk_fails_its_job_with_the_reason(
    tmp_path: Path, keep_servers: KeepPool, caplog: pytest.LogCaptureFixture
) -> None:
    """A step that fills the disk of its scratch and log and ignores its write
    errors (exit status 0) fails, its log saying why, never "complete"."""
    repo = tmp_path / "lab"
    repo.mkdir()
    (repo / "fill.py").write_text(FILLS_THE_DISK)
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-qm", "fill"]):
        subprocess.run(
            ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
            check=True,
        )
    with (
        small_disk(tmp_path / "disk", "16m") as disk,
        controller(disk / "c.db", keep_servers) as ctl,
    ):
        ctl.state.start_jobs(ctl.url, disk / "controller-jobs", "local", cpus=1)
        alice, bob = ctl.user("alice"), ctl.user("bob")
        api = httpx.Client(
            base_url=f"{ctl.url}/api/v1", headers={"Authorization": f"Bearer {alice}"}, timeout=60
        )
        with contextlib.closing(api):
            pdh = api.post(
                "/collections", json={"manifest_text": f". {EMPTY_LOCATOR} 0:0:f\n"}
            ).json()["pdh"]
            r = api.post(
                "/jobs",
                json={"function": f"git:{repo}@main:fill.py", "input": pdh, "max_attempts": 1},
            )
            assert r.status_code == 200, r.text
            job = _job_ends(api, r.json()["id"])
            assert job["state"] == "failed", job
            assert "the disk holding the step's scratch and log is full" in str(job["error"])
            (step,) = api.get(f"/jobs/{job['id']}/steps").json()
            assert step["state"] == "failed" and step["exit_status"] == 1, step
            assert step["log_tail"].endswith("what it wrote may be cut short\n")
            # The manager lives on: its next job runs, and other users' requests are answered.
            assert not [r for r in caplog.records if "job manager failed" in r.getMessage()]
            (repo / "ok.py").write_text("print('fine')\n")
            for args in (["add", "."], ["commit", "-qm", "ok"]):
                subprocess.run(
                    ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@x", *args],
                    check=True,
                )
            r = api.post("/jobs", json={"function": f"git:{repo}@main:ok.py", "input": pdh})
            assert _job_ends(api, r.json()["id"])["state"] == "complete"
            bobs = api.put(
                "/names/bobs", json={"pdh": pdh}, headers={"Authorization": f"Bearer {bob}"}
            )
            assert bobs.status_code == 200, bobs.text
