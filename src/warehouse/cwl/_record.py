"""A CWL run recorded as a workflow run (``wh workflow ls|show``, the run page).

The run's row is written once cwltool has loaded the documents: its file is
a collection of the CWL files the run loaded (each at its path relative to
their common directory), its inputs the job order with every file named by
its collection. A node is added for each tool invocation as it is submitted
(a scatter's size is known only then), named as cwltool names the job, and
depending on the nodes whose outputs it reads. The run's driver is marked
``cwl …`` so that a controller's workflow thread, which drives the YAML
workflows, leaves it alone; a thread here renews its heartbeat, so that once
this process is gone the run is ended (``workflows.cwlruns.end_lost``).

Embedded, it is written in the catalog; through a controller, by its
``/api/v1/cwl-runs`` (docs/server.md), which checks each write as the user's.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote

from warehouse.catalog.values import NAME_LIMIT, check_name
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import UsageError
from warehouse.jobs.jobrecords import JobRecord
from warehouse.remote.warehouse import RemoteWarehouse
from warehouse.workflows import cwlruns
from warehouse.workflows.driver import driver_id
from warehouse.workflows.runrecords import RUN_ACTIVE, RunRecord
from warehouse.workflows.runstore import get_run, record_parts
from warehouse.workflows.spec import output_name

__all__ = ["Recorder", "check_prefix", "document_files"]

_LOOK_EVERY = 0.5  # seconds: how soon a wh workflow cancel is seen
_WRITE_EVERY = 0.25  # seconds a node's change of state may wait to be written with others
_API_NODES = 1000  # nodes a controller takes in one request

_Node = tuple[str, str, Sequence[str], JobRecord]  # node, function, depends_on, its job


def check_prefix(prefix: str | None, outputs: Iterable[str] = ()) -> None:
    """``--name-outputs PREFIX``: the rules and the 255 bound of ``wh workflow run``."""
    if prefix is None:
        return
    try:
        check_name(prefix)
        for output in outputs:
            name = output_name(prefix, output)
            if len(name) > NAME_LIMIT:
                raise UsageError(
                    f"output {output!r} would be named {name[:20]}…{name[-20:]}, "
                    f"{len(name)} characters: PREFIX.OUTPUT holds at most {NAME_LIMIT}"
                )
            check_name(name)
    except UsageError as e:
        raise UsageError(f"--name-outputs: {e}") from None


def document_files(uris: Iterable[str]) -> list[str]:
    """The local files among the documents' ids (``file:///dir/a.cwl#step``)."""
    found = set()
    for uri in uris:
        if uri.startswith("file://"):
            path = unquote(uri[len("file://") :].split("#", 1)[0])
            if os.path.isfile(path):
                found.add(os.path.realpath(path))
    return sorted(found)


class _Book(Protocol):
    """Where a run is written: the catalog, or a controller's API."""

    def start(
        self,
        workflow: str,
        file_pdh: str,
        inputs: Mapping[str, Any],
        name_outputs: str | None,
        run_key: str | None,
    ) -> int: ...

    def nodes(self, run_id: int, nodes: Sequence[_Node]) -> None: ...

    def parts(self, run_id: int | None, pdh: str, parts: Sequence[tuple[str, str]]) -> None: ...

    def beat(self, run_id: int) -> None: ...

    def look(self, run_id: int) -> tuple[str, str | None]: ...  # the run's state and control

    def finish(
        self,
        run_id: int,
        state: str,
        outputs: Mapping[str, str],
        error: str | None,
        output_object: str | None,
        output_files: str | None,
    ) -> str | None: ...


class _Catalog:
    def __init__(self, wh: EmbeddedWarehouse) -> None:
        self.wh = wh

    def start(
        self,
        workflow: str,
        file_pdh: str,
        inputs: Mapping[str, Any],
        name_outputs: str | None,
        run_key: str | None,
    ) -> int:
        cwlruns.end_lost(self.wh.engine)  # runs of runners killed earlier: ended first
        run = cwlruns.start(
            self.wh.engine,
            self.wh.user,
            workflow=workflow,
            file_pdh=file_pdh,
            inputs=inputs,
            name_outputs=name_outputs,
            runner=driver_id(),
            run_key=run_key,
        )
        return run.id

    def nodes(self, run_id: int, nodes: Sequence[_Node]) -> None:
        cwlruns.put_nodes(self.wh.engine, run_id, nodes)

    def parts(self, run_id: int | None, pdh: str, parts: Sequence[tuple[str, str]]) -> None:
        record_parts(self.wh.engine, pdh, parts)

    def beat(self, run_id: int) -> None:
        cwlruns.beat(self.wh.engine, run_id)

    def look(self, run_id: int) -> tuple[str, str | None]:
        run = get_run(self.wh.engine, run_id)
        return run.state, run.control

    def finish(
        self,
        run_id: int,
        state: str,
        outputs: Mapping[str, str],
        error: str | None,
        output_object: str | None,
        output_files: str | None,
    ) -> str | None:
        run = get_run(self.wh.engine, run_id)
        return cwlruns.finish(
            self.wh, self.wh.engine, run, state, outputs, error, output_object, output_files
        )


class _Api:
    """The run through a controller: each write checked there as the user's."""

    def __init__(self, wh: RemoteWarehouse) -> None:
        self.api = wh.api  # its HTTP client may be used by several threads at once

    def start(
        self,
        workflow: str,
        file_pdh: str,
        inputs: Mapping[str, Any],
        name_outputs: str | None,
        run_key: str | None,
    ) -> int:
        # The key is not sent: a whole run is reused embedded only (docs/cwl.md).
        body = {
            "workflow": workflow,
            "file_pdh": file_pdh,
            "inputs": dict(inputs),
            "name_outputs": name_outputs,
            "runner": driver_id(),
        }
        return int(self.api.post("/cwl-runs", body)["id"])

    def nodes(self, run_id: int, nodes: Sequence[_Node]) -> None:
        body = [
            {"node": node, "function": function, "depends_on": list(depends), "job_id": job.id}
            for node, function, depends, job in nodes
        ]
        for i in range(0, len(body), _API_NODES):
            self.api.post(f"/cwl-runs/{run_id}/nodes", {"nodes": body[i : i + _API_NODES]})

    def parts(self, run_id: int | None, pdh: str, parts: Sequence[tuple[str, str]]) -> None:
        if run_id is not None:  # else no run to record them for (refused before it started)
            body = {"pdh": pdh, "parts": [list(p) for p in parts]}
            self.api.post(f"/cwl-runs/{run_id}/parts", body)

    def beat(self, run_id: int) -> None:
        self.look(run_id)

    def look(self, run_id: int) -> tuple[str, str | None]:
        out = self.api.post(f"/cwl-runs/{run_id}/heartbeat", {})  # a beat too
        return str(out["state"]), out.get("control")

    def finish(
        self,
        run_id: int,
        state: str,
        outputs: Mapping[str, str],
        error: str | None,
        output_object: str | None,
        output_files: str | None,
    ) -> str | None:
        body = {"state": state, "outputs": dict(outputs), "error": error}
        if output_files is not None:
            body["output_files"] = output_files
        out = self.api.post(f"/cwl-runs/{run_id}/finish", body)
        said = out.get("naming_error")
        return str(said) if said else None


class Recorder:
    """The workflow run of one CWL run, written as the run goes."""

    def __init__(
        self,
        wh: EmbeddedWarehouse | RemoteWarehouse,
        lock: threading.RLock,
        name_outputs: str | None,
    ) -> None:
        self.wh = wh
        self.book: _Book = _Catalog(wh) if isinstance(wh, EmbeddedWarehouse) else _Api(wh)
        self._lock = lock
        self.name_outputs = name_outputs
        self.run_id: int | None = None
        self._done = False
        self._nodes: set[str] = set()
        self._made_by: dict[str, str] = {}  # output PDH -> the node that made it
        self._stop = threading.Event()
        self._beating: threading.Thread | None = None
        self._writing: threading.Thread | None = None
        # Nodes' changes of state (node -> its job), written together by the
        # writer thread: one transaction for many jobs, not one each.
        self._changes: dict[str, JobRecord] = {}
        self._looked = (0.0, False)  # when cancelled() last asked, and the answer

    def start(
        self,
        files: Sequence[str],
        inputs: Mapping[str, Any],
        workflow: str,
        run_key: str | None = None,
    ) -> None:
        """Record the run: its CWL files as one collection, its inputs, no node
        yet; ``run_key``: what makes it the same run (``_whole``)."""
        with self._lock:
            file_pdh = self._store_files(files)
            self.run_id = self.book.start(workflow, file_pdh, inputs, self.name_outputs, run_key)
        self._beating = threading.Thread(target=self._beat, name="wh-cwl-heartbeat", daemon=True)
        self._beating.start()
        self._writing = threading.Thread(target=self._write, name="wh-cwl-nodes", daemon=True)
        self._writing.start()

    def _beat(self) -> None:
        # Not under the lock: a long put must not silence the run for STALE_AFTER.
        assert self.run_id is not None
        while not self._stop.wait(cwlruns.BEAT_EVERY):
            # A beat missed (the controller restarting) is only a late one.
            with contextlib.suppress(Exception):
                self.book.beat(self.run_id)

    def _write(self) -> None:
        # Its own thread: waiting for the lock must not delay a heartbeat.
        while not self._stop.wait(_WRITE_EVERY):
            with contextlib.suppress(Exception):  # kept, and tried again next time
                self.flush()

    def flush(self) -> None:
        """Write the nodes' changes of state not written yet."""
        with self._lock:
            if self.run_id is None or not self._changes:
                return
            changes, self._changes = self._changes, {}
            try:
                self.book.nodes(self.run_id, [(n, "", [], job) for n, job in changes.items()])
            except BaseException:
                self._changes = changes | self._changes  # newer ones win
                raise

    def _store_files(self, files: Sequence[str]) -> str:
        top = os.path.commonpath([os.path.dirname(f) for f in files]) if files else ""
        with tempfile.TemporaryDirectory(prefix="wh-cwl-files-") as d:
            for f in files:
                target = Path(d) / os.path.relpath(f, top)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(Path(f).read_bytes())
            if not files:  # a document read from elsewhere (a URL): an empty collection
                (Path(d) / ".empty").mkdir()
                return str(self.wh.put([Path(d) / ".empty"]).pdh)
            return str(self.wh.put(sorted(Path(d).iterdir())).pdh)

    def parts(self, pdh: str, parts: Sequence[tuple[str, str]]) -> None:
        """Collection ``pdh`` was made of ``parts`` ((path, PDH)): lineage."""
        with self._lock:
            self.book.parts(self.run_id, pdh, parts)

    def submitted(self, node: str, function: str, job: JobRecord, reads: Iterable[str]) -> None:
        """A tool invocation became job ``job``, reading collections ``reads``."""
        self.submitted_many([(node, function, job, reads)])

    def submitted_many(self, jobs: Sequence[tuple[str, str, JobRecord, Iterable[str]]]) -> None:
        """``submitted`` for each of ``jobs`` (node, function, job, reads), written
        at once (with the changes waiting) before the jobs are waited for: a
        run ended as lost cancels the jobs of its nodes."""
        if self.run_id is None:
            return
        with self._lock:
            rows: list[_Node] = []
            for node, function, job, reads in jobs:
                depends = sorted({self._made_by[p] for p in reads if p in self._made_by} - {node})
                self._nodes.add(node)
                rows.append((node, function, depends, job))
            changes, self._changes = self._changes, {}
            try:
                self.book.nodes(self.run_id, [(n, "", [], j) for n, j in changes.items()] + rows)
            except BaseException:
                self._changes = changes | self._changes
                raise

    def progress(self, node: str, job: JobRecord) -> None:
        """Job ``job`` of node ``node`` changed state (it started running)."""
        if self.run_id is None:
            return
        with self._lock:
            self._changes[node] = job

    def finished(self, node: str, job: JobRecord) -> None:
        if self.run_id is None:
            return
        with self._lock:
            if job.output_pdh:
                self._made_by.setdefault(job.output_pdh, node)
            self._changes[node] = job

    def cancelled(self) -> bool:
        """Whether ``wh workflow cancel`` asked for this run to stop (or it was
        ended as lost: this process stalled past STALE_AFTER)."""
        if self.run_id is None:
            return False
        with self._lock:
            at, answer = self._looked
            if time.monotonic() - at >= _LOOK_EVERY:  # each waiting job asks: one look for all
                state, control = self.book.look(self.run_id)
                answer = control == "cancel" or state not in RUN_ACTIVE
                self._looked = (time.monotonic(), answer)
            return answer

    def earlier(self, run_key: str) -> RunRecord | None:
        """The newest complete run of this key (the same run, finished), embedded."""
        if self.run_id is None or not isinstance(self.wh, EmbeddedWarehouse):
            return None
        with self._lock:
            return cwlruns.served_by(self.wh.engine, run_key, self.wh.user, before=self.run_id)

    def answered_by(self, earlier: RunRecord) -> int:
        """This run is answered whole by run ``earlier``: its nodes, each reused."""
        assert self.run_id is not None and isinstance(self.wh, EmbeddedWarehouse)
        with self._lock:
            return cwlruns.copy_nodes(self.wh.engine, earlier.id, self.run_id)

    def finish(
        self,
        state: str,
        outputs: Mapping[str, str],
        error: str | None,
        output_object: str | None = None,
        output_files: str | None = None,
    ) -> str | None:
        """The run's end: its outputs (name -> PDH) named with the prefix, and
        the output object's collection and that of its files kept; an error
        naming them, or None."""
        if self._done or self.run_id is None:
            return None
        self._done = True
        self._stop.set()
        for thread in (self._beating, self._writing):
            if thread is not None:
                thread.join()
        with self._lock:
            self.flush()
            return self.book.finish(self.run_id, state, outputs, error, output_object, output_files)
