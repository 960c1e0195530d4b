"""Bad input and damaged data end in one `Error:` line with the documented exit
code (docs/cli.md), and the servers answer 4xx, never 500."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cluster import KeepPool, controller
from conftest import Runner, wh_process
from installations import Installation
from jobs_helpers import put_function, run_job
from warehouse.cli.web import sign_in_token
from warehouse.embedded import EmbeddedWarehouse
from warehouse.server.serving import ServerThread
from warehouse.web import create_web_app

HUGE = "99999999999999999999999"
E = "d41d8cd98f00b204e9800998ecf8427e+0"


def one_error(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), stderr
    return lines[0]


# -- manifests, --expect, missing blocks ---------------------------------------------


def test_a_manifest_with_a_file_and_a_directory_of_one_name_is_refused(
    tmp_path: Path, home: Path
) -> None:
    text = tmp_path / "m.txt"
    text.write_text(f". {E} 0:0:a 0:0:a/\\056\n")
    done = wh_process("put", "--manifest", str(text), "--name", "n", home=home)
    assert done.returncode == 2
    line = one_error(done.stderr)
    assert "manifest line 1" in line and "'0:0:a'" in line and "0:0:a/\\\\056" in line
    assert (
        wh_process("name", "ls", home=home).stdout == "name\tpdh\tversion\tupdated_at\tupdated_by\n"
    )


def test_expect_must_be_a_pdh(tmp_path: Path, home: Path, run: Runner) -> None:
    (tmp_path / "d").mkdir()
    pdh = run("put", str(tmp_path / "d"), "--name", "n").stdout.strip()
    for args in (("put", str(tmp_path / "d")), ("name", "set")):
        tail = ("--name", "n") if args[0] == "put" else ("n", pdh)
        done = wh_process(*args, *tail, "--expect", "garbage", home=home)
        assert done.returncode == 2, done.stderr
        assert "not a portable data hash" in one_error(done.stderr)
    assert json.loads(run("name", "log", "n", "--json").stdout)[-1]["version"] == 1


def test_a_wh_home_that_is_a_file_says_it_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a warehouse\n")
    for home in (tmp_path / "file", tmp_path / "file" / "below"):
        done = wh_process("name", "ls", home=home)
        assert done.returncode == 1, done.stderr
        assert one_error(done.stderr) == f"Error: {home}: Not a directory"
    assert (tmp_path / "file").read_text() == "not a warehouse\n"
    # Someone's directory, named by mistake, is not taken over (made private,
    # filled with a catalog), even by a command that only reads.
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o775)
    shared.chmod(0o775)
    (shared / "notes.txt").write_text("doc\n")
    done = wh_process("ls", "x", home=shared)
    assert done.returncode == 2, done.stderr
    assert "holds other files and no warehouse" in one_error(done.stderr)
    assert sorted(os.listdir(shared)) == ["notes.txt"]
    assert shared.stat().st_mode & 0o777 == 0o775


def test_a_missing_manifest_block_is_corrupt_data(
    tmp_path: Path, installation: Installation
) -> None:
    run = Runner()
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("data\n")
    pdh = run("put", str(tmp_path / "d"), "--name", "n").stdout.strip()
    # The manifest is one block: its portable text, whose MD5 the PDH carries.
    copies = installation.copies(pdh.split("+")[0])
    assert copies
    for copy in copies:
        copy.unlink()
    for key in ("n", pdh):
        result = run("get", key, str(tmp_path / "out"), code=5)
        assert "manifest" in result.stderr and "missing" in result.stderr
    assert not (tmp_path / "out").exists()


# -- integer ids beyond the catalog's ------------------------------------------------


def test_the_api_answers_404_for_ids_it_cannot_hold(tmp_path: Path, keep_servers: KeepPool) -> None:
    with controller(tmp_path / "c.db", keep_servers) as ctl:
        auth = {"Authorization": f"Bearer {ctl.user('alice')}"}
        for method, path, body in [
            ("GET", f"/api/v1/jobs/{HUGE}", None),
            ("GET", "/api/v1/jobs/2147483648", None),
            ("GET", f"/api/v1/jobs/{HUGE}/steps", None),
            ("POST", f"/api/v1/jobs/{HUGE}/control", {"control": "cancel"}),
        ]:
            resp = httpx.request(method, ctl.url + path, headers=auth, json=body, verify=False)
            assert resp.status_code == 404, (path, resp.status_code, resp.text)
        resp = httpx.get(
            ctl.url + f"/api/v1/jobs/1/steps?number={HUGE}", headers=auth, verify=False
        )
        assert resp.status_code == 404  # no job 1 either


@pytest.fixture
def web(tmp_path: Path) -> Iterator[httpx.Client]:
    with (
        EmbeddedWarehouse(tmp_path / "home", user="alice") as wh,
        ServerThread(create_web_app(wh)) as server,
        httpx.Client(base_url=server.url, timeout=30) as client,
    ):
        answer = client.post("/web/signin", data={"token": sign_in_token(wh), "next": "/web/"})
        assert answer.status_code == 303
        yield client


def test_the_pages_answer_404_for_ids_they_cannot_hold(web: httpx.Client) -> None:
    for path in (f"/web/jobs/{HUGE}", f"/web/jobs/{HUGE}/steps/1", f"/web/jobs/1/steps/{HUGE}"):
        assert web.get(path).status_code == 404, path
    assert web.post(f"/web/jobs/{HUGE}/cancel").status_code == 404
    progress = web.get(f"/web/jobs/progress.json?ids={HUGE},1,²")
    assert progress.status_code == 200 and progress.json() == {}


# -- wh job watch of a failed job -----------------------------------------------------

FAILS_AT_LEVEL_1 = """#!/bin/sh
if [ "$WH_STEP" = 0 ]; then
    wh step queue --level 1 only
    exit 0
fi
echo "level 1 fails" >&2
exit 3
"""


def test_watch_of_a_failed_job_exits_1_and_does_not_show_it_all_done(
    wh: EmbeddedWarehouse, tmp_path: Path, home: Path
) -> None:
    fn = put_function(wh, tmp_path, "fails.sh", FAILS_AT_LEVEL_1)
    (tmp_path / "in").mkdir()
    job = run_job(wh, fn, wh.put([tmp_path / "in"]).pdh, max_attempts=1)
    assert (job.state, job.steps_done) == ("failed", 1)
    # The bar as a terminal shows it (rich draws it only on one).
    done = wh_process("job", "watch", str(job.id), home=home, env={"TTY_COMPATIBLE": "1"})
    assert done.returncode == 1, done.stderr
    assert done.stdout == f"job {job.id}: failed\n"
    assert "1/2" in done.stderr and "1/1" not in done.stderr
    last = re.sub(
        r"\x1b\[[0-9;?]*[A-Za-z]", "", done.stderr.splitlines()[-1]
    )  # the terminal's codes
    assert last.startswith(f"Error: job {job.id} failed")
    # The same outcome, the same exit code as submit --wait.
    again = wh_process(
        "job",
        "submit",
        fn,
        "--input",
        job.input_pdh,
        "--no-reuse",
        "--wait",
        "--attempts",
        "1",
        home=home,
    )
    assert again.returncode == done.returncode
