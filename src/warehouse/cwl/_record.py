"""A CWL run recorded as a workflow run (``wh workflow ls|show``, the run page).

The run's row is written once cwltool has loaded the documents: its file is
a collection of the CWL files the run loaded (each at its path relative to
their common directory), its inputs the job order with every file named by
its collection. A node is added for each tool invocation as it is submitted
(a scatter's size is known only then), named as cwltool names the job, and
depending on the nodes whose outputs it reads. The run's driver is marked
``cwl …`` so that a controller's workflow thread, which drives the YAML
workflows, leaves it alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from warehouse.catalog.values import NAME_LIMIT, check_name
from warehouse.errors import UsageError, WarehouseError
from warehouse.workflows import records
from warehouse.workflows.driver import driver_id
from warehouse.workflows.naming import point_name
from warehouse.workflows.spec import output_name
from warehouse.workflows.values import CWL_DRIVER

__all__ = ["Recorder", "check_prefix", "document_files"]


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


class Recorder:
    """The workflow run of one CWL run, written as the run goes."""

    def __init__(
        self, wh: Any, lock: threading.RLock, name_outputs: str | None, *, catalog: bool = True
    ) -> None:
        self.wh = wh
        self.catalog = catalog  # False through a controller: outputs are named, no run recorded
        self._lock = lock
        self.name_outputs = name_outputs
        self.run_id: int | None = None
        self._done = False
        self._nodes: dict[str, int] = {}  # node -> position
        self._made_by: dict[str, str] = {}  # output PDH -> the node that made it

    def start(self, files: Sequence[str], inputs: Mapping[str, Any], workflow: str) -> None:
        """Record the run: its CWL files as one collection, its inputs, no node yet."""
        if not self.catalog:
            return  # through a controller: not recorded yet (docs/cwl.md)
        with self._lock:
            file_pdh = self._store_files(files)
            values = json.dumps(inputs, sort_keys=True, default=str)
            key = json.dumps(["cwl", file_pdh, values, self.name_outputs], sort_keys=True)
            now = time.time()
            run = records.insert_run(
                self.wh.engine,
                {
                    "workflow": workflow[:255],
                    "file_pdh": file_pdh,
                    "inputs": values,
                    "pins": "{}",
                    "state": "running",
                    "owner": self.wh.user,
                    "name_outputs": self.name_outputs,
                    "run_key": hashlib.sha256(key.encode()).hexdigest(),
                    "started_at": now,
                    "driver": CWL_DRIVER + driver_id(),
                    "heartbeat_at": now,
                },
                [],
            )
            self.run_id = run.id

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

    def submitted(self, node: str, function: str, job: Any, reads: Iterable[str]) -> None:
        """A tool invocation became job ``job``, reading collections ``reads``."""
        if self.run_id is None:
            return
        with self._lock:
            depends = sorted({self._made_by[p] for p in reads if p in self._made_by} - {node})
            if node not in self._nodes:
                self._nodes[node] = len(self._nodes)
                records.add_nodes(
                    self.wh.engine,
                    self.run_id,
                    [{"node": node, "function": function, "depends_on": depends}],
                    first_position=self._nodes[node],
                )
            records.update_nodes(
                self.wh.engine,
                self.run_id,
                {
                    node: {
                        "job_id": job.id,
                        "state": job.state,
                        "input_pdh": job.input_pdh,
                        "started_at": time.time(),
                    }
                },
                {"heartbeat_at": time.time()},
            )

    def finished(self, node: str, job: Any) -> None:
        if self.run_id is None:
            return
        with self._lock:
            if job.output_pdh:
                self._made_by.setdefault(job.output_pdh, node)
            records.update_nodes(
                self.wh.engine,
                self.run_id,
                {
                    node: {
                        "state": job.state,
                        "reused": job.reused_from is not None,
                        "output_pdh": job.output_pdh,
                        "finished_at": time.time(),
                        "error": job.error,
                    }
                },
                {"heartbeat_at": time.time()},
            )

    def cancelled(self) -> bool:
        """Whether ``wh workflow cancel`` asked for this run to stop."""
        if self.run_id is None:
            return False
        with self._lock:
            return records.get_run(self.wh.engine, self.run_id).control == "cancel"

    def finish(self, state: str, outputs: Mapping[str, str], error: str | None) -> str | None:
        """The run's end: its outputs (name -> PDH) named with the prefix; an
        error naming them, or None."""
        if self._done or (self.run_id is None and not (self.name_outputs and outputs)):
            return None
        self._done = True
        values: dict[str, Any] = {
            "state": state,
            "finished_at": time.time(),
            "control": None,
            "error": error,
        }
        if state == "complete":
            values["outputs"] = json.dumps(dict(outputs), sort_keys=True)
            if self.name_outputs:
                try:
                    for o, pdh in sorted(outputs.items()):
                        point_name(self.wh, output_name(self.name_outputs, o), pdh)
                except WarehouseError as e:
                    values.update(state="failed", error=f"naming the outputs: {e}")
        if self.run_id is not None:
            with self._lock:
                records.update_run(self.wh.engine, self.run_id, values)
        return values["error"] if values["state"] == "failed" else None
