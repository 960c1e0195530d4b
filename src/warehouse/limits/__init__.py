"""Step limits (DESIGN §9.2): each step gets the cpus and memory it asked for
and no more, a bounded process count, scratch directory and wall time.

``policy`` decides (pure), ``cgroups`` finds what the host offers and makes
a step's control group, ``guard`` holds a running step to its limits.
docs/jobs.md ("Limits") says what holds where.
"""

from warehouse.limits.cgroups import Host, detect
from warehouse.limits.guard import Guard, Limiter
from warehouse.limits.policy import (
    Policy,
    Seen,
    StepLimits,
    decide,
    size_text,
    slurm_reason,
    verdict,
)

__all__ = [
    "Guard",
    "Host",
    "Limiter",
    "Policy",
    "Seen",
    "StepLimits",
    "decide",
    "detect",
    "size_text",
    "slurm_reason",
    "verdict",
]
