"""The Dask executor given a wrong scheduler address: refused soon, in one line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import Runner
from jobs_helpers import dask_cluster  # noqa: F401  (a fixture)
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import UsageError, WarehouseError
from warehouse.jobs.daskexec import CONNECT_SECONDS, check_scheduler


@pytest.fixture
def http_port() -> Iterator[int]:
    """A real HTTP server: it accepts Dask's connection and never answers in its protocol."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never reads them."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(4)
        yield s.getsockname()[1]


@pytest.mark.parametrize("address", ["nonsense://x", "tcp://[::", "host:port", "tcp://"])
def test_a_malformed_address_is_a_usage_error(address: str) -> None:
    with pytest.raises(UsageError, match="bad Dask scheduler address"):
        check_scheduler(address, timeout=1)


def test_a_port_that_does_not_speak_dask_is_refused_not_waited_on(
    http_port: int, silent_port: int
) -> None:
    for port in (http_port, silent_port):
        with pytest.raises(WarehouseError, match="no Dask scheduler answers"):
            check_scheduler(f"tcp://127.0.0.1:{port}", timeout=1)


def test_a_worker_address_is_not_a_scheduler(dask_cluster: str) -> None:  # noqa: F811
    from distributed import Client

    check_scheduler(dask_cluster)  # the scheduler itself passes
    with Client(dask_cluster, set_as_default=False) as c:
        worker = next(iter(c.scheduler_info()["workers"]))
    with pytest.raises(WarehouseError, match=r"not a Dask scheduler .*Worker"):
        check_scheduler(worker, timeout=5)


def test_submit_with_a_bad_scheduler_says_so_in_one_line(
    wh: EmbeddedWarehouse, run: Runner, tmp_path: Path
) -> None:
    (tmp_path / "f.txt").write_text("some words\n")
    key = wh.put([tmp_path / "f.txt"]).pdh
    args = ["job", "submit", "builtin:wordcount", "--input", key, "--no-reuse", "--wait"]
    result = run(*args, "--executor", "dask", "--dask-scheduler", "nonsense://x", code=2)
    assert result.stderr.startswith("Error: bad Dask scheduler address"), result.stderr
    assert "Traceback" not in result.output + result.stderr


# The first step to run kills the scheduler (its pid in SCHEDULER_PID), then waits
# as long as its worker lives.
KILL_SCHEDULER = """import os, signal, time
from warehouse import step

if step.number() == 0:
    step.queue(1, "a", "b")
else:
    os.kill(int(os.environ["SCHEDULER_PID"]), signal.SIGKILL)
    worker = os.getppid()
    while os.getppid() == worker:  # until the test stops the worker: nothing left behind
        time.sleep(0.1)
"""


def _scheduler_and_worker(bin_dir: Path, port: int) -> list[subprocess.Popen[bytes]]:
    """A real scheduler on 127.0.0.1:``port`` and a worker of one thread,
    each its own process (the worker told the scheduler's pid)."""
    quiet = subprocess.DEVNULL
    scheduler = [bin_dir / "dask", "scheduler", "--host", "127.0.0.1", "--port", str(port)]
    started = subprocess.Popen(
        [*scheduler, "--dashboard-address", "127.0.0.1:0"], stdout=quiet, stderr=quiet
    )
    env = {**os.environ, "SCHEDULER_PID": str(started.pid)}
    worker = [bin_dir / "dask", "worker", f"tcp://127.0.0.1:{port}", "--nthreads", "1"]
    return [
        started,
        subprocess.Popen([*worker, "--no-nanny"], env=env, stdout=quiet, stderr=quiet),
    ]


@pytest.fixture
def lone_scheduler(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A real scheduler and worker, each its own process, the worker told the scheduler's pid."""
    import sys

    bin_dir = Path(sys.executable).parent
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    scheduler, worker = _scheduler_and_worker(bin_dir, port)
    try:
        from distributed import Client

        with Client(address, set_as_default=False, timeout=30) as c:
            c.wait_for_workers(1, timeout=30)
        yield address, scheduler.pid
    finally:
        for p in (worker, scheduler):
            p.kill()
            p.wait()


def test_a_scheduler_lost_mid_job_stops_the_manager_with_an_error(
    wh: EmbeddedWarehouse, tmp_path: Path, lone_scheduler: tuple[str, int]
) -> None:
    from jobs_helpers import put_function, run_job

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x").write_text("x")
    key = wh.put([tmp_path / "in"]).pdh
    fn = put_function(wh, tmp_path, "kill.py", KILL_SCHEDULER)
    with pytest.raises(WarehouseError, match="lost the Dask scheduler"):
        run_job(wh, fn, key, executor=f"dask:{lone_scheduler[0]}", reuse=False)


def test_a_job_whose_scheduler_does_not_answer_ends_failed_with_the_reason(
    wh: EmbeddedWarehouse, tmp_path: Path, silent_port: int
) -> None:
    # Recorded queued before its manager found no scheduler there, it stayed
    # queued for ever; now it fails with the reason, waited on (--wait) or
    # left to a background manager (followed with `wh job watch`).
    from conftest import wh_process

    (tmp_path / "f.txt").write_text("some words\n")
    key = wh.put([tmp_path / "f.txt"]).pdh
    address = f"tcp://127.0.0.1:{silent_port}"
    submit = ["job", "submit", "builtin:wordcount", "--input", key, "--no-reuse"]
    dask = ["--executor", "dask", "--dask-scheduler", address]
    # Asked once: the wait for a late scheduler has its own test, below.
    once = {"WH_DASK_WAIT": "0"}
    waited = wh_process(*submit, *dask, "--wait", home=wh.home, env=once)
    assert waited.returncode == 1, waited.stderr
    why = f"executor dask:{address}: no Dask scheduler answers at {address} within 10 s"
    assert waited.stderr.splitlines() == [f"Error: job 1 failed: {why} (no answer)"]
    left = wh_process(*submit, *dask, home=wh.home, env=once)
    assert (left.returncode, left.stdout) == (0, "job 2: queued\n"), left.stderr
    watched = wh_process("job", "watch", "2", home=wh.home, env=once, timeout=300)  # not for ever
    assert watched.returncode == 1, watched.stderr
    assert watched.stderr.splitlines() == [f"Error: job 2 failed: {why} (no answer)"]
    shown = json.loads(wh_process("job", "show", "2", "--json", home=wh.home).stdout)
    assert (shown["state"], shown["steps_queued"], shown["steps_running"]) == ("failed", 0, 0)


@pytest.mark.timeout(300)
def test_a_scheduler_that_answers_late_is_waited_for(wh: EmbeddedWarehouse, tmp_path: Path) -> None:
    """A manager starting while its Dask scheduler is not up yet asks again
    (for ``dask_wait`` seconds) instead of failing every job queued for that
    address: the job runs once a real scheduler and worker come up there."""
    import sys
    import time

    from conftest import WH_BIN
    from warehouse import jobs
    from warehouse.errors import NotFoundError

    (tmp_path / "f.txt").write_text("some words\n")
    key = wh.put([tmp_path / "f.txt"]).pdh
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    submit = [WH_BIN, "job", "submit", "builtin:wordcount", "--input", key, "--no-reuse"]
    env = {**os.environ, "WH_HOME": str(wh.home), "WH_DASK_WAIT": "240"}
    waiting = subprocess.Popen(
        [*submit, "--executor", "dask", "--dask-scheduler", address, "--wait"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    bin_dir = Path(sys.executable).parent
    started: list[subprocess.Popen[bytes]] = []
    try:
        while True:  # the job is recorded, and its manager starts
            try:
                jobs.get_job(wh.engine, 1)
                break
            except NotFoundError:
                assert waiting.poll() is None, waiting.communicate()
                time.sleep(0.05)
        # Its first try (which waits CONNECT_SECONDS for a connection) finds
        # nothing listening there; that alone once failed the job.
        time.sleep(CONNECT_SECONDS + 2)
        assert waiting.poll() is None, waiting.communicate()  # it still waits
        started += _scheduler_and_worker(bin_dir, port)
        _, err = waiting.communicate(timeout=280)
        assert waiting.returncode == 0, err
        assert jobs.get_job(wh.engine, 1).state == "complete"
    finally:
        waiting.kill()
        waiting.communicate()
        for p in reversed(started):
            p.kill()
            p.wait()


@pytest.mark.timeout(300)
def test_a_controller_waits_for_a_scheduler_that_answers_late(
    tmp_path: Path, run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's own manager follows the same rule: started while its
    Dask scheduler is not up yet, it asks again (for ``dask_wait`` seconds)
    and runs jobs once a real scheduler and worker come up there."""
    import sys
    import time

    from cluster import controller, keep_pool

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    monkeypatch.setenv("WH_DASK_WAIT", "240")
    bin_dir = Path(sys.executable).parent
    started: list[subprocess.Popen[bytes]] = []
    failed: list[BaseException] = []
    with keep_pool(tmp_path / "keep", 1) as pool, controller(tmp_path / "c.db", pool, 1) as c:

        def start() -> None:
            try:
                c.state.start_jobs(c.url, tmp_path / "jobs", f"dask:{address}")
            except BaseException as e:
                failed.append(e)

        starting = threading.Thread(target=start)
        starting.start()
        try:
            # Its first try (which waits CONNECT_SECONDS for a connection) finds
            # nothing listening there; that alone once ended the job manager.
            time.sleep(CONNECT_SECONDS + 2)
            assert starting.is_alive() and not failed, failed  # it still waits
            started += _scheduler_and_worker(bin_dir, port)
            starting.join(280)  # a guard against a hang, not a bound
            assert not starting.is_alive() and not failed, failed
            (tmp_path / "f.txt").write_text("some words\n")
            monkeypatch.setenv("WH_URL", c.url)
            monkeypatch.setenv("WH_TOKEN", c.user("alice"))
            monkeypatch.setenv("WH_REPLICATION", "1")
            pdh = run("put", str(tmp_path / "f.txt")).output.strip().splitlines()[-1]
            out = run("job", "submit", "builtin:wordcount", "--input", pdh, "--wait").output
            assert ": complete: " in out, out
        finally:
            starting.join(280)
            c.state.stop_jobs()
            for p in reversed(started):
                p.kill()
                p.wait()
