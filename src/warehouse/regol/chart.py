"""The history chart, laid out for SVG (pure: records in, shapes out).

In the spirit of the Free Factories' Figure 6: time across (each run at its
commit's time), one row per watch; a filled mark is a run that succeeded, a
hollow one a run that failed (a grey ring: not finished yet); the colour
changes each time the output changed from the previous commit's. A dashed
vertical line stands at each commit, with its short hash and subject on
hover. Below it, the run-time chart on the same time axis.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from warehouse.regol.model import FINISHED
from warehouse.regol.values import RunRecord, WatchRecord

__all__ = ["PALETTE", "Chart", "CommitLine", "Mark", "Row", "RuntimeLine", "chart"]

WIDTH = 960
LABEL = 180  # room for the watch labels on the left
RIGHT = 44
ROW = 40
TOP = 14
AXIS = 26  # room for the time labels below
RUNTIME_HEIGHT = 150
RADIUS = 7

# Output versions of a row in turn (then again from the first); chosen to be
# told apart in print and by most colour-blind readers.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")
PENDING = "#999999"
LINE_COLOURS = ("#444444", "#1f77b4", "#d62728", "#2ca02c", "#9467bd")


@dataclass(frozen=True, slots=True)
class Mark:
    run: int
    commit: str
    x: float
    y: float
    fill: str  # a colour, or "none" (hollow)
    stroke: str
    css: str  # ok, failed or pending; "changed" added when the output changed
    title: str


@dataclass(frozen=True, slots=True)
class Row:
    watch: int
    label: str
    y: float


@dataclass(frozen=True, slots=True)
class CommitLine:
    commit: str
    x: float
    title: str


@dataclass(frozen=True, slots=True)
class RuntimeLine:
    watch: int
    colour: str
    points: list[tuple[float, float, str]]  # x, y, title

    @property
    def path(self) -> str:
        return " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in self.points)


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    label: int
    rows: list[Row]
    marks: list[Mark]
    commits: list[CommitLine]
    ticks: list[tuple[float, str]]
    runtime_height: int
    runtime: list[RuntimeLine]
    runtime_ticks: list[tuple[float, str]]  # (y, text)

    @property
    def empty(self) -> bool:
        return not self.marks


def _tick_format(span: float) -> str:
    return "%Y-%m-%d" if span > 3 * 86400 else "%m-%d %H:%M"


# Tick spacings to choose from: round minutes, hours, days, weeks, months.
_STEPS = (60, 300, 900, 3600, 3 * 3600, 6 * 3600, 86400, 2 * 86400, 7 * 86400, 30 * 86400)


def _times(t0: float, t1: float, most: int = 8) -> list[float]:
    """Round times (UTC) between t0 and t1 to label, at most ``most`` of them."""
    if t1 <= t0:
        return [t0]
    step = next((s for s in _STEPS if (t1 - t0) / s <= most), 365 * 86400)
    first = -(-t0 // step) * step
    return [first + k * step for k in range(int((t1 - first) // step) + 1)] or [t0]


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:.1f} s"


def _title(run: RunRecord) -> str:
    text = f"{run.commit[:10]} {run.subject}: {run.state}"
    if run.output_pdh:
        text += f", output {run.output_pdh}"
    if run.changed:
        text += " (changed)"
    if run.reused:
        text += " (reused)"
    if run.run_time is not None:
        text += f", {_seconds(run.run_time)}"
    return text


def chart(history: Sequence[tuple[WatchRecord, Sequence[RunRecord]]]) -> Chart:
    """Rows in the order given; each row's runs in commit order."""
    every = [r for _, runs in history for r in runs]
    body = TOP + ROW * max(len(history), 1)
    height = body + AXIS
    if not every:
        bare = [Row(w.id, w.label, TOP + ROW * i + ROW / 2) for i, (w, _) in enumerate(history)]
        return Chart(WIDTH, height, LABEL, bare, [], [], [], RUNTIME_HEIGHT, [], [])
    t0 = min(r.commit_time for r in every)
    t1 = max(r.commit_time for r in every)
    span = max(t1 - t0, 1.0)
    inner = WIDTH - LABEL - RIGHT - 2 * RADIUS

    def x_of(t: float) -> float:
        return LABEL + RADIUS + (t - t0) / span * inner if t1 > t0 else LABEL + RADIUS + inner / 2

    rows: list[Row] = []
    marks: list[Mark] = []
    lines: dict[str, CommitLine] = {}
    for i, (w, runs) in enumerate(history):
        y = TOP + ROW * i + ROW / 2
        rows.append(Row(w.id, w.label, y))
        version = 0
        for r in runs:
            if r.changed:
                version += 1
            colour = PALETTE[version % len(PALETTE)]
            x = x_of(r.commit_time)
            if r.state not in FINISHED:
                fill, stroke, css = "none", PENDING, "pending"
            elif r.state == "complete":
                fill, stroke, css = colour, colour, "ok"
            else:
                fill, stroke, css = "none", colour, "failed"
            if r.changed:
                css += " changed"
            marks.append(Mark(r.id, r.commit, x, y, fill, stroke, css, _title(r)))
            lines.setdefault(r.commit, CommitLine(r.commit, x, f"{r.commit[:10]} {r.subject}"))
    ticks = [(x_of(t), time.strftime(_tick_format(span), time.gmtime(t))) for t in _times(t0, t1)]
    timed = [r.run_time for r in every if r.run_time is not None]
    top = max(timed, default=1.0) or 1.0
    plot = RUNTIME_HEIGHT - TOP - AXIS

    def y_of(seconds: float) -> float:
        return TOP + plot - seconds / top * plot

    runtime = [
        RuntimeLine(
            w.id,
            LINE_COLOURS[i % len(LINE_COLOURS)],
            [
                (x_of(r.commit_time), y_of(r.run_time), f"{w.label}: {_title(r)}")
                for r in runs
                if r.run_time is not None
            ],
        )
        for i, (w, runs) in enumerate(history)
    ]
    runtime_ticks = [(y_of(top * k / 2), _seconds(top * k / 2)) for k in range(3)]
    return Chart(
        WIDTH,
        height,
        LABEL,
        rows,
        marks,
        sorted(lines.values(), key=lambda c: c.x),
        ticks,
        RUNTIME_HEIGHT,
        runtime,
        runtime_ticks,
    )
