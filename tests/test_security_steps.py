"""A job step of an ordinary user attacks its controller (docs/security.md).

The controller runs in this process with the local executor, and again with
the Slurm executor on the real one-node cluster (scripts/slurm.sh, whose node
is this machine), over real keep server processes; the step is a real
program in the real sandbox. It tries to
read and write the catalog file (which holds the signing key), to read keep
volume files, another job's scratch and another user's function, and to find
the catalog by walking up from its working directory. Every try must fail,
while the step still reaches the API with its job token.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import WH_BIN, Controller, KeepPool, controller
from conftest import Runner
from jobs_helpers import make_text
from warehouse.cli import cli

ATTACK = r"""
import json, os, sys, urllib.request

targets = json.loads(os.environ["WH_PARAMS"])["targets"]
for label, path in sorted(targets.items()):
    try:
        if os.path.isdir(path):
            found = os.listdir(path)
            print(f"READ {label} {found}" if found else f"EMPTY {label}")
        else:
            with open(path, "rb") as f:
                f.read(64)
            print(f"READ {label}")
    except OSError as e:
        print(f"DENIED {label} {e.__class__.__name__}")
    try:
        with open(path, "ab") as f:
            f.write(b"x")
        print(f"WROTE {label}")
    except OSError as e:
        print(f"UNWRITTEN {label} {e.__class__.__name__}")

# Walk up from the working directory, looking for the catalog.
here = os.path.abspath(".")
while True:
    try:
        names = os.listdir(here)
    except OSError:
        names = []
    if "controller.db" in names:
        print(f"FOUND controller.db in {here}")
    if here == "/":
        break
    here = os.path.dirname(here)

request = urllib.request.Request(
    os.environ["WH_URL"] + "/api/v1/users/current",
    headers={"Authorization": "Bearer " + os.environ["WH_TOKEN"]},
)
with urllib.request.urlopen(request) as r:
    print("API", json.load(r)["name"])
with open(os.path.join(os.environ["WH_SCRATCH"], "mine"), "w") as f:
    f.write("scratch is writable")
print("SCRATCH ok")
"""


@pytest.fixture(params=["local", "slurm"])
def ctl(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    keep_servers: KeepPool,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Controller]:
    # Slurm: the controller's machine is the one-node cluster's node, as on a
    # small installation where slurmd runs beside the controller.
    if request.param == "slurm":
        request.getfixturevalue("slurm_cluster")
    with controller(tmp_path / "controller.db", keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", request.param, cpus=2)
        monkeypatch.setenv("WH_URL", c.url)
        monkeypatch.setenv("WH_HOME", str(tmp_path / "unused-home"))
        yield c


def _submit(run: Runner, function: str, key: str, *params: str) -> dict[str, object]:
    args = ["job", "submit", function, "--input", key, *params, "--wait", "--json"]
    result = run.runner.invoke(cli, args, catch_exceptions=False)
    out = result.output
    job = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert isinstance(job, dict)
    assert result.exit_code == 0, run("job", "logs", str(job["id"])).output
    return job


def test_a_step_cannot_reach_the_controllers_files_but_reaches_the_api(
    ctl: Controller,
    run: Runner,
    tmp_path: Path,
    keep_servers: KeepPool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs_dir = tmp_path / "controller-jobs"
    # Bob's job runs first: his function is unpacked beside the attacker's.
    monkeypatch.setenv("WH_TOKEN", ctl.user("bob"))
    bob_fn = tmp_path / "bob-fn"
    bob_fn.mkdir()
    (bob_fn / "secret.sh").write_text("#!/bin/sh\necho bob secret method\n")
    bob_pdh = run("put", str(bob_fn)).output.split()[-1]
    key = run("put", str(make_text(tmp_path / "in"))).output.split()[-1]
    assert _submit(run, f"{bob_pdh}/secret.sh", key)["state"] == "complete"
    # Another job's scratch, as it is while that job runs.
    other = jobs_dir / "scratch" / "local-1-other" / "tmp"
    other.mkdir(parents=True)
    (other / "secret").write_text("another job's data")

    blocks = [p for p in keep_servers.servers[0].volume.rglob("*") if p.is_file()]
    assert blocks
    targets = {
        "catalog": str(tmp_path / "controller.db"),
        "catalog-wal": str(tmp_path / "controller.db-wal"),
        "keep-volume": str(keep_servers.servers[0].volume),
        "keep-block": str(blocks[0]),
        "signing-key-file": str(keep_servers.root / "signing.key"),
        "other-scratch": str(other / "secret"),
        "scratch-root": str(jobs_dir / "scratch"),
        "functions": str(jobs_dir / "functions"),
        "bob-function": str(jobs_dir / "functions" / bob_pdh / "secret.sh"),
    }
    monkeypatch.setenv("WH_TOKEN", ctl.user("mallory"))
    fn = tmp_path / "attack"
    fn.mkdir()
    (fn / "attack.py").write_text(ATTACK)
    fn_pdh = run("put", str(fn)).output.split()[-1]
    job = _submit(run, f"{fn_pdh}/attack.py", key, "--param", f"targets={json.dumps(targets)}")
    assert job["state"] == "complete", job
    log = run("job", "logs", str(job["id"]), "--step", "0").output

    assert "API mallory" in log and "SCRATCH ok" in log, log
    assert "FOUND" not in log, log
    for label in targets:
        if label in ("scratch-root", "functions"):
            continue  # it sees its own scratch and function there, and only those
        assert f"DENIED {label}" in log or f"EMPTY {label}" in log, (label, log)
        assert f"UNWRITTEN {label}" in log, (label, log)
    assert "local-1-other" not in log and bob_pdh not in log, log
    assert (other / "secret").read_text() == "another job's data"
    if os.geteuid() == 0:
        # As root the controller runs steps as an unprivileged user of their own.
        assert ctl.state.job_manager is not None
        sandbox = ctl.state.job_manager.sandbox
        assert sandbox is not None and sandbox.user is not None
        assert sandbox.user.uid != 0


def test_serve_refuses_local_steps_without_bubblewrap_unless_unsafe(tmp_path: Path) -> None:
    # A PATH with our `wh` but without bwrap.
    env = {**os.environ, "PATH": str(Path(WH_BIN).parent), "WH_HOME": str(tmp_path / "home")}
    db = f"sqlite:///{tmp_path / 'c.db'}"
    refused = subprocess.run(
        [WH_BIN, "serve", "--listen", "127.0.0.1:0", "--db", db],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0
    assert refused.stderr.startswith("Error: bubblewrap (bwrap) is not installed or cannot"), (
        refused.stderr
    )
    assert "Traceback" not in refused.stderr
    # Nor Dask workers started here, which would run steps unsandboxed.
    dask = subprocess.run(
        [WH_BIN, "serve", "--listen", "127.0.0.1:0", "--db", db, "--executor", "dask"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dask.returncode != 0
    assert dask.stderr.startswith("Error: --executor dask without --dask-scheduler"), dask.stderr

    proc = subprocess.Popen(
        [WH_BIN, "serve", "--listen", "127.0.0.1:0", "--db", db, "--unsafe-steps"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline().startswith("controller listening on ")
        warning = ""
        for line in proc.stderr:
            if "UNSAFE" in line:
                warning = line
                break
        assert "any user who can submit a job can become admin" in warning
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def test_the_sandbox_command_line_hides_nothing_it_mounts() -> None:
    from warehouse.jobs.sandbox import Sandbox, StepsUser

    box = Sandbox("/usr/bin/bwrap", "/usr/bin/setpriv", StepsUser("wh-steps", 999, 999), ())
    cmd = box.wrap(
        ["/x/run.sh", "--flag"],
        function_dir="/tmp/a/functions/f",
        scratch="/tmp/a/scratch/w/tmp",
        result="/tmp/a/scratch/w/result",
    )
    tmpfs = cmd.index("--tmpfs")
    scratch = cmd.index("/tmp/a/scratch/w/tmp")
    assert tmpfs < scratch  # a later tmpfs on /tmp would hide the scratch
    assert cmd[scratch - 1] == "--bind" and cmd[cmd.index("/tmp/a/functions/f") - 1] == "--ro-bind"
    made = cmd.index("/tmp/a")
    assert cmd[made - 3 : made] == ["--perms", "0755", "--dir"]  # searchable by the step's user
    assert cmd[-4:] == ["--bounding-set=-all", "--", "/x/run.sh", "--flag"]
    assert "--reuid=999" in cmd and "--unshare-pid" in cmd and "--die-with-parent" in cmd
    assert not any(p == "/etc/shadow" or p.startswith("/etc/ssl/private") for p in cmd)
    plain = Sandbox("/usr/bin/bwrap", None, None, ()).wrap(
        ["/x/run.sh"], function_dir="/f", scratch="/s/tmp", result="/s/result"
    )
    assert "--cap-add" not in plain and plain[-2:] == ["--", "/x/run.sh"]


def _one_slurm_step(tmp_path: Path, fn: Path, sandbox: Any, env: dict[str, str]) -> list[Any]:
    """Run ``fn/step.sh`` as one step on the real Slurm cluster; what ended."""
    from warehouse.jobs.executors import Launch
    from warehouse.jobs.model import Resources
    from warehouse.jobs.slurmexec import SlurmExecutor

    executor = SlurmExecutor(owner=str(tmp_path), sandbox=sandbox)
    try:
        scratch = str(tmp_path / "scratch")
        executor.start(Launch(1, 0, 1, (str(fn / "step.sh"),), env, scratch, Resources(1, 0)))
        deadline = time.monotonic() + 120
        done: list[Any] = []
        while not done and time.monotonic() < deadline:
            done = executor.poll(1.0)
    finally:
        executor.close()
    assert len(done) == 1, "the Slurm job did not end in time"
    return done


def test_a_slurm_node_without_bubblewrap_runs_no_step(slurm_cluster: str, tmp_path: Path) -> None:
    """The Slurm batch script runs a step only through bwrap: where the node
    has none, the step fails saying so, and its program never starts."""
    from warehouse.jobs.sandbox import find_sandbox

    real = find_sandbox()
    assert real is not None
    missing = dataclasses.replace(real, bwrap=str(tmp_path / "no" / "bwrap"))
    fn = tmp_path / "fn"
    fn.mkdir()
    ran = tmp_path / "ran"
    (fn / "step.sh").write_text(f"#!/bin/sh\ntouch {ran}\n")
    (fn / "step.sh").chmod(0o755)
    done = _one_slurm_step(tmp_path, fn, missing, {"WH_FUNCTION_DIR": str(fn)})
    assert done[0].exit_status == 126, done[0]
    assert b"(bubblewrap) is missing on node" in done[0].log, done[0].log
    assert not ran.exists()


def test_a_controller_refuses_slurm_steps_without_bubblewrap(
    tmp_path: Path, keep_servers: KeepPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Slurm node may be this very machine: without a sandbox, no Slurm steps
    (refused before Slurm is asked), unless unsafe steps are asked for."""
    from warehouse.errors import UsageError

    monkeypatch.setenv("PATH", str(Path(WH_BIN).parent))  # no bwrap on it
    with controller(tmp_path / "controller.db", keep_servers) as c:
        with pytest.raises(UsageError, match="slurm:wh job steps cannot be sandboxed"):
            c.state.start_jobs(c.url, tmp_path / "controller-jobs", "slurm:wh")
        assert c.state.job_manager is None


def test_a_slurm_step_gets_its_token_on_no_command_line(
    slurm_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any local account on a node may read every process's command line
    (/proc/PID/cmdline): the batch script must hand a step its environment
    (its job's token) through the shell's own exports, never as the
    arguments of a program such as ``env``. The step still gets exactly
    its environment, and nothing of the batch job's (SLURM_*)."""
    from warehouse.jobs.sandbox import find_sandbox

    real = shutil.which("sbatch")
    assert real
    scripts = tmp_path / "scripts"
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sbatch").write_text(f'#!/bin/sh\ntee -a {scripts} | exec {real} "$@"\n')
    (shim / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    sandbox = find_sandbox()
    assert sandbox is not None
    fn = tmp_path / "fn"
    fn.mkdir()
    (fn / "step.sh").write_text("#!/bin/sh\nenv\n")
    (fn / "step.sh").chmod(0o755)
    fn.chmod(0o755)
    secret = "wh" + "s3cretT0ken" * 3
    done = _one_slurm_step(tmp_path, fn, sandbox, {"WH_FUNCTION_DIR": str(fn), "WH_TOKEN": secret})
    assert done[0].exit_status == 0, done[0]
    seen = done[0].log.decode()
    assert f"WH_TOKEN={secret}" in seen and "WH_SCRATCH=" in seen, seen
    assert "SLURM_" not in seen, seen
    script = scripts.read_text()
    assert secret in script
    for line in script.splitlines():
        for part in line.split(" && "):
            # The shell's export builtin, run in the batch script's own shell.
            assert secret not in part or part.startswith("export "), part[:300]
