"""How long a job still needs, from the run times of its finished steps (pure)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["eta_seconds"]


def eta_seconds(durations: Sequence[float], running: int, queued: int) -> float | None:
    """Seconds until the job's steps are all done, or None when nothing can be said.

    The mean run time of the finished steps, times the steps left, spread over
    as many slots as steps run now (at least one); a running step counts as
    half done, since on average it is.
    """
    if not durations or running + queued == 0:
        return None
    mean = sum(durations) / len(durations)
    left = queued + running * 0.5
    return mean * left / max(running, 1)
