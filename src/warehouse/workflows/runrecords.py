"""What the catalog says of a workflow run and its nodes, as plain records.

Apart from ``runstore`` (the queries) so that a client showing runs from a
controller needs no database library.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

__all__ = [
    "CWL_DRIVER",
    "NODE_STATES",
    "RUN_ACTIVE",
    "RUN_FINISHED",
    "RUN_STATES",
    "CollectionPart",
    "NodeRecord",
    "RunRecord",
    "RunWithNodes",
]

# The driver column of a CWL run starts so: its own runner drives it (warehouse.cwl),
# never a controller's workflow thread.
CWL_DRIVER = "cwl "
RUN_STATES = ("queued", "running", "complete", "failed", "cancelled")
RUN_ACTIVE = frozenset({"queued", "running"})
RUN_FINISHED = frozenset({"complete", "failed", "cancelled"})
# waiting: its inputs are not ready yet; skipped: a job it reads failed or was cancelled.
NODE_STATES = ("waiting", "queued", "running", "complete", "failed", "cancelled", "skipped")


@dataclass(frozen=True, slots=True)
class RunRecord:
    id: int
    workflow: str
    file_pdh: str
    inputs: str  # JSON
    pins: str  # JSON {function spec: [PDH, path, commit or null]}
    state: str
    control: str | None
    owner: str
    created_at: float
    started_at: float | None
    finished_at: float | None
    name_outputs: str | None
    outputs: str | None  # JSON
    error: str | None
    run_key: str
    driver: str | None
    heartbeat_at: float | None
    version: int = 0  # raised by each change a reader sees (migration 0020)
    output_object: str | None = None  # a complete CWL run's: a collection of cwl.output.json
    output_files: str | None = None  # and the collection of its output files (migration 0023)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def input_values(self) -> dict[str, Any]:
        return dict(json.loads(self.inputs))

    @property
    def output_pdhs(self) -> dict[str, str]:
        return dict(json.loads(self.outputs)) if self.outputs else {}


@dataclass(frozen=True, slots=True)
class NodeRecord:
    run_id: int
    node: str
    position: int  # in the file's order of jobs
    function: str
    job_id: int | None
    state: str
    reused: bool
    input_pdh: str | None
    output_pdh: str | None
    started_at: float | None
    finished_at: float | None
    depends_on: str  # JSON list of node names
    error: str | None
    version: int = 0  # the run's version when this node last changed

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def dependencies(self) -> list[str]:
        return list(json.loads(self.depends_on))


@dataclass(frozen=True, slots=True)
class CollectionPart:
    pdh: str  # the combined collection
    position: int
    dir: str
    part_pdh: str

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class RunWithNodes:
    """A run and its nodes in file order (what the run page draws)."""

    run: RunRecord
    nodes: list[NodeRecord]

    def as_dict(self) -> dict[str, Any]:
        return {**self.run.as_dict(), "nodes": [n.as_dict() for n in self.nodes]}
