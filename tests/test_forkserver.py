"""The local executor's fork server: a forked Python step is the process a fresh
``python -P FILE`` would be (environment, working directory, argv, standard
streams, exit status), is killed with its children, and shares no state with
other steps. Each probe runs both ways, fork-served and started plainly, and
what it sees must agree."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from jobs_helpers import make_text, put_function
from warehouse import jobs
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs import forkserver
from warehouse.jobs.executors import Finished, Launch, LocalExecutor
from warehouse.jobs.jobstore import request_control
from warehouse.jobs.model import Resources
from warehouse.jobs.protocol import process_environment
from warehouse.jobs.runmanager import make_executor

PROBE = r"""
import json, os, signal, sys, tempfile, threading
import warehouse.step

print("to stdout", flush=True)
print("to stderr", file=sys.stderr, flush=True)
seen = {
    "env": dict(os.environ),
    "cwd": os.getcwd(),
    "argv": sys.argv,
    "path": sys.path,
    "safe_path": sys.flags.safe_path,
    "name": __name__,
    "file": __file__,
    "main_is_me": sys.modules["__main__"].__dict__ is globals(),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "stdin": os.readlink("/proc/self/fd/0"),
    "stdout": os.readlink("/proc/self/fd/1"),
    "stderr": os.readlink("/proc/self/fd/2"),
    "session_leader": os.getsid(0) == os.getpid(),
    "group_leader": os.getpgid(0) == os.getpid(),
    "tempdir": tempfile.gettempdir(),
    "sigint": str(signal.getsignal(signal.SIGINT)),
    "sigpipe": str(signal.getsignal(signal.SIGPIPE)),
    "sigterm": str(signal.getsignal(signal.SIGTERM)),
    "sigchld": str(signal.getsignal(signal.SIGCHLD)),
    "threads": threading.active_count(),
    "leak": getattr(warehouse.step, "_leak", None),
    "ppid": os.getppid(),
    "annotations_future": "annotations" in globals(),
}
warehouse.step._leak = 1  # must not reach the next step
print(json.dumps(seen), flush=True)
"""

ENDINGS = r"""
import atexit, os, signal, sys, threading, time
how = os.environ["WH_STEP_INPUT"]
atexit.register(print, "exit handler ran")
def later():
    time.sleep(0.2)
    print("thread finished")
threading.Thread(target=later).start()  # joined before the process exits
unflushed = open(os.environ["WH_SCRATCH"] + "/../unflushed", "w")
unflushed.write("written at exit\n")  # flushed when the interpreter finishes
sys.stdout.write("buffered, not flushed\n")
def fail():
    raise ValueError("bad input " + how)
if how == "ok":
    pass
elif how == "exit3":
    sys.exit(3)
elif how == "message":
    sys.exit("a message to stderr")
elif how == "raise":
    fail()
elif how == "os_exit":
    os._exit(5)
elif how == "signal":
    os.kill(os.getpid(), signal.SIGTERM)
elif how == "interrupt":
    raise KeyboardInterrupt
"""

SPAWNS = r"""
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "120"])
with open(os.environ["WH_STEP_INPUT"], "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
time.sleep(120)
"""


def _script(tmp: Path, name: str, text: str) -> str:
    path = tmp / "fn" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return str(path)


def _launch(tmp: Path, entry: str, step: int = 0, step_input: str = "", **env: str) -> Launch:
    step_env = {
        "WH_HOME": str(tmp / "home"),
        "WH_JOB": "1",
        "WH_STEP": str(step),
        "WH_ATTEMPT": "1",
        "WH_LEVEL": "0",
        "WH_STEP_INPUT": step_input,
        "WH_JOB_INPUT": "",
        "WH_PARAMS": "{}",
        "WH_FUNCTION_DIR": str(Path(entry).parent),
        **env,
    }
    return Launch(
        1, step, 1, (sys.executable, "-P", entry), step_env, str(tmp / "scratch"), Resources(1, 0)
    )


def _served() -> LocalExecutor:
    """A local executor whose fork server has its modules imported (until then
    steps start the plain way)."""
    forkserver.warm()
    executor = LocalExecutor()
    deadline = time.monotonic() + 120
    while not forkserver.ready():
        assert time.monotonic() < deadline, "the fork server did not get ready"
        time.sleep(0.02)
    return executor


def _run(executor: LocalExecutor, launch: Launch) -> Finished:
    executor.start(launch)
    while True:
        for done in executor.poll(1.0):
            return done


def _both(tmp: Path, launch: Launch) -> tuple[Finished, Finished]:
    """The launch fork-served, then started plainly."""
    served, plain = _served(), LocalExecutor(fork_server=False)
    try:
        return _run(served, launch), _run(plain, launch)
    finally:
        served.close()
        plain.close()


def _probe(done: Finished) -> dict[str, Any]:
    lines = done.log.decode().splitlines()
    assert lines[:2] == ["to stdout", "to stderr"]
    seen: dict[str, Any] = json.loads(lines[2])
    return seen


def _workdir(seen: dict[str, Any]) -> str:
    return str(Path(seen["cwd"]).parent)


def _normal(seen: dict[str, Any]) -> dict[str, Any]:
    """What a step sees, its work directory's name and its parent taken out."""
    work = _workdir(seen)
    text = json.dumps({k: v for k, v in seen.items() if k != "ppid"}).replace(work, "WORK")
    normal: dict[str, Any] = json.loads(text)
    return normal


def test_a_forked_step_sees_what_a_fresh_process_sees(tmp_path: Path) -> None:
    launch = _launch(tmp_path, _script(tmp_path, "probe.py", PROBE))
    served_done, plain_done = _both(tmp_path, launch)
    assert served_done.exit_status == plain_done.exit_status == 0
    served, plain = _probe(served_done), _probe(plain_done)
    assert served["ppid"] != os.getpid(), "not forked by the fork server"
    assert plain["ppid"] == os.getpid()
    assert _normal(served) == _normal(plain)
    # And exactly what the protocol says, not merely the same wrong thing twice.
    work = _workdir(served)
    expected_env = {
        **process_environment(launch.env),
        "WH_SCRATCH": work + "/tmp",
        "TMPDIR": work + "/tmp",
        "WH_RESULT": work + "/result",
    }
    assert served["env"] == expected_env
    assert served["cwd"] == served["tempdir"] == work + "/tmp"
    assert served["argv"] == [launch.argv[2]] and served["file"] == launch.argv[2]
    assert served["name"] == "__main__" and served["main_is_me"]
    assert served["safe_path"] and str(Path(launch.argv[2]).parent) not in served["path"]
    assert not served["annotations_future"]  # the server's own __future__ imports stay there
    assert served["stdin"] == os.devnull
    assert served["stdout"] == served["stderr"] == work + "/log"
    assert served["fds"] == [0, 1, 2, 3]  # 3: the listing's own
    assert served["session_leader"] and served["group_leader"]
    assert served["threads"] == 1


def test_no_state_passes_from_one_forked_step_to_the_next(tmp_path: Path) -> None:
    entry = _script(tmp_path, "probe.py", PROBE)
    executor = _served()
    try:
        first = _probe(_run(executor, _launch(tmp_path, entry, 0)))
        second = _probe(_run(executor, _launch(tmp_path, entry, 1)))
    finally:
        executor.close()
    assert first["ppid"] == second["ppid"] != os.getpid()
    assert first["leak"] is None and second["leak"] is None
    assert second["env"]["WH_STEP"] == "1"


@pytest.mark.parametrize(
    ("how", "status"),
    [
        ("ok", 0),
        ("exit3", 3),
        ("message", 1),
        ("raise", 1),
        ("os_exit", 5),
        ("signal", -15),
        ("interrupt", -2),  # killed by SIGINT once it has ended as usual
    ],
)
def test_a_forked_step_ends_as_a_fresh_process_would(tmp_path: Path, how: str, status: int) -> None:
    launch = _launch(tmp_path, _script(tmp_path, "endings.py", ENDINGS), step_input=how)
    served, plain = _both(tmp_path, launch)
    assert served.exit_status == plain.exit_status == status
    assert served.log == plain.log  # the same lines, tracebacks included
    if how in ("ok", "exit3", "message", "raise", "interrupt"):
        assert b"exit handler ran" in served.log and b"thread finished" in served.log
        assert b"buffered, not flushed" in served.log
    if how == "raise":
        assert b'endings.py", line ' in served.log and b"ValueError: bad input" in served.log
        assert b"forkserver" not in served.log  # the traceback starts at the file
    if how == "message":
        assert b"a message to stderr\n" in served.log


@pytest.mark.parametrize(
    ("text", "status"), [("x = (\n", 1), (None, 2)], ids=["syntax-error", "no-file"]
)
def test_a_file_that_does_not_run_fails_as_in_a_fresh_process(
    tmp_path: Path, text: str | None, status: int
) -> None:
    entry = _script(tmp_path, "bad.py", text or "")
    if text is None:
        os.unlink(entry)
    served, plain = _both(tmp_path, _launch(tmp_path, entry))
    assert served.exit_status == plain.exit_status == status
    assert served.log == plain.log and served.log


def test_a_killed_forked_step_dies_with_its_children(tmp_path: Path) -> None:
    pids_file = tmp_path / "pids"
    launch = _launch(tmp_path, _script(tmp_path, "spawns.py", SPAWNS), step_input=str(pids_file))
    executor = _served()
    try:
        executor.start(launch)
        deadline = time.monotonic() + 60
        while not (pids_file.exists() and " " in pids_file.read_text()):
            assert time.monotonic() < deadline, "the step did not start"
            assert not executor.poll(0.05), "the step ended early"
        step_pid, child_pid = map(int, pids_file.read_text().split())
        assert os.getpgid(child_pid) == step_pid  # its child is in its process group
        executor.kill(1, 0)
        done: list[Finished] = []
        while not done:
            done = executor.poll(1.0)
    finally:
        executor.close()
    assert done[0].exit_status == -signal.SIGKILL
    deadline = time.monotonic() + 30
    while _alive(child_pid):
        assert time.monotonic() < deadline, "the step's child still runs"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie is dead, only not reaped
    except FileNotFoundError:
        return False


def test_a_step_with_another_start_up_environment_starts_the_plain_way(tmp_path: Path) -> None:
    launch = _launch(tmp_path, _script(tmp_path, "probe.py", PROBE), PYTHONHASHSEED="7")
    executor = _served()
    try:
        seen = _probe(_run(executor, launch))
    finally:
        executor.close()
    assert seen["ppid"] == os.getpid()  # a subprocess of ours, as Python reads that at start
    assert seen["env"]["PYTHONHASHSEED"] == "7"


def test_steps_of_a_fork_server_that_died_fail_and_the_next_start_plainly(
    tmp_path: Path,
) -> None:
    pids_file = tmp_path / "pids"
    entry = _script(tmp_path, "spawns.py", SPAWNS)
    executor = _served()
    try:
        executor.start(_launch(tmp_path, entry, step_input=str(pids_file)))
        deadline = time.monotonic() + 60
        while not (pids_file.exists() and " " in pids_file.read_text()):
            assert time.monotonic() < deadline, "the step did not start"
            assert not executor.poll(0.05), "the step ended early"
        step_pid, child_pid = map(int, pids_file.read_text().split())
        server = forkserver._server[0].proc
        server.kill()
        server.wait()
        done: list[Finished] = []
        while not done:
            done = executor.poll(1.0)
        assert done[0].exit_status == -signal.SIGKILL
        assert b"the fork server exited" in done[0].log
        seen = _probe(_run(executor, _launch(tmp_path, _script(tmp_path, "p.py", PROBE), 1)))
        assert seen["ppid"] == os.getpid()
    finally:
        executor.close()
    deadline = time.monotonic() + 30
    while _alive(step_pid) or _alive(child_pid):
        assert time.monotonic() < deadline, "the step or its child still runs"
        time.sleep(0.05)
    # A new executor starts a new server.
    again = _served()
    try:
        seen = _probe(_run(again, _launch(tmp_path, entry.replace("spawns", "p"), 2)))
    finally:
        again.close()
    assert seen["ppid"] != os.getpid()


PY_SLEEPERS = r"""
import os, subprocess, time
from pathlib import Path
from warehouse import step
if step.level() == 0:
    step.queue(1, "a", "b")
    raise SystemExit(0)
child = subprocess.Popen(["sleep", "120"])
pids = Path(os.environ["WH_HOME"]).parent / "pids"
(pids / f"{step.number()}.tmp").write_text(f"{os.getpid()} {os.getppid()} {child.pid}")
(pids / f"{step.number()}.tmp").rename(pids / str(step.number()))
time.sleep(120)
"""


def test_cancelling_a_job_kills_its_forked_steps_and_their_children(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    pids = wh.home.parent / "pids"
    pids.mkdir()
    fn = put_function(wh, tmp_path, "sleepers.py", PY_SLEEPERS)
    _served().close()  # the server ready: the steps are forked
    record = jobs.submit(wh, jobs.JobRequest(fn, wh.put([make_text(tmp_path / "in")]).pdh, {}))
    manager = threading.Thread(
        target=jobs.run_manager, args=(wh, "local"), kwargs={"until_job": record.id}
    )
    manager.start()
    try:
        deadline = time.monotonic() + 60
        while len([p for p in pids.iterdir() if p.suffix != ".tmp"]) < 2:
            assert time.monotonic() < deadline, "the steps did not start"
            time.sleep(0.05)
        request_control(wh.engine, record.id, "cancel")
        manager.join(60)
        assert not manager.is_alive(), "the manager did not finish the cancelled job"
    finally:
        if manager.is_alive():
            request_control(wh.engine, record.id, "cancel")
            manager.join(150)
    assert jobs.get_job(wh.engine, record.id).state == "cancelled"
    for marker in [p for p in pids.iterdir() if p.suffix != ".tmp"]:
        step_pid, parent, child_pid = map(int, marker.read_text().split())
        assert parent != os.getpid(), "not forked by the fork server"
        deadline = time.monotonic() + 30
        while _alive(step_pid) or _alive(child_pid):
            assert time.monotonic() < deadline, f"step {marker.name} or its child still runs"
            time.sleep(0.05)


def test_the_server_starts_after_a_first_step_and_serves_the_next(tmp_path: Path) -> None:
    """A process that runs one Python step never pays for a second interpreter:
    the server starts once a step started the plain way has ended."""
    forkserver._stop_server()  # as in a fresh process
    entry = _script(tmp_path, "probe.py", PROBE)
    executor = LocalExecutor()
    try:
        assert not forkserver._server, "started before any step"
        first = _probe(_run(executor, _launch(tmp_path, entry, 0)))
        assert first["ppid"] == os.getpid()
        assert forkserver._server, "not started after the first step"
        deadline = time.monotonic() + 120
        while not forkserver.ready():
            assert time.monotonic() < deadline, "the fork server did not get ready"
            time.sleep(0.02)
        second = _probe(_run(executor, _launch(tmp_path, entry, 0)))
    finally:
        executor.close()
    assert second["ppid"] != os.getpid()
    assert _normal(first) == _normal(second)


@pytest.mark.parametrize("value", ["false", "0", "off"])
def test_the_fork_server_setting_false_starts_every_step_plainly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """WH_FORK_SERVER=false (docs/cli.md): the local executor forks nothing,
    even with a ready server in the process (started with that environment,
    so that only the setting stops the forking)."""
    entry = _script(tmp_path, "probe.py", PROBE)
    monkeypatch.setenv("WH_FORK_SERVER", value)
    _served().close()
    executor = make_executor("local")
    assert isinstance(executor, LocalExecutor)
    try:
        seen = [_probe(_run(executor, _launch(tmp_path, entry, n))) for n in range(2)]
    finally:
        executor.close()
    assert [s["ppid"] for s in seen] == [os.getpid()] * 2
    monkeypatch.setenv("WH_FORK_SERVER", "true")
    _served().close()  # a server of this environment (the setting is part of it)
    executor = make_executor("local")
    assert isinstance(executor, LocalExecutor)
    try:
        forked = _probe(_run(executor, _launch(tmp_path, entry, 0)))
    finally:
        executor.close()
    assert forked["ppid"] != os.getpid()
