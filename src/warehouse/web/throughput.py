"""The cluster page's throughput over the last hour, drawn on the server as SVG.

Two bar charts of one bar a minute, from the catalog: bytes of blocks written
(the accounting rows) and job steps finished. Nothing is sampled between page
views, so any page view, by anyone, shows the same hour.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import sqlalchemy as sa

from warehouse.catalog.db import connect
from warehouse.catalog.schema import block_writes, jobs, steps
from warehouse.jobs.model import DONE, FAILED
from warehouse.web.pages import human_size

__all__ = ["MINUTES", "Bar", "Chart", "bucket", "charts", "draw", "recent"]

MINUTES = 60
MAX_ROWS = 500_000  # rows read per chart: a page view stays bounded on a busy hour
WIDTH = 720
HEIGHT = 110
LEFT = 64  # room for the scale's labels
BOTTOM = 20  # room for the time labels


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    value: float
    title: str


@dataclass(frozen=True)
class Chart:
    title: str
    css: str
    total: float
    peak: float
    bars: tuple[Bar, ...]
    ticks: tuple[tuple[float, str], ...]  # (x, label) along the time axis
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    bottom: int = BOTTOM


def bucket(
    events: Iterable[tuple[float, float]], now: float, minutes: int = MINUTES
) -> list[float]:
    """Sum ``(time, amount)`` events into one value a minute; the last ends at ``now``."""
    start = now - minutes * 60
    out = [0.0] * minutes
    for at, amount in events:
        if start <= at <= now:
            out[min(int((at - start) // 60), minutes - 1)] += amount
    return out


def draw(
    title: str, css: str, values: list[float], now: float, label: str, show: Callable[[float], str]
) -> Chart:
    """Bars for ``values`` (oldest first); ``show`` turns a value into text."""
    n = len(values)
    peak = max(values, default=0.0)
    inner_w = WIDTH - LEFT - 8
    inner_h = HEIGHT - BOTTOM - 8
    step = inner_w / max(n, 1)
    bars = []
    for i, v in enumerate(values):
        h = 0.0 if peak <= 0 else max(1.0, inner_h * v / peak) if v > 0 else 0.0
        minute = now - (n - i) * 60
        clock = time.strftime("%H:%M", time.gmtime(minute))
        bars.append(
            Bar(
                x=LEFT + i * step + 0.5,
                y=8 + inner_h - h,
                width=max(step - 1.0, 1.0),
                height=h,
                value=v,
                title=f"{clock} UTC: {show(v)} {label}",
            )
        )
    ticks = tuple(
        (LEFT + (n - ago) * step, "now" if ago == 0 else f"-{ago} min")
        for ago in (60, 45, 30, 15, 0)
        if ago <= n
    )
    return Chart(title, css, sum(values), peak, tuple(bars), ticks)


def recent(engine: sa.Engine, now: float, user: str | None) -> tuple[list[float], list[float]]:
    """Bytes written and steps finished per minute over the last hour (``user``: theirs only)."""
    start = now - MINUTES * 60
    writes = sa.select(block_writes.c.at, block_writes.c.size).where(block_writes.c.at >= start)
    done = (
        sa.select(steps.c.finished_at, sa.literal(1))
        .where(steps.c.finished_at >= start)
        .where(steps.c.state.in_((DONE, FAILED)))
    )
    if user is not None:
        writes = writes.where(block_writes.c.user == user)
        done = done.join(jobs, jobs.c.id == steps.c.job).where(jobs.c.submitted_by == user)
    with connect(engine) as conn:
        wrote = conn.execute(writes.limit(MAX_ROWS)).all()
        finished = conn.execute(done.limit(MAX_ROWS)).all()
    return (
        bucket(((float(a), float(s)) for a, s in wrote), now),
        bucket(((float(a), 1.0) for a, _ in finished), now),
    )


def charts(engine: sa.Engine, user: str | None) -> list[Chart]:
    """The two charts of the cluster page (``user``: only what they wrote and ran)."""
    now = time.time()
    wrote, finished = recent(engine, now, user)
    return [
        draw("Bytes written per minute", "bytes-chart", wrote, now, "written", _bytes),
        draw("Job steps finished per minute", "steps-chart", finished, now, "steps", _count),
    ]


def _bytes(v: float) -> str:
    return human_size(int(v))


def _count(v: float) -> str:
    return str(int(v))
