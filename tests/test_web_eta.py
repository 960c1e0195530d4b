"""The job page's ETA, from the run times of finished steps."""

from __future__ import annotations

from warehouse.jobs.jobrecords import StepRecord
from warehouse.web.eta import eta_seconds
from warehouse.web.timeline import LABEL_CHARS, timeline


def test_eta_spreads_the_steps_left_over_the_running_slots() -> None:
    assert eta_seconds([], running=2, queued=5) is None  # nothing finished: no guess
    assert eta_seconds([10.0, 20.0], running=0, queued=0) is None  # nothing left
    assert eta_seconds([10.0, 20.0], running=0, queued=4) == 60.0
    # 2 running (half done on average) and 4 queued, 2 at a time: 5 steps' time / 2.
    assert eta_seconds([10.0], running=2, queued=4) == 25.0


def _step(number: int, text: str) -> StepRecord:
    return StepRecord(
        1,
        number,
        1,
        text,
        "done",
        1,
        0,
        0,
        100.0 + number,
        101.0 + number,
        "h",
        None,
        None,
        None,
        None,
    )


def test_timeline_labels_steps_by_their_input() -> None:
    long = "x" * (LABEL_CHARS + 10)
    drawn = timeline([_step(0, "chr1:1-1000"), _step(1, long)], now=200.0)
    assert [b.label for b in drawn.bars] == ["chr1:1-1000", "x" * (LABEL_CHARS - 1) + "…"]
    assert long in drawn.bars[1].title
