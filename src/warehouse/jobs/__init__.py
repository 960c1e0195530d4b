"""Batch jobs: versioned functions run as steps over streams (DESIGN §5).

``model`` decides (pure), ``manager`` carries decisions out, ``executors`` and
``daskexec`` run steps, ``records`` keeps everything in the catalog,
``functions`` pins versions, ``submit`` queues or reuses, ``service`` runs
the embedded manager, ``protocol`` is what a step sees and writes.
"""

from warehouse.jobs.model import Resources, Scheduler
from warehouse.jobs.records import JobRecord, StepRecord, get_job, list_jobs, list_steps
from warehouse.jobs.service import ensure_manager, run_manager
from warehouse.jobs.submit import JobRequest, parse_size, submit

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
