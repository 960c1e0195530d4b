"""Workflows on a controller: one background thread drives every run.

Each pass it takes up runs that have no live driver (new ones, and those of
a controller that was killed: their heartbeat goes stale, or their process
is gone), and turns each run it holds. Runs act for their owner: jobs are
submitted, and outputs named, as the user who started the run. A CWL run is
driven by its own runner, elsewhere: once its heartbeat is stale the thread
ends it (``cwlruns.end_lost``), its jobs cancelled.

A pass runs when woken (a run started or cancelled, a job of this
controller's manager finished: ``wake``) and otherwise every ``interval``
seconds while it holds runs (jobs starting, jobs finished elsewhere, the
heartbeat), every half second while it holds none. After a pass that changed
a run it rings ``changed``, which requests following a run wait on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

import sqlalchemy as sa

from warehouse.blocks.store import BlockStore
from warehouse.errors import WarehouseError
from warehouse.gitcmd import DEFAULT_ALLOW
from warehouse.jobs.controllerhost import CatalogWarehouse
from warehouse.workflows import cwlruns, runstore
from warehouse.workflows.driver import Driver, driver_id
from warehouse.workflows.runbell import RunBell
from warehouse.workflows.runrecords import CWL_DRIVER, RUN_ACTIVE

__all__ = ["WorkflowThread"]

log = logging.getLogger("warehouse.workflows")

_LOST_EVERY = 1.0  # seconds between two looks for CWL runs whose runner fell silent


class WorkflowThread:
    def __init__(
        self,
        engine: sa.Engine,
        keep: Callable[[], BlockStore],
        executor: str,
        *,
        interval: float = 0.25,
        git_roots: Sequence[str] = (),
        git_allow: Sequence[str] = DEFAULT_ALLOW,
        on_submitted: Callable[[], None] | None = None,
    ) -> None:
        self.engine = engine
        # Called after a pass that submitted jobs (the job manager looks for them then).
        self.on_submitted = on_submitted
        self.keep = keep
        self.executor = executor
        self.interval = interval
        self.git_roots = tuple(git_roots)
        self.git_allow = tuple(git_allow)
        self.driver = driver_id()
        self._drivers: dict[int, Driver] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.changed = RunBell()
        self._looked_lost = 0.0
        self._thread = threading.Thread(target=self._run, name="wh-workflows", daemon=True)

    def start(self) -> WorkflowThread:
        self._thread.start()
        return self

    def wake(self) -> None:
        """A run was started or cancelled, or a job finished: look now rather
        than at the next pass (from any thread)."""
        self._wake.set()

    def _take_up(self) -> None:
        for run in runstore.list_runs(self.engine, states=RUN_ACTIVE):
            if run.id in self._drivers or (run.driver or "").startswith(CWL_DRIVER):
                continue  # a CWL run is driven by its own runner (warehouse.cwl)
            try:
                host = CatalogWarehouse(
                    self.engine, self.keep, run.owner, self.git_roots, self.git_allow
                )
                driver = Driver(host, run.id, executor=self.executor, driver=self.driver)
                if driver.claim():
                    self._drivers[run.id] = driver
            except WarehouseError as e:
                log.warning("workflow run %s cannot be driven: %s", run.id, e)

    def _end_lost(self) -> None:
        now = time.monotonic()
        if now - self._looked_lost < _LOST_EVERY:
            return
        self._looked_lost = now
        for lost in cwlruns.end_lost(self.engine, pids=False):
            log.info("workflow run %s ended: %s", lost.run.id, lost.run.error)

    def _pass(self) -> bool:
        """One look at every run held; whether it wrote any (or took one up)."""
        held = len(self._drivers)
        self._take_up()
        self._end_lost()
        changed = len(self._drivers) != held
        submitted = False
        for run_id, driver in list(self._drivers.items()):
            writes, jobs = driver.writes, driver.submitted
            try:
                if driver.turn():
                    del self._drivers[run_id]
                changed = changed or driver.writes != writes
                submitted = submitted or driver.submitted != jobs
            except WarehouseError as e:
                log.warning("workflow run %s: %s", run_id, e)
                del self._drivers[run_id]
        if submitted and self.on_submitted is not None:
            self.on_submitted()
        return changed

    def _run(self) -> None:
        while not self._stop.is_set():
            # Cleared before the pass: a wake during it brings the next one at once.
            self._wake.clear()
            try:
                if self._pass():
                    self.changed.ring()
            except Exception:
                log.exception("the workflow driver failed; going on")
            self._wake.wait(self.interval if self._drivers else 0.5)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
