"""Driving runs on the embedded warehouse.

``drive_here`` drives a run in this process. If no job manager runs for the
executor, it runs one here too and drives the run from the manager's loop
(one thread, no polling between them: a job's readers are submitted in the
turn after it completes); otherwise it follows the catalog and keeps a
background manager alive. ``spawn_driver`` starts a detached ``wh workflow
drive RUN`` (``wh workflow run`` without ``--wait``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import ConflictError
from warehouse.jobs.jobstore import list_jobs
from warehouse.jobs.manager import Landed, Manager
from warehouse.jobs.runmanager import ensure_manager, run_manager
from warehouse.workflows import runstore
from warehouse.workflows.driver import Driver
from warehouse.workflows.runrecords import RunRecord

__all__ = ["Progress", "drive_here", "spawn_driver"]

Progress = Callable[[Driver], None]

# The driver follows the jobs the manager has finished (their rows written) at
# once, and turns when that may submit a job's readers (in the manager's next
# turn after it completes); otherwise at most this often, to follow cancels,
# jobs starting, and keep its heartbeat.
_QUIET_TURN = 0.2
_IDLE = 0.02  # seconds between two turns when the manager has nothing to run


def drive_here(
    wh: EmbeddedWarehouse,
    run_id: int,
    *,
    executor: str = "local",
    progress: Progress | None = None,
    poll: float = 0.05,
) -> RunRecord:
    """Drive the run until it finishes; ConflictError if a live driver holds it."""
    driver = Driver(wh, run_id, executor=executor, keep_new_jobs=True)
    if not driver.claim():
        run = runstore.get_run(wh.engine, run_id)
        raise ConflictError(f"workflow run {run_id} is driven by {run.driver}")
    last = 0.0
    landed: list[Landed] = []  # jobs the manager has finished, for the driver to follow

    def stop(m: Manager) -> bool:
        nonlocal last
        now = time.monotonic()
        if landed:
            # Jobs finished: followed from what the manager wrote, without reading
            # the catalog; a full turn only if that may submit, skip or end something.
            due = driver.follow(landed)
            landed.clear()
            if progress is not None and driver.last_changes:
                progress(driver)
            if not due and now - last < _QUIET_TURN:
                return False
        elif now - last < _QUIET_TURN:
            idle = m.sched.idle() and not m.executor.running() and not m.landing()
            if not idle:
                return False  # the manager waits on its steps (woken by their exits)
            time.sleep(max(0.0, min(_IDLE, last + _IDLE - now)))
        last = time.monotonic()
        done = driver.turn()
        if progress is not None:
            progress(driver)
        if driver.new_jobs:
            # Taken up now, not at the manager's next refresh.
            m.take_up(driver.new_jobs)
            driver.new_jobs.clear()
        return done

    if not run_manager(wh, executor, stop=stop, on_landed=landed.extend):
        # Another process runs the manager; it exits when idle, so keep one alive.
        driver.keep_new_jobs = False  # that manager finds them in the catalog
        while not driver.turn():
            if progress is not None:
                progress(driver)
            if driver.active_jobs():
                ensure_manager(wh.home, executor)
            time.sleep(poll)
        if progress is not None:
            progress(driver)
    if any(j.executor == executor for j in list_jobs(wh.engine, ("queued", "running"))):
        ensure_manager(wh.home, executor)  # other work is left for a manager
    return runstore.get_run(wh.engine, run_id)


def spawn_driver(home: Path, run_id: int, executor: str = "local") -> subprocess.Popen[bytes]:
    """A detached ``wh workflow drive RUN``; its output goes to a log file."""
    log_path = home / "jobs" / "workflows.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    wh = Path(sys.executable).with_name("wh")
    argv = [str(wh)] if wh.exists() else [sys.executable, "-m", "warehouse.cli"]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [*argv, "workflow", "drive", str(run_id), "--executor", executor],
            env={**os.environ, "WH_HOME": str(home)},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    threading.Thread(target=proc.wait, daemon=True).start()  # reap it if we outlive it
    return proc
