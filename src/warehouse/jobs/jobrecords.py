"""What the catalog says of a job and of a step, as plain records.

Apart from ``jobstore`` (the queries) so that a client showing jobs from a
controller needs no database library.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

__all__ = ["JobRecord", "StepRecord"]


@dataclass(frozen=True, slots=True)
class JobRecord:
    id: int
    function: str
    function_pdh: str
    function_path: str
    function_commit: str | None
    input_pdh: str
    params: str
    cpus: int
    memory: int
    max_attempts: int
    priority: int
    executor: str
    state: str
    control: str | None
    created_at: float
    started_at: float | None
    finished_at: float | None
    output_pdh: str | None
    log_pdh: str | None
    reuse_key: str
    reused_from: int | None
    steps_done: int
    steps_running: int
    steps_queued: int
    failed_attempts: int
    cpu_seconds: float
    error: str | None
    submitted_by: str
    # Placement: input bytes of finished steps, and those on the step's own host.
    input_bytes: int = 0
    local_bytes: int = 0
    input_name: str | None = None  # the name the input was submitted under, if any

    @property
    def local_fraction(self) -> float | None:
        return self.local_bytes / self.input_bytes if self.input_bytes else None

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class StepRecord:
    job: int
    number: int
    level: int
    input: str
    state: str
    attempts: int
    failures: int
    exit_status: int | None
    started_at: float | None
    finished_at: float | None
    host: str | None
    output: str | None
    intermediate: str | None
    log: str | None
    log_tail: str | None
    counters: str | None = None  # JSON {name: integer}
    # What its attempts used (docs/usage.md); None: not measured.
    cpu_seconds: float | None = None
    wall_seconds: float | None = None
    peak_memory: int | None = None
    read_bytes: int | None = None
    written_bytes: int | None = None
    input_bytes: int | None = None
    # Blocks it reported reading, and their bytes, per source (usage.model).
    blocks_cache: int | None = None
    blocks_local: int | None = None
    blocks_s3: int | None = None
    blocks_keep: int | None = None
    blocks_cluster: int | None = None
    block_bytes_cache: int | None = None
    block_bytes_local: int | None = None
    block_bytes_s3: int | None = None
    block_bytes_keep: int | None = None
    block_bytes_cluster: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
