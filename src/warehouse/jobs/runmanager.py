"""Running the embedded manager: one per executor, guarded by a lock file.

``$WH_HOME/jobs/manager-<executor>.lock`` is held (``flock``) by the process
running the manager for that executor, so at most one runs; the lock goes
away with the process, however it dies. ``wh job submit --wait`` runs the
manager in-process if none runs; otherwise (and without ``--wait``) a
background ``wh job manager`` is started, which exits when no job is left.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import sqlalchemy as sa

from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import UsageError, WarehouseError
from warehouse.jobs.executors import Executor, LocalExecutor, local_capacity
from warehouse.jobs.jobstore import fail_waiting, get_job
from warehouse.jobs.manager import Landed, Manager
from warehouse.jobs.model import FINISHED
from warehouse.jobs.sandbox import Sandbox
from warehouse.limits import Limiter, Policy

__all__ = [
    "DASK_WAIT",
    "ManagerLock",
    "dask_wait",
    "ensure_manager",
    "make_executor",
    "make_waiting",
    "run_manager",
    "spawn_manager",
]


log = logging.getLogger("warehouse.jobs")

# Seconds a manager asks again for a Dask scheduler that does not answer
# ($WH_DASK_WAIT): one restarting, or a moment unreachable, is waited for.
DASK_WAIT = 30.0
_DASK_RETRY = 3.0  # seconds between tries


def dask_wait() -> float:
    """The setting ``dask_wait`` ($WH_DASK_WAIT, checked by ``settings``)."""
    try:
        value = float(os.environ.get("WH_DASK_WAIT") or DASK_WAIT)
    except ValueError:
        return DASK_WAIT
    return value if 0 <= value <= 3600 else DASK_WAIT


class ManagerLock:
    def __init__(self, home: Path, executor: str) -> None:
        tag = executor if executor.isalnum() else hashlib.md5(executor.encode()).hexdigest()[:12]
        self.path = home / "jobs" / f"manager-{tag}.lock"
        self._file: IO[bytes] | None = None

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "ab")  # noqa: SIM115 - held until release()
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            return False
        self._file = f
        return True

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def held_elsewhere(self) -> bool:
        if self._file is not None:
            return False
        if self.acquire():
            self.release()
            return False
        return True


def make_executor(
    name: str,
    *,
    cpus: int | None = None,
    memory: int | None = None,
    sandbox: Sandbox | None = None,
    owner: str = "",
    worker_hosts: dict[str, str] | None = None,
    policy: Policy | None = None,
) -> Executor:
    """``local``, ``dask`` (a LocalCluster), ``dask:ADDRESS`` (a running scheduler),
    ``slurm`` or ``slurm:PARTITION``; ``sandbox``: where local and Slurm
    steps run (docs/security.md); ``owner``: the installation's work directory (Slurm
    jobs are tagged with it)."""
    if name == "local":
        from warehouse.settings import is_off

        fork = not is_off("fork_server")
        capacity = local_capacity(cpus, memory)
        limiter = None
        if sandbox is not None:  # a shared installation: each step held to its limits
            own_user = sandbox.user is not None
            limiter = Limiter(capacity.cpus, capacity.memory, policy, own_user=own_user)
        return LocalExecutor(capacity, sandbox, fork_server=fork, limiter=limiter)
    if name == "dask" or name.startswith("dask:"):
        from warehouse.jobs.daskexec import DaskExecutor

        return DaskExecutor(name.partition(":")[2] or None, workers=cpus, worker_hosts=worker_hosts)
    if name == "slurm" or name.startswith("slurm:"):
        from warehouse.jobs.slurmexec import SlurmExecutor

        # A shared installation's steps: Slurm's own limits (--mem, --time).
        wall = (policy or Policy()).wall if sandbox is not None else 0.0
        return SlurmExecutor(
            name.partition(":")[2] or None,
            owner=owner,
            sandbox=sandbox,
            worker_hosts=worker_hosts,
            wall=wall,
        )
    raise UsageError(
        f"unknown executor {name!r} (local, dask, dask:ADDRESS, slurm or slurm:PARTITION)"
    )


def make_waiting(
    engine: sa.Engine,
    name: str,
    *,
    cpus: int | None = None,
    owner: str = "",
    sandbox: Sandbox | None = None,
    worker_hosts: dict[str, str] | None = None,
    policy: Policy | None = None,
) -> Executor:
    """``make_executor``, by the rule every job manager follows: a Dask
    scheduler named by address that does not answer is asked again every few
    seconds for ``dask_wait()`` seconds (it may be starting, or a moment
    unreachable) before the last failure is raised; then every active job of
    that executor is failed with the reason (never queued for ever). A bad
    name or address is raised at once, failing them too."""
    deadline = time.monotonic() + (dask_wait() if name.startswith("dask:") else 0.0)
    while True:
        try:
            return make_executor(
                name,
                cpus=cpus,
                owner=owner,
                sandbox=sandbox,
                worker_hosts=worker_hosts,
                policy=policy,
            )
        except UsageError as e:
            failure: WarehouseError = e
        except WarehouseError as e:
            left = deadline - time.monotonic()
            if left > 0:
                # A warning: on a terminal (no logging set up) it says why nothing happens yet.
                log.warning(
                    "executor %s: %s; asking again for up to %.0f s (dask_wait)", name, e, left
                )
                time.sleep(min(_DASK_RETRY, left))
                continue
            failure = e
        fail_waiting(engine, name, f"executor {name}: {failure}")
        raise failure


def run_manager(
    wh: EmbeddedWarehouse,
    executor_name: str,
    *,
    until_job: int | None = None,
    cpus: int | None = None,
    stop: Callable[[Manager], bool] | None = None,
    on_landed: Callable[[list[Landed]], None] | None = None,
) -> bool:
    """Run the manager here if no other process does; False if one already does.
    If the executor cannot be made (a Dask scheduler that has not answered
    for ``dask_wait()`` seconds), every active job of it is failed with the
    reason, and the error raised.

    ``on_landed``: called with the jobs whose finished rows were just written."""
    lock = ManagerLock(wh.home, executor_name)
    if not lock.acquire():
        return False
    try:
        executor = make_waiting(wh.engine, executor_name, cpus=cpus, owner=str(wh.home.resolve()))
        manager = Manager(wh, executor, executor_name)
        manager.on_landed = on_landed
        if until_job is not None:

            def stop(m: Manager) -> bool:
                if until_job in m.sched.jobs:
                    return False
                return get_job(wh.engine, until_job).state in FINISHED

        try:
            manager.run(stop)
        finally:
            manager.close()
            executor.close()
    finally:
        lock.release()
    return True


def spawn_manager(home: Path, executor_name: str) -> subprocess.Popen[bytes]:
    """A background ``wh job manager`` (detached; its output goes to a log file)."""
    log_path = home / "jobs" / "manager.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    wh = Path(sys.executable).with_name("wh")
    argv = [str(wh)] if wh.exists() else [sys.executable, "-m", "warehouse.cli"]
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [*argv, "job", "manager", "--executor", executor_name],
            env={**os.environ, "WH_HOME": str(home)},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def ensure_manager(home: Path, executor_name: str) -> bool:
    """Start a background manager unless one runs; True if one was started."""
    if ManagerLock(home, executor_name).held_elsewhere():
        return False
    proc = spawn_manager(home, executor_name)
    # Reap it when it ends (it outlives us otherwise, in its own session).
    threading.Thread(target=proc.wait, daemon=True).start()
    return True
