"""Regol's decisions with no I/O: which commits run, what changed, the bisect step."""

from __future__ import annotations

import math
import random

import pytest

from warehouse.regol.model import Commit, Outcome, bisect_step, changes, may_start, to_run

OK_A = Outcome("complete", "a+1")
OK_B = Outcome("complete", "b+1")
FAILED = Outcome("failed")


def test_changes_compare_with_the_nearest_earlier_success() -> None:
    history = [OK_A, OK_A, FAILED, OK_A, OK_B, Outcome("running"), OK_B, FAILED, OK_A]
    assert changes(history) == [None, True, None, True, False, None, True, None, False]
    assert changes([]) == []
    assert changes([FAILED, OK_B]) == [None, None]


def test_to_run_takes_new_commits_oldest_first_and_retries_failures_only_in_a_range() -> None:
    commits = [Commit(f"c{i}", float(i), "", i) for i in (3, 1, 2, 4)]
    runs = {"c1": OK_A, "c2": FAILED, "c4": Outcome("queued")}
    assert [c.sha for c in to_run(commits, runs, retry_failed=False)] == ["c3"]
    assert [c.sha for c in to_run(commits, runs, retry_failed=True)] == ["c2", "c3"]


def test_may_start_only_when_no_job_is_queued_or_running() -> None:
    assert may_start([])
    assert may_start(["paused"])
    assert not may_start(["queued"])
    assert not may_start(["paused", "running"])


def drive(n: int, first_bad: int | None, known: dict[str, Outcome]) -> tuple[str | None, int]:
    """Run a bisect over c1..cn (c0 good) where commits from ``first_bad`` on
    differ; the commit found and how many runs it made."""
    candidates = [f"c{i}" for i in range(1, n + 1)]

    def outcome(sha: str) -> Outcome:
        i = int(sha[1:])
        return OK_B if first_bad is not None and i >= first_bad else OK_A

    made = 0
    while True:
        step = bisect_step("c0", candidates, known)
        if step.done:
            return step.found, made
        assert step.run is not None and step.run not in known
        known[step.run] = outcome(step.run)
        made += 1


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 16, 33])
def test_bisect_finds_the_first_change_within_log2_runs(n: int) -> None:
    for first_bad in [None, *range(1, n + 1)]:
        found, made = drive(n, first_bad, {})
        assert found == (None if first_bad is None else f"c{first_bad}")
        # the good commit's run, then at most ceil(log2(n + 1)) candidates
        assert made <= math.ceil(math.log2(n + 1)) + 1, (n, first_bad, made)


def test_bisect_reuses_runs_already_made_and_never_asks_for_them_again() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 40)
        first_bad = rng.choice([None, *range(1, n + 1)])
        known = {"c0": OK_A}
        for i in rng.sample(range(1, n + 1), rng.randint(0, n)):
            known[f"c{i}"] = OK_B if first_bad is not None and i >= first_bad else OK_A
        before = len(known)
        found, made = drive(n, first_bad, known)
        assert found == (None if first_bad is None else f"c{first_bad}")
        assert len(known) == before + made


def test_bisect_counts_a_failure_as_a_difference_and_refuses_a_failed_good_run() -> None:
    known = {"g": OK_A, "x": OK_A, "y": FAILED, "z": FAILED}
    step = bisect_step("g", ["x", "y", "z"], known)
    assert (step.done, step.found) == (True, "y")
    assert bisect_step("g", ["x"], {}).run == "g"
    assert bisect_step("g", ["x"], {"g": Outcome("running")}).run == "g"
    with pytest.raises(ValueError, match="did not succeed"):
        bisect_step("g", ["x"], {"g": FAILED})


def test_chart_marks_fill_success_hollow_failure_and_recolour_on_change() -> None:
    from warehouse.regol.chart import PALETTE, chart
    from warehouse.regol.values import RunRecord, WatchRecord

    w = WatchRecord(1, 1, "git:r@main:f", "r", "f", "main", "f on main", "alice", 0.0, True)
    states = [("complete", "a+1", None), ("complete", "b+1", False), ("failed", None, None)]
    states.append(("running", None, None))
    runs = [
        RunRecord(i, 1, f"c{i}", 1000.0 + 86400 * i, f"s{i}", i, i, st, out, 2.0, 2.0, eq, False, 0)
        for i, (st, out, eq) in enumerate(states)
    ]
    c = chart([(w, runs)])
    assert [(m.fill, m.stroke, m.css) for m in c.marks] == [
        (PALETTE[0], PALETTE[0], "ok"),
        (PALETTE[1], PALETTE[1], "ok changed"),
        ("none", PALETTE[1], "failed"),
        ("none", "#999999", "pending"),
    ]
    assert [line.title for line in c.commits] == [f"c{i} s{i}" for i in range(4)]
    assert c.marks[0].x < c.marks[1].x < c.marks[2].x < c.marks[3].x
    assert len(c.runtime[0].points) == 4 and c.ticks
    assert chart([(w, [])]).empty


def test_public_surface() -> None:
    import warehouse.regol as regol

    assert set(regol.__all__) == {
        "REGOL_PRIORITY",
        "Bisect",
        "BisectRecord",
        "Commit",
        "Outcome",
        "RunRecord",
        "WatchRecord",
        "bisect_step",
        "changes",
    }
    assert all(hasattr(regol, name) for name in regol.__all__)
