"""Regol the same way on both kinds of warehouse.

``LocalRegol`` works on the embedded catalog and runs the job manager here
when asked to wait; ``RemoteRegol`` calls the controller's ``/api/v1/regol``,
where git is read and the manager runs. ``bisect`` drives either one step
at a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import ForbiddenError, UsageError
from warehouse.regol.model import FINISHED
from warehouse.regol.values import BisectRecord, RunRecord, WatchRecord
from warehouse.remote.warehouse import RemoteWarehouse

if TYPE_CHECKING:
    from warehouse.jobs.jobstore import JobRecord

__all__ = ["LocalRegol", "Regol", "RemoteRegol", "bisect", "regol_view"]

POLL_SECONDS = 0.2


class Regol(Protocol):
    def watch(self, job: int, branch: str | None, label: str | None) -> WatchRecord: ...

    def watches(self) -> list[WatchRecord]: ...

    def get(self, watch: int) -> WatchRecord: ...

    def unwatch(self, watch: int) -> WatchRecord: ...

    def run(
        self, watches: Sequence[int], commits: str | None, *, start: bool = True
    ) -> list[RunRecord]:
        """Submit the runs; ``start``: see that a job manager will run them
        (not needed before ``wait``, which runs one)."""
        ...

    def history(self, watch: int) -> list[RunRecord]: ...

    def bisect_step(self, watch: int, good: str, bad: str) -> BisectRecord: ...

    def wait(self, runs: Sequence[RunRecord]) -> list[RunRecord]:
        """Until every run has finished; the runs as they ended."""
        ...


class LocalRegol:
    def __init__(self, wh: EmbeddedWarehouse) -> None:
        from warehouse.regol import records, service

        self.wh = wh
        self.records = records
        self.service = service

    def watch(self, job: int, branch: str | None, label: str | None) -> WatchRecord:
        return self.service.watch(self.wh, job, branch, label)

    def watches(self) -> list[WatchRecord]:
        return self.records.list_watches(self.wh.engine)

    def get(self, watch: int) -> WatchRecord:
        return self.records.get_watch(self.wh.engine, watch)

    def unwatch(self, watch: int) -> WatchRecord:
        found = self.get(watch)
        if found.owner != self.wh.user:
            raise ForbiddenError(f"watch {watch} belongs to {found.owner}")
        return self.records.set_active(self.wh.engine, watch, False)

    def run(
        self, watches: Sequence[int], commits: str | None, *, start: bool = True
    ) -> list[RunRecord]:
        chosen = self.service.runnable_watches(self.watches(), watches)
        made = self.service.run_watches(self.wh, chosen, commits)
        if start:
            self._start_managers(made)
        return made

    def history(self, watch: int) -> list[RunRecord]:
        return self.records.history(self.wh.engine, watch)

    def bisect_step(self, watch: int, good: str, bad: str) -> BisectRecord:
        return self.service.bisect_step(self.wh, self.get(watch), good, bad)

    def _jobs(self, runs: Sequence[RunRecord]) -> list[JobRecord]:
        from warehouse.jobs.jobstore import get_job

        return [get_job(self.wh.engine, r.job) for r in runs]

    def _start_managers(self, runs: Sequence[RunRecord]) -> None:
        from warehouse.jobs.runmanager import ensure_manager

        for executor in {j.executor for j in self._jobs(runs) if j.state not in FINISHED}:
            ensure_manager(self.wh.home, executor)

    def wait(self, runs: Sequence[RunRecord]) -> list[RunRecord]:
        from warehouse.jobs.runmanager import run_manager

        ids = {r.job for r in runs}
        for executor in {j.executor for j in self._jobs(runs) if j.state not in FINISHED}:
            # Here if no manager runs yet (a background one may have started
            # by now: then it is waited for below).
            run_manager(
                self.wh,
                executor,
                stop=lambda m: not any(i in m.sched.jobs for i in ids) and self._finished(ids),
            )
        while not self._finished(ids):
            time.sleep(POLL_SECONDS)
        self._start_managers_for_others()
        return self._ended(runs)

    def _start_managers_for_others(self) -> None:
        # Jobs queued meanwhile by others get a manager once ours has left.
        from warehouse.jobs.jobstore import list_jobs
        from warehouse.jobs.runmanager import ensure_manager

        for executor in {j.executor for j in list_jobs(self.wh.engine, ("queued", "running"))}:
            ensure_manager(self.wh.home, executor)

    def _finished(self, job_ids: set[int]) -> bool:
        return self.records.unfinished_jobs(self.wh.engine, job_ids) == 0

    def _ended(self, runs: Sequence[RunRecord]) -> list[RunRecord]:
        out = []
        for watch in sorted({r.watch for r in runs}):
            by_id = {r.id: r for r in self.history(watch)}
            out += [by_id[r.id] for r in runs if r.watch == watch and r.id in by_id]
        return out


class RemoteRegol:
    def __init__(self, wh: RemoteWarehouse) -> None:
        self.api = wh.api

    def watch(self, job: int, branch: str | None, label: str | None) -> WatchRecord:
        body = {"job": job, "branch": branch, "label": label}
        return WatchRecord(**self.api.post("/regol/watches", body))

    def watches(self) -> list[WatchRecord]:
        return [WatchRecord(**r) for r in self.api.get("/regol/watches")]

    def get(self, watch: int) -> WatchRecord:
        return WatchRecord(**self.api.get(f"/regol/watches/{watch}"))

    def unwatch(self, watch: int) -> WatchRecord:
        return WatchRecord(**self.api.call("DELETE", f"/regol/watches/{watch}"))

    def run(
        self, watches: Sequence[int], commits: str | None, *, start: bool = True
    ) -> list[RunRecord]:
        body = {"watches": list(watches), "commits": commits}
        return [RunRecord(**r) for r in self.api.post("/regol/runs", body)]

    def history(self, watch: int) -> list[RunRecord]:
        return [RunRecord(**r) for r in self.api.get(f"/regol/watches/{watch}/runs")]

    def bisect_step(self, watch: int, good: str, bad: str) -> BisectRecord:
        out: dict[str, Any] = self.api.post(
            f"/regol/watches/{watch}/bisect", {"good": good, "bad": bad}
        )
        run = out.pop("run")
        return BisectRecord(**out, run=None if run is None else RunRecord(**run))

    def wait(self, runs: Sequence[RunRecord]) -> list[RunRecord]:
        while True:
            ended = []
            for watch in sorted({r.watch for r in runs}):
                by_id = {r.id: r for r in self.history(watch)}
                ended += [by_id[r.id] for r in runs if r.watch == watch and r.id in by_id]
            if all(r.state in FINISHED for r in ended):
                return ended
            time.sleep(POLL_SECONDS)


def regol_view(wh: object) -> Regol:
    if isinstance(wh, EmbeddedWarehouse):
        return LocalRegol(wh)
    if isinstance(wh, RemoteWarehouse):
        return RemoteRegol(wh)
    raise UsageError("Regol needs an embedded warehouse or a controller")


def bisect(
    regol: Regol, watch: int, good: str, bad: str, on_run: Callable[[RunRecord], None]
) -> BisectRecord:
    """Step a bisect to its end, waiting for each run; ``on_run`` hears of each
    run it makes (as it ended)."""
    while True:
        step = regol.bisect_step(watch, good, bad)
        if step.done:
            return step
        assert step.run is not None
        (ended,) = regol.wait([step.run])
        if step.submitted:
            on_run(ended)
