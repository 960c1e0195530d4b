"""An ordinary user attacks the controller's JSON API (docs/security.md).

A real controller with its job manager (local executor, sandboxed steps)
over real keep server processes; alice sends what any HTTP client can send.
Each test performs one attack and asserts it fails.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cluster import WH_BIN, Controller, KeepPool, controller
from conftest import Runner
from jobs_helpers import make_text
from warehouse import catalog
from warehouse.cli import cli
from warehouse.errors import UsageError
from warehouse.jobs import executors
from warehouse.jobs.sandbox import Sandbox, StepsUser
from workflow_helpers import git

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


def _repo(path: Path) -> Path:
    """A git repository of one committed file, on branch main."""
    path.mkdir(parents=True)
    (path / "secret.txt").write_text("the installation's own\n")
    git(path, "init", "-q", "-b", "main")
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "one")
    return path


def test_a_repository_on_the_controllers_disk_is_read_only_under_its_git_roots(
    tmp_path: Path, keep_servers: KeepPool
) -> None:
    """The controller reads a local repository as its own user, for any user:
    outside the directories its admin allows (wh serve --git-root), by path,
    file:// URL or a link out of an allowed one, a repository is refused
    (403) and nothing of it stored."""
    allowed = tmp_path / "allowed"
    ok = _repo(allowed / "lab")
    outside = _repo(tmp_path / "installation")
    (allowed / "link").symlink_to(outside)
    db = tmp_path / "controller.db"
    with controller(db, keep_servers, git_roots=(str(allowed),)) as ctl:
        ctl.state.start_jobs(ctl.url, tmp_path / "controller-jobs", "local", cpus=1)
        with _client(ctl, ctl.user("alice")) as alice:
            r = alice.post("/api/v1/collections", json={"manifest_text": f". {EMPTY} 0:0:f\n"})
            one_file = r.json()["pdh"]
            for repo in (str(outside), f"file://{outside}", str(allowed / "link")):
                for body in (
                    {"function": f"git:{repo}@main:secret.txt", "input": one_file},
                    {
                        "function": "builtin:mapreduce",
                        "input": one_file,
                        "params": {"code": f"git:{repo}@main", "mapper": "m", "reducer": "r"},
                    },
                ):
                    r = alice.post("/api/v1/jobs", json=body)
                    assert r.status_code == 403, (repo, r.text)
                    assert "--git-root" in r.json()["error"]
            secret = b"the installation's own\n"
            assert not any(
                c.size == len(secret) for c in catalog.list_collections(ctl.state.engine)
            )
            # Under an allowed directory, it is read as before.
            r = alice.post(
                "/api/v1/jobs", json={"function": f"git:{ok}@main:secret.txt", "input": one_file}
            )
            assert r.status_code == 200, r.text


def test_git_finds_no_repository_outside_the_git_roots_from_inside_them(
    tmp_path: Path, keep_servers: KeepPool
) -> None:
    """A directory under an allowed one may hold no repository of its own:
    git then looks up the tree and finds whatever repository lies above the
    allowed directory (a home directory or /etc kept in git). Nor may a
    `.git` file there name a repository elsewhere, nor its object alternates
    another's objects. Each is refused (403)."""
    outside = _repo(tmp_path / "installation")
    allowed = outside / "repos"
    (allowed / "plain").mkdir(parents=True)
    (allowed / "pointer").mkdir()
    (allowed / "pointer" / ".git").write_text(f"gitdir: {outside / '.git'}\n")
    borrowing = allowed / "borrowing"  # its objects are the outside repository's
    borrowing.mkdir()
    git(borrowing, "init", "-q", "-b", "main")
    (borrowing / ".git" / "objects" / "info" / "alternates").write_text(
        f"{outside / '.git' / 'objects'}\n"
    )
    git(borrowing, "update-ref", "refs/heads/main", git(outside, "rev-parse", "HEAD"))
    db = tmp_path / "controller.db"
    with controller(db, keep_servers, git_roots=(str(allowed),)) as ctl:
        ctl.state.start_jobs(ctl.url, tmp_path / "controller-jobs", "local", cpus=1)
        with _client(ctl, ctl.user("alice")) as alice:
            r = alice.post("/api/v1/collections", json={"manifest_text": f". {EMPTY} 0:0:f\n"})
            one_file = r.json()["pdh"]
            for repo in (allowed / "pointer", allowed / "borrowing", allowed, allowed / "plain"):
                body = {"function": f"git:{repo}@main:secret.txt", "input": one_file}
                r = alice.post("/api/v1/jobs", json=body)
                assert r.status_code == 403, (repo, r.text)
                assert "--git-root" in r.json()["error"]
            secret = b"the installation's own\n"
            assert not any(
                c.size == len(secret) for c in catalog.list_collections(ctl.state.engine)
            )


def test_a_git_spec_cannot_fetch_through_a_command_transport(
    alice: httpx.Client, one_file: str, tmp_path: Path
) -> None:
    """Only http(s), git, ssh and file are fetched: no "ext::" command, no other
    helper (refused by the controller's --git-allow before git runs)."""
    ran = tmp_path / "ran"
    for repo in (f"ext::sh -c touch% {ran}", "fd::3"):
        r = alice.post(
            "/api/v1/jobs", json={"function": f"git:{repo}@main:x.py", "input": one_file}
        )
        assert r.status_code == 403 and "--git-allow" in r.json()["error"], r.text
        assert not ran.exists()


# A step's calls of the API with its job's token: each prints what came of it.
CALLS_THE_API = """
import json, os, urllib.error, urllib.request


def call(method, path, body=None):
    request = urllib.request.Request(
        os.environ["WH_URL"] + "/api/v1" + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={
            "Authorization": "Bearer " + os.environ["WH_TOKEN"],
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request) as r:
            print("DONE", method, path, r.read().decode()[:200])
    except urllib.error.HTTPError as e:
        print("REFUSED", e.code, method, path, json.load(e)["error"])

"""

MINTS_A_TOKEN = CALLS_THE_API + 'call("POST", "/tokens", {"label": "kept"})\n'


def _run_step(run: Runner, tmp_path: Path, name: str, script: str) -> tuple[dict[str, Any], str]:
    """Submit ``script`` as a one-step function (as the user ``WH_TOKEN``
    names) and wait: the job's JSON and its step's log."""
    fn = tmp_path / "fn"
    fn.mkdir()
    (fn / name).write_text(script)
    fn_pdh = run("put", str(fn)).output.split()[-1]
    key = run("put", str(make_text(tmp_path / "in"))).output.split()[-1]
    args = ["job", "submit", f"{fn_pdh}/{name}", "--input", key, "--wait", "--json"]
    out = run.runner.invoke(cli, args, catch_exceptions=False).output
    job = json.loads(out[out.index("{") : out.rindex("}") + 1])
    return job, run("job", "logs", str(job["id"]), "--step", "0").output


def test_a_step_cannot_make_a_token_that_outlives_its_job(
    ctl: Controller, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step acts for its submitter only while the job runs (its token is
    revoked when the job ends): it may not make itself a lasting token, as
    someone else's function run by alice could."""
    monkeypatch.setenv("WH_URL", ctl.url)
    monkeypatch.setenv("WH_TOKEN", ctl.user("alice"))
    monkeypatch.setenv("WH_HOME", str(tmp_path / "unused-home"))
    run = Runner()
    _, log = _run_step(run, tmp_path, "mint.py", MINTS_A_TOKEN)
    assert "REFUSED 403 POST /tokens a job's token cannot make tokens" in log, log
    assert "DONE" not in log
    assert "kept" not in [t["label"] for t in json.loads(run("token", "ls", "--json").output)]
    # alice herself still can.
    assert run("token", "create", "--label", "mine").exit_code == 0


USES_AN_ADMINS_RIGHTS = (
    CALLS_THE_API
    + """
call("GET", "/users/current")
call("GET", "/cluster/keep-config")
call("POST", "/users", {"name": "mallory", "admin": True})
call("POST", "/keep_services", {"url": "http://127.0.0.1:9"})
call("PUT", "/gc/settings", {"history_retention": 0})
"""
)


def test_a_step_run_by_an_admin_gets_no_admin_rights(
    ctl: Controller, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An admin who runs someone else's function (resubmits alice's job, or
    runs her PDH/PATH) hands it the job's token. Its effects must end with
    the job: it may not read the signing key (a lasting capability), add an
    admin, or register a keep server that every client would then send its
    token to. A job's token acts as a plain user's."""
    monkeypatch.setenv("WH_URL", ctl.url)
    monkeypatch.setenv("WH_TOKEN", ctl.admin_token)
    monkeypatch.setenv("WH_HOME", str(tmp_path / "unused-home"))
    job, log = _run_step(Runner(), tmp_path, "admin.py", USES_AN_ADMINS_RIGHTS)
    assert job["state"] == "complete", log
    assert '"admin":false' in log, log
    assert "DONE" not in log.replace("DONE GET /users/current", ""), log
    for call in ("GET /cluster/keep-config", "POST /users", "POST /keep_services"):
        assert f"REFUSED 403 {call} " in log, log
    assert "REFUSED 403 PUT /gc/settings " in log, log
    assert "mallory" not in [u.name for u in catalog.list_users(ctl.state.engine)]
    assert len(catalog.list_keep_services(ctl.state.engine)) == 4
    # The admin's own token keeps its rights.
    with _client(ctl, ctl.admin_token) as admin:
        assert admin.get("/api/v1/cluster/keep-config").status_code == 200


PRINTS_ITS_ENVIRONMENT = """#!/bin/sh
env
"""


def test_a_sandboxed_step_gets_none_of_the_controllers_other_environment(
    tmp_path: Path, keep_servers: KeepPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's own environment may hold secrets of the installation
    (the catalog's PGPASSWORD, a cloud key): a step of alice's sees none of
    them, only what a program needs and its own protocol variables."""
    monkeypatch.setenv("PGPASSWORD", "catalog-password")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "cloud-key")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    with controller(tmp_path / "controller.db", keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=1)
        monkeypatch.setenv("WH_URL", c.url)
        monkeypatch.setenv("WH_TOKEN", c.user("alice"))
        monkeypatch.setenv("WH_HOME", str(tmp_path / "unused-home"))
        job, log = _run_step(Runner(), tmp_path, "env.sh", PRINTS_ITS_ENVIRONMENT)
        assert job["state"] == "complete", log
    assert "catalog-password" not in log and "cloud-key" not in log, log
    assert "WH_TOKEN=" in log and "WH_SCRATCH=" in log and "PATH=" in log, log
    assert "LC_ALL=C.UTF-8" in log, log


FLOODS = r"""
import os, sys

what = os.environ["WH_PARAMS"]
if "log" in what:
    sys.stdout.write("first line\n" + "x" * (3 << 20) + "\nlast line\n")
else:
    with open(os.environ["WH_RESULT"], "w") as f:
        f.write(" " * (2 << 20))
"""


def test_a_step_cannot_make_the_controller_read_a_huge_log_or_result(
    ctl: Controller, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manager reads a step's log and result file into its memory: a step
    writing gigabytes would take the controller down. A long log keeps its two
    ends; a long result fails the step. (The bounds are lowered here to keep
    the test small.)"""
    monkeypatch.setattr(executors, "MAX_LOG", 1 << 20)
    monkeypatch.setattr(executors, "MAX_RESULT", 1 << 20)
    monkeypatch.setenv("WH_URL", ctl.url)
    monkeypatch.setenv("WH_TOKEN", ctl.user("alice"))
    monkeypatch.setenv("WH_HOME", str(tmp_path / "unused-home"))
    run = Runner()
    fn = tmp_path / "fn"
    fn.mkdir()
    (fn / "flood.py").write_text(FLOODS)
    fn_pdh = run("put", str(fn)).output.split()[-1]
    key = run("put", str(make_text(tmp_path / "in"))).output.split()[-1]

    def job(what: str, code: int) -> dict[str, object]:
        args = ["job", "submit", f"{fn_pdh}/flood.py", "--input", key, "--json"]
        args += ["--param", f"what={what}", "--attempts", "1", "--wait"]
        out = run(*args, code=code).output
        made = json.loads(out[out.index("{") : out.rindex("}") + 1])
        assert isinstance(made, dict)
        return made

    long_log = job("log", 0)
    assert long_log["state"] == "complete", long_log
    log = run("job", "logs", str(long_log["id"]), "--step", "0").output
    assert log.startswith("first line") and log.rstrip().endswith("last line"), log[-200:]
    assert "bytes of the log left out" in log and len(log) < (1 << 20) + 1000
    long_result = job("result", 1)
    assert long_result["state"] == "failed", long_result
    log = run("job", "logs", str(long_result["id"]), "--step", "0").output
    assert f"result file is over {1 << 20} bytes: refused" in log, log


def _complete(client: httpx.Client, job: dict[str, object]) -> None:
    deadline = time.monotonic() + 120
    while job["state"] not in ("complete", "failed", "cancelled"):
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
        job = client.get(f"/api/v1/jobs/{job['id']}").json()
    assert job["state"] == "complete", job


def test_regol_runs_a_watch_only_for_its_owner_and_as_its_owner(
    ctl: Controller, alice: httpx.Client, one_file: str, tmp_path: Path
) -> None:
    """A watch runs code its owner chose (their branch). Another user, or an
    admin, asking for runs must not hand that code their own job token: bob
    may not run or bisect alice's watch, his runs by default are his own
    watches', and an admin's runs of alice's watch are submitted as alice."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "f.sh").write_text("#!/bin/sh\necho one\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "one")
    first = git(repo, "rev-parse", "HEAD")
    body = {"function": f"git:{repo}@main:f.sh", "input": one_file}
    job = alice.post("/api/v1/jobs", json=body).json()
    _complete(alice, job)
    watch = alice.post("/api/v1/regol/watches", json={"job": job["id"]}).json()
    (repo / "f.sh").write_text("#!/bin/sh\necho two\n")
    git(repo, "commit", "-q", "-am", "two")

    with _client(ctl, ctl.user("bob")) as bob:
        assert bob.post("/api/v1/regol/runs", json={}).json() == []
        named = bob.post("/api/v1/regol/runs", json={"watches": [watch["id"]]})
        assert named.status_code == 403, named.text
        assert named.json()["error"] == f"watch {watch['id']} belongs to alice"
        bisect = {"good": first, "bad": "main"}
        refused = bob.post(f"/api/v1/regol/watches/{watch['id']}/bisect", json=bisect)
        assert refused.status_code == 403, refused.text
        assert [j for j in bob.get("/api/v1/jobs").json() if j["submitted_by"] == "bob"] == []

    with _client(ctl, ctl.admin_token) as admin:
        runs = admin.post("/api/v1/regol/runs", json={}).json()
    assert runs, "the admin's request ran nothing"
    for r in runs:
        made = alice.get(f"/api/v1/jobs/{r['job']}").json()
        assert made["submitted_by"] == "alice", made


MAKES_A_WATCH = CALLS_THE_API + 'call("POST", "/regol/watches", {"job": JOB})\n'


def test_a_step_cannot_leave_a_watch_that_runs_code_as_its_submitter(
    ctl: Controller,
    alice: httpx.Client,
    one_file: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A watch is a standing order: the controller runs every new commit of
    its branch as the watch's owner. alice's function run once by bob must
    not leave one behind in his name, running her future commits with his
    rights long after that job ended."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "f.sh").write_text("#!/bin/sh\necho one\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "one")
    job = alice.post("/api/v1/jobs", json={"function": f"git:{repo}@main:f.sh", "input": one_file})
    _complete(alice, job.json())
    monkeypatch.setenv("WH_URL", ctl.url)
    monkeypatch.setenv("WH_TOKEN", ctl.user("bob"))
    monkeypatch.setenv("WH_HOME", str(tmp_path / "unused-home"))
    script = MAKES_A_WATCH.replace("JOB", str(job.json()["id"]))
    ran, log = _run_step(Runner(), tmp_path, "watch.py", script)
    assert ran["state"] == "complete", log
    assert "REFUSED 403 POST /regol/watches a job's token cannot make watches" in log, log
    assert alice.get("/api/v1/regol/watches").json() == []


SHARES_A_NAME = CALLS_THE_API + 'call("POST", "/names/results/writers", {"user": "alice"})\n'


def test_a_step_cannot_give_another_user_a_lasting_right_to_its_submitters_names(
    ctl: Controller,
    alice: httpx.Client,
    one_file: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """alice's function run by bob may move bob's names while the job runs;
    it may not make alice a writer of them, a right that outlives the job."""
    bob = ctl.user("bob")
    with _client(ctl, bob) as client:
        made = client.put("/api/v1/names/results", json={"pdh": one_file, "expect": None})
        assert made.status_code == 200, made.text
    monkeypatch.setenv("WH_URL", ctl.url)
    monkeypatch.setenv("WH_TOKEN", bob)
    monkeypatch.setenv("WH_HOME", str(tmp_path / "unused-home"))
    ran, log = _run_step(Runner(), tmp_path, "share.py", SHARES_A_NAME)
    assert ran["state"] == "complete", log
    assert "REFUSED 403 POST /names/results/writers a job's token cannot add writers" in log, log
    assert "DONE" not in log
    assert alice.get("/api/v1/names/results/writers").json() == []


def test_ids_beyond_the_catalogs_integers_name_nothing(
    catalog_url: str, keep_servers: KeepPool
) -> None:
    """An id no catalog row can have is 404, on PostgreSQL too (where it was a
    500 with a traceback in the log), and a negative list limit is no way
    around the bound."""
    big = 2**31
    with controller(catalog_url, keep_servers) as c, _client(c, c.user("alice")) as alice:
        for path in (
            f"/api/v1/workflows/{big}",
            f"/api/v1/regol/watches/{big}",
            f"/api/v1/regol/watches/{big}/runs",
        ):
            r = alice.get(path)
            assert r.status_code == 404, (path, r.text)
        r = alice.post(f"/api/v1/workflows/{big}/cancel")
        assert r.status_code == 404 and r.json()["error"] == f"no workflow run {big}", r.text
        r = alice.delete(f"/api/v1/regol/watches/{big}")
        assert r.status_code == 404 and r.json()["error"] == f"no watch {big}", r.text
        r = alice.get("/api/v1/workflows", params={"limit": -1})
        assert r.status_code == 200 and r.json() == [], r.text
        # A NUL where PostgreSQL can keep none: bad input, not a server error.
        for path in (
            "/api/v1/names?prefix=%00",
            "/api/v1/names/a%00b",
            "/api/v1/jobs?state=%00",
            "/api/v1/workflows?state=%00",
            "/api/v1/collections?created_by=%00",
        ):
            r = alice.get(path)
            assert r.status_code in (200, 400, 404), (path, r.text)
        r = alice.post("/api/v1/tokens", json={"label": "a\u0000b"})
        assert r.status_code in (200, 400), r.text


TWO_STEPS = r"""
import sys
from warehouse.jobs.executors import Launch, LocalExecutor
from warehouse.jobs.model import Resources

one = Resources(1, 1 << 30)
executor = LocalExecutor(capacity=one, fork_server=False)
steps = [
    "mkdir -p x/y && echo planted > x/y/f && chmod 000 x/y x . && echo left",
    "ls -A; echo listed",
]
for n, script in enumerate(steps):
    executor.start(Launch(n + 1, 0, 1, ("/bin/sh", "-c", script), {}, sys.argv[1], one))
    done = []
    while not done:
        done = executor.poll(1.0)
    print(done[0].log.decode(), end="")
executor.close()
"""


def test_a_step_cannot_leave_files_in_the_scratch_the_next_step_gets() -> None:
    """A work directory is reused by the next step, maybe another user's. A step
    running as the controller's own user (not root) can take away its own
    permission to a directory it made; the executor must still hand the next
    step an empty scratch, and carry on."""
    argv = [sys.executable, "-c", TWO_STEPS]
    with tempfile.TemporaryDirectory(prefix="wh-scratch-") as root:
        if os.geteuid() == 0:  # as an installation not run as root would be
            os.chmod(root, 0o777)
            argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv]
        done = subprocess.run(
            [*argv, root], capture_output=True, text=True, timeout=120, check=False
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["left", "listed"], done.stdout


def test_steps_running_as_the_controllers_user_must_not_see_its_files(tmp_path: Path) -> None:
    """Without a steps user of their own (a controller not run as root), steps
    run as the controller's user: only what the sandbox leaves unmounted keeps
    its files from them. A catalog or job directory under a path every step
    sees (/usr, /opt, the Python installation) is refused."""
    install = tmp_path / "install"
    (install / "home").mkdir(parents=True)
    box = Sandbox("/usr/bin/bwrap", None, None, (str(install),))
    with pytest.raises(UsageError, match="which every job step sees"):
        box.check_hidden({"the catalog": install / "home" / "controller.db"})
    box.check_hidden({"the catalog": tmp_path / "elsewhere" / "controller.db"})
    as_root = Sandbox("/usr/bin/bwrap", "/usr/bin/setpriv", StepsUser("s", 999, 999), ())
    as_root.check_hidden({"the catalog": install / "home" / "controller.db"})  # modes do

    if os.geteuid() != 0:
        return
    # A real `wh serve` as an unprivileged user, its home under /opt.
    top = tempfile.mkdtemp(prefix="wh-test-", dir="/opt")
    try:
        os.chown(top, 65534, 65534)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WH_", "XDG_"))}
        env |= {"WH_HOME": f"{top}/home", "HOME": top}
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", WH_BIN]
        done = subprocess.run(
            [*argv, "serve", "--listen", "127.0.0.1:0"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode != 0, done.stdout
        assert done.stderr.startswith(f"Error: the job directory {top}/home/"), done.stderr
        assert "lies under /opt" in done.stderr and "Traceback" not in done.stderr
    finally:
        subprocess.run(["rm", "-rf", "--", top], check=True)


# Open to anyone (docs/security.md): the health check, the API's description, metrics.
ANONYMOUS = {"/api/v1/health", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/metrics"}


def test_every_api_route_answers_401_without_a_valid_token(ctl: Controller) -> None:
    """No token, a wrong one, an expired one and a revoked one: 401 on every
    route of the API, whatever it is (new routes included), before anything
    else is looked at."""
    from warehouse.catalog.auth import revoke_secret
    from warehouse.server.controller import create_app

    ctl.user("carol")
    expired = catalog.create_token(ctl.state.engine, "carol", ttl=-1)
    revoked = catalog.create_token(ctl.state.engine, "carol")
    revoke_secret(ctl.state.engine, revoked)
    tries: dict[str, dict[str, str]] = {
        "none": {},
        "wrong": {"Authorization": "Bearer wh" + "x" * 40},
        "expired": {"Authorization": f"Bearer {expired}"},
        "revoked": {"Authorization": f"Bearer {revoked}"},
        "not bearer": {"Authorization": f"Basic {expired}"},
    }
    described = create_app(ctl.state.config, ctl.state).openapi()["paths"]
    routes = [(p, m.upper()) for p, ops in described.items() for m in ops if p not in ANONYMOUS]
    assert len(routes) > 40, routes
    checked = 0
    with httpx.Client(base_url=ctl.url, timeout=60) as client:
        for template, method in routes:
            path = re.sub(r"\{[^}]+\}", "1", template)
            for why, headers in tries.items():
                r = client.request(method, path, headers=headers, json={})
                assert r.status_code == 401, (method, template, why, r.text)
                checked += 1
    assert checked == 5 * len(routes)
