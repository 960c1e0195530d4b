"""Garbage collection, replication repair and fsck (DESIGN §6).

Pure decisions (``scan``, ``plan``) apart from the I/O: ``local`` runs them
on the embedded warehouse's volume, ``keep`` on keep servers for the
controller. See docs/gc.md.
"""

from warehouse.gc.mark import GcAborted, MarkResult, mark
from warehouse.gc.plan import BalancePlan, Copy, PullEntry, SweepPlan, plan_balance, plan_sweep
from warehouse.gc.report import GcReport
from warehouse.gc.roots import Roots, find_roots, job_roots
from warehouse.gc.scan import block_md5s, locator_keys, update_md5s
from warehouse.gc.settings import GcSettings, load_settings, parse_duration, save_settings

__all__ = [
    "BalancePlan",
    "Copy",
    "GcAborted",
    "GcReport",
    "GcSettings",
    "MarkResult",
    "PullEntry",
    "Roots",
    "SweepPlan",
    "block_md5s",
    "find_roots",
    "job_roots",
    "load_settings",
    "locator_keys",
    "mark",
    "parse_duration",
    "plan_balance",
    "plan_sweep",
    "save_settings",
    "update_md5s",
]
