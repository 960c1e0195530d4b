"""Counters steps report (``warehouse.step.counters``), added up per level and per job."""

from __future__ import annotations

import json
from collections.abc import Iterable

from warehouse.jobs.jobrecords import StepRecord

__all__ = ["Totals", "format_counters", "step_counters", "totals"]

Totals = dict[str, int]


def step_counters(step: StepRecord) -> Totals:
    if not step.counters:
        return {}
    found = json.loads(step.counters)
    return {str(k): int(v) for k, v in found.items()} if isinstance(found, dict) else {}


def _add(into: Totals, more: Totals) -> None:
    for name, value in more.items():
        into[name] = into.get(name, 0) + value


def totals(steps: Iterable[StepRecord]) -> tuple[dict[int, Totals], Totals]:
    """(level → summed counters, the job's sum); levels with no counters are left out."""
    by_level: dict[int, Totals] = {}
    job: Totals = {}
    for step in steps:
        found = step_counters(step)
        if found:
            _add(by_level.setdefault(step.level, {}), found)
            _add(job, found)
    return dict(sorted(by_level.items())), job


def format_counters(counters: Totals) -> str:
    return ", ".join(f"{name}={value}" for name, value in sorted(counters.items()))
