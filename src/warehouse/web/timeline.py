"""When each step ran, drawn as SVG: one bar per step on a shared time axis."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from warehouse.jobs.jobrecords import StepRecord

__all__ = ["Bar", "Timeline", "timeline"]

WIDTH = 900
LABEL = 200  # room for the steps' input strings on the left
LABEL_CHARS = 30  # longer inputs are cut (the bar's title holds the whole string)
ROW = 12


@dataclass(frozen=True, slots=True)
class Bar:
    number: int
    label: str  # the step's input string, cut to LABEL_CHARS
    y: int
    x: float
    width: float
    css: str  # done, failed, running or other
    title: str


@dataclass(frozen=True, slots=True)
class Timeline:
    bars: list[Bar]
    width: int
    height: int
    label: int
    span: float  # seconds from the first start to the last end
    ticks: list[tuple[float, str]]  # (x, text)


def _css(state: str) -> str:
    return state if state in ("done", "failed", "running") else "other"


def timeline(steps: Sequence[StepRecord], now: float | None = None) -> Timeline:
    """Bars for the steps that started; a running step's bar reaches ``now``."""
    now = time.time() if now is None else now
    started = [s for s in steps if s.started_at is not None]
    if not started:
        return Timeline([], WIDTH, ROW, LABEL, 0.0, [])
    t0 = min(s.started_at for s in started if s.started_at is not None)
    ends = [s.finished_at if s.finished_at is not None else now for s in started]
    span = max(max(ends) - t0, 1e-3)
    scale = (WIDTH - LABEL - 10) / span
    bars = []
    for row, (s, end) in enumerate(zip(started, ends, strict=True)):
        assert s.started_at is not None
        x = LABEL + (s.started_at - t0) * scale
        width = max((end - s.started_at) * scale, 1.0)
        title = (
            f"step {s.number} ({s.input}): {s.state}, {end - s.started_at:.2f} s,"
            f" on {s.host or '?'}"
        )
        label = s.input if len(s.input) <= LABEL_CHARS else s.input[: LABEL_CHARS - 1] + "…"
        bars.append(Bar(s.number, label, 4 + row * ROW, x, width, _css(s.state), title))
    ticks = [(LABEL + i * (WIDTH - LABEL - 10) / 4, f"{i * span / 4:.1f} s") for i in range(5)]
    return Timeline(bars, WIDTH, 24 + len(bars) * ROW, LABEL, span, ticks)
