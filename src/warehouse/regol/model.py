"""Regol's decisions, with no I/O: which commits to run, what changed, where a
bisect stands, and whether a controller may start runs now.

Every function here takes plain values (commits in branch order, outcomes of
runs already made) and returns plain values; ``warehouse.regol.service``
reads git and the catalog and carries the answers out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "FINISHED",
    "REGOL_PRIORITY",
    "Bisect",
    "Commit",
    "Outcome",
    "bisect_step",
    "changes",
    "may_start",
    "to_run",
]

# The lowest priority a job may have (jobs/submission.py keeps priorities
# within ±(2**31 - 1)): a Regol run never takes a slot a user's job could have.
REGOL_PRIORITY = -(2**31 - 1)

FINISHED = frozenset({"complete", "failed", "cancelled"})


@dataclass(frozen=True, slots=True)
class Commit:
    """One commit of a watch's branch; ``generation`` is its position along the
    first-parent chain (the root is 1), which orders a history."""

    sha: str
    time: float
    subject: str
    generation: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a run of one commit gave: its state and, when complete, its output."""

    state: str
    output_pdh: str | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def succeeded(self) -> bool:
        return self.state == "complete" and self.output_pdh is not None


def to_run(
    commits: Sequence[Commit], runs: Mapping[str, Outcome], *, retry_failed: bool
) -> list[Commit]:
    """The commits (oldest first) that need a run: those never run and, with
    ``retry_failed`` (an explicit range), those whose last run failed."""
    out = []
    for c in sorted(commits, key=lambda c: c.generation):
        known = runs.get(c.sha)
        if known is None or (retry_failed and known.finished and not known.succeeded):
            out.append(c)
    return out


def changes(history: Sequence[Outcome]) -> list[bool | None]:
    """For each run of a history in commit order: does its output equal the
    nearest earlier successful run's? None for a run that did not succeed
    and for the first success (nothing to compare with)."""
    out: list[bool | None] = []
    last: str | None = None
    for o in history:
        if not o.succeeded:
            out.append(None)
            continue
        out.append(None if last is None else o.output_pdh == last)
        last = o.output_pdh
    return out


@dataclass(frozen=True, slots=True)
class Bisect:
    """One step of a bisect: run ``run`` next, or the search is over and
    ``found`` is the first commit that differs (None: none of them does).
    ``low``/``high`` bound what is left: candidates[low:high+1]."""

    run: str | None = None
    found: str | None = None
    done: bool = False
    low: int = 0
    high: int = 0


def bisect_step(good: str, candidates: Sequence[str], known: Mapping[str, Outcome]) -> Bisect:
    """The next step of finding the first of ``candidates`` (the commits after
    ``good`` up to the bad one, oldest first) whose run fails or whose output
    differs from ``good``'s, assuming that once a commit differs, every later
    one does.

    Every result in ``known`` is used: the search starts between the newest
    candidate known to match and the oldest known to differ, so a run made
    earlier is never made again. The bad end is not assumed bad: "none of
    them" is an answer too, so at most ceil(log2(n + 1)) candidates run,
    plus the good commit itself if it has not run yet.
    """
    base = known.get(good)
    if base is None or not base.finished:
        return Bisect(run=good)
    if not base.succeeded:
        raise ValueError(f"the run of the good commit {good[:12]} did not succeed")

    def differs(sha: str) -> bool | None:
        o = known.get(sha)
        if o is None or not o.finished:
            return None
        return not o.succeeded or o.output_pdh != base.output_pdh

    n = len(candidates)
    high = next((i for i, c in enumerate(candidates) if differs(c)), n)
    low = max((i + 1 for i, c in enumerate(candidates[:high]) if differs(c) is False), default=0)
    if low >= high:
        return Bisect(found=candidates[high] if high < n else None, done=True, low=low, high=high)
    return Bisect(run=candidates[(low + high) // 2], low=low, high=high)


def may_start(active_states: Iterable[str]) -> bool:
    """A controller starts Regol runs only while no job at all is queued or
    running (its own earlier runs included): user jobs never wait for them."""
    return not any(s in ("queued", "running") for s in active_states)
