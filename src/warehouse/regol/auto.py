"""A controller running Regol by itself, only while the cluster is idle.

Every ``interval`` seconds the runner looks at the catalog; if no job at all
is queued or running (``model.may_start``), it submits the runs every active
watch still lacks, as the watch's owner, at the lowest priority. A user job
submitted later is started before any of them that has not started yet, and
none is submitted while a user job waits.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

import sqlalchemy as sa

from warehouse.blocks.store import BlockStore
from warehouse.errors import WarehouseError
from warehouse.gitcmd import DEFAULT_ALLOW
from warehouse.jobs.controllerhost import CatalogWarehouse
from warehouse.regol import model, records, service
from warehouse.regol.values import RunRecord

__all__ = ["RegolRunner"]

log = logging.getLogger("warehouse.regol")


class RegolRunner:
    def __init__(
        self,
        engine: sa.Engine,
        keep: Callable[[], BlockStore],
        executor: str,
        interval: float,
        *,
        git_roots: Sequence[str] = (),
        git_allow: Sequence[str] = DEFAULT_ALLOW,
    ) -> None:
        self.engine = engine
        self.keep = keep
        self.executor = executor
        self.interval = interval
        self.git_roots = tuple(git_roots)
        self.git_allow = tuple(git_allow)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wh-regol", daemon=True)

    def start(self) -> RegolRunner:
        self._thread.start()
        return self

    def tick(self) -> list[RunRecord]:
        """One look: the runs submitted (none while any job is queued or running)."""
        if not model.may_start(records.active_job_states(self.engine)):
            return []
        made: list[RunRecord] = []
        for w in records.list_watches(self.engine, active_only=True):
            host = CatalogWarehouse(self.engine, self.keep, w.owner, self.git_roots, self.git_allow)
            try:
                made += service.run_watch(host, w, None, self.executor)
            except WarehouseError as e:  # one broken watch does not stop the others
                log.warning("regol: watch %d: %s", w.id, e)
        return made

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                made = self.tick()
                if made:
                    log.info("regol: %d runs submitted", len(made))
            except Exception:
                log.exception("regol: the idle runner failed; trying again later")

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
