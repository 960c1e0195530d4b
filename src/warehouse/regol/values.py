"""What the catalog says of a watch and of a run, as plain records (no
database library needed to show them)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

__all__ = ["BisectRecord", "RunRecord", "WatchRecord"]


@dataclass(frozen=True, slots=True)
class WatchRecord:
    id: int
    job: int  # the job it follows
    function: str  # that job's git: spec
    repository: str
    path: str
    branch: str
    label: str
    owner: str
    created_at: float
    active: bool

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class RunRecord:
    id: int
    watch: int
    commit: str
    commit_time: float
    subject: str
    generation: int  # position along the branch's first-parent chain
    job: int
    state: str
    output_pdh: str | None
    run_time: float | None  # seconds the job (or the one it reused) ran
    cpu_seconds: float | None
    equals_previous: bool | None  # None: failed, unfinished, or first success
    reused: bool
    created_at: float

    @property
    def changed(self) -> bool:
        return self.equals_previous is False

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class BisectRecord:
    """One step of a bisect as the service answers it: a run to wait for
    (``run``; ``submitted`` if this step made it), or the answer."""

    done: bool
    found: str | None
    run: RunRecord | None
    submitted: bool
    candidates: int
    left: int  # candidates still in question

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["run"] = None if self.run is None else self.run.as_dict()
        return out
