"""Batch jobs: versioned functions run as steps over streams (DESIGN §5).

``model`` decides (pure), ``manager`` carries decisions out, ``executors`` and
``daskexec`` run steps, ``jobstore`` keeps everything in the catalog,
``functions`` pins versions, ``submission`` queues or reuses, ``runmanager``
runs the embedded manager, ``protocol`` is what a step sees and writes.

Names load on first use: a step reporting with `wh step`, or a client
showing jobs from a controller, needs no database library (a fifth of a
second at every start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from warehouse.lazy import lazy_names

if TYPE_CHECKING:
    from warehouse.jobs.jobrecords import JobRecord, StepRecord
    from warehouse.jobs.jobstore import get_job, list_jobs, list_steps
    from warehouse.jobs.model import Resources, Scheduler
    from warehouse.jobs.runmanager import ensure_manager, run_manager
    from warehouse.jobs.sizes import parse_size
    from warehouse.jobs.submission import JobRequest, submit

# Where each public name lives (kept equal to __all__; a test checks).
_WHERE = {
    "Resources": "model",
    "Scheduler": "model",
    "get_job": "jobstore",
    "list_jobs": "jobstore",
    "list_steps": "jobstore",
    "ensure_manager": "runmanager",
    "run_manager": "runmanager",
    "JobRequest": "submission",
    "parse_size": "sizes",
    "submit": "submission",
    "JobRecord": "jobrecords",
    "StepRecord": "jobrecords",
}

__all__ = [
    "JobRecord",
    "JobRequest",
    "Resources",
    "Scheduler",
    "StepRecord",
    "ensure_manager",
    "get_job",
    "list_jobs",
    "list_steps",
    "parse_size",
    "run_manager",
    "submit",
]


__getattr__ = lazy_names(__name__, _WHERE)
