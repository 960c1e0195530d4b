"""Running and reading workflows the same way on both kinds of warehouse.

``LocalWorkflows`` works on the embedded catalog (a run is driven by the
process that waits for it, or by a detached ``wh workflow drive``);
``RemoteWorkflows`` calls the controller's ``/api/v1/workflows``, whose
driver thread runs them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import UsageError
from warehouse.workflows.runrecords import RUN_FINISHED

if TYPE_CHECKING:
    from warehouse.remote.warehouse import RemoteWarehouse

__all__ = ["LocalWorkflows", "RemoteWorkflows", "WorkflowsView", "workflows_view"]

# A run as plain values: RunRecord's fields plus "nodes" (each with steps_done),
# and "resumed" when it was just started.
RunView = dict[str, Any]
Follow = Callable[[RunView], None]

_WAIT_POLL = 0.2  # seconds between two reads of a run another process drives
# How long a controller may hold a follower's request for a change (it answers
# at once when the run ends; docs/workflows.md, "Following a run").
_FOLLOW_WAIT = 20.0


def _wait(get: Callable[[int], RunView], run_id: int, follow: Follow | None) -> RunView:
    """Read the run until it finishes (another process drives it), showing each view."""
    while True:
        view = get(run_id)
        if follow is not None:
            follow(view)
        if view["state"] in RUN_FINISHED:
            return view
        time.sleep(_WAIT_POLL)


class LocalWorkflows:
    def __init__(self, wh: EmbeddedWarehouse, executor: str = "local") -> None:
        from warehouse.workflows import runstore

        self.wh = wh
        self.runstore = runstore
        self.executor = executor

    def start(
        self,
        text: str,
        filename: str,
        inputs: Mapping[str, Any],
        *,
        name_outputs: str | None = None,
        base_dir: Path | None = None,
    ) -> RunView:
        from warehouse.workflows.runstart import start_run

        started = start_run(
            self.wh, text, filename, inputs, name_outputs=name_outputs, base_dir=base_dir
        )
        return {**self.get(started.run.id), "resumed": started.resumed}

    def run(self, run_id: int, *, wait: bool, follow: Follow | None = None) -> RunView:
        """Drive the run here (``wait``) or in a detached process; a live driver is left be."""
        from warehouse.workflows.driver import Driver, driver_dead
        from warehouse.workflows.embeddeddriving import drive_here, spawn_driver

        run = self.runstore.get_run(self.wh.engine, run_id)
        if run.state in RUN_FINISHED:
            return self.get(run_id)
        fresh = run.heartbeat_at is not None and time.time() - run.heartbeat_at < 10.0
        driven = run.driver is not None and not driver_dead(run.driver) and fresh
        if not wait:
            if not driven:
                spawn_driver(self.wh.home, run_id, self.executor)
            return self.get(run_id)
        if driven:
            return self.wait(run_id, follow)

        def progress(driver: Driver) -> None:
            if follow is not None and driver.last_changes:
                follow(driver.view())

        drive_here(self.wh, run_id, executor=self.executor, progress=progress)
        view = self.get(run_id)
        if follow is not None:
            follow(view)
        return view

    def get(self, run_id: int) -> RunView:
        self._end_lost()
        return self.runstore.run_view(self.wh.engine, run_id)

    def wait(self, run_id: int, follow: Follow | None = None) -> RunView:
        return _wait(self.get, run_id, follow)

    def all(self) -> list[dict[str, Any]]:
        self._end_lost()
        return [r.as_dict() for r in self.runstore.list_runs(self.wh.engine)]

    def _end_lost(self) -> None:
        """CWL runs whose runner was killed are ended when next looked at: no
        other process of an embedded warehouse would (docs/cwl.md)."""
        from warehouse.jobs.runmanager import ensure_manager
        from warehouse.workflows.cwlruns import end_lost

        for lost in end_lost(self.wh.engine):
            for executor in sorted({e for _, e in lost.jobs}):
                ensure_manager(self.wh.home, executor)  # one applies the jobs' cancels

    def cancel(self, run_id: int) -> RunView:
        from warehouse.workflows.driver import driver_dead
        from warehouse.workflows.embeddeddriving import spawn_driver

        self._end_lost()
        run = self.runstore.request_cancel(self.wh.engine, run_id)
        if driver_dead(run.driver):  # nobody would apply it: a driver does, then exits
            spawn_driver(self.wh.home, run_id, self.executor)
        return self.get(run_id)


class RemoteWorkflows:
    def __init__(self, wh: RemoteWarehouse) -> None:
        self.wh = wh
        self.api = wh.api

    def start(
        self,
        text: str,
        filename: str,
        inputs: Mapping[str, Any],
        *,
        name_outputs: str | None = None,
        base_dir: Path | None = None,
    ) -> RunView:
        body = {
            "file": text,
            "filename": filename,
            "inputs": dict(inputs),
            "name_outputs": name_outputs,
            "base_dir": str(base_dir) if base_dir is not None else None,
        }
        view: RunView = self.api.post("/workflows", body)
        return view

    def run(self, run_id: int, *, wait: bool, follow: Follow | None = None) -> RunView:
        return self.wait(run_id, follow) if wait else self.get(run_id)

    def get(self, run_id: int) -> RunView:
        view: RunView = self.api.get(f"/workflows/{run_id}")
        return view

    def wait(self, run_id: int, follow: Follow | None = None) -> RunView:
        """Follow the run to its end: read whole once, then only what changed,
        each answer held by the controller until something did."""
        view = self.get(run_id)
        while True:
            if follow is not None:
                follow(view)
            if view["state"] in RUN_FINISHED:
                return view
            version = view.get("version")
            if not isinstance(version, int):  # a controller without versions: read it whole
                time.sleep(_WAIT_POLL)
                view = self.get(run_id)
                continue
            changes: RunView = self.api.get(
                f"/workflows/{run_id}", since=version, wait=_FOLLOW_WAIT
            )
            view = _merged(view, changes)
            if view["version"] == version and view["state"] not in RUN_FINISHED:
                time.sleep(_WAIT_POLL)  # answered unchanged (its wait ended, or it was busy)

    def all(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.api.get("/workflows")
        return found

    def cancel(self, run_id: int) -> RunView:
        view: RunView = self.api.post(f"/workflows/{run_id}/cancel", {})
        return view


def _merged(view: RunView, changes: RunView) -> RunView:
    """``view`` brought up to ``changes`` (``since``'s answer: the run, and the
    nodes changed; every node once the run has ended)."""
    run = {k: v for k, v in changes.items() if k not in ("nodes", "since")}
    if changes["state"] in RUN_FINISHED:
        return {**run, "nodes": changes["nodes"]}
    changed = {n["node"]: n for n in changes["nodes"]}
    nodes = [changed.pop(n["node"], n) for n in view["nodes"]]
    nodes.extend(changed.values())  # added since (a CWL run learns its nodes as it goes)
    return {**run, "nodes": nodes}


WorkflowsView = LocalWorkflows | RemoteWorkflows


def workflows_view(wh: object, executor: str = "local") -> WorkflowsView:
    if isinstance(wh, EmbeddedWarehouse):
        return LocalWorkflows(wh, executor)
    # Loaded only when needed: an embedded run does without the HTTP client.
    from warehouse.remote.warehouse import RemoteWarehouse

    if isinstance(wh, RemoteWarehouse):
        return RemoteWorkflows(wh)
    raise UsageError("workflows need an embedded warehouse or a controller")
