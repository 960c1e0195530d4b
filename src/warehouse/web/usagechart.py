"""A job's usage on its page: the totals, and CPU against wall seconds per
level drawn on the server as SVG (docs/usage.md, docs/web.md)."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from warehouse.catalog.db import connect
from warehouse.catalog.schema import steps
from warehouse.usage import Usage, total

__all__ = ["UsageBar", "UsageChart", "job_usage_chart"]

WIDTH = 720
LABEL = 80  # room for "level N" on the left
ROW = 14  # one bar of wall seconds and one of CPU seconds a level: two rows


@dataclass(frozen=True, slots=True)
class UsageBar:
    y: int
    width: float
    css: str  # "wall" or "cpu"
    title: str


@dataclass(frozen=True, slots=True)
class UsageChart:
    total: Usage
    levels: list[tuple[int, Usage]]
    labels: list[tuple[int, str]]  # (y, text)
    bars: list[UsageBar]
    width: int = WIDTH
    label: int = LABEL

    @property
    def height(self) -> int:
        return max(len(self.levels) * 2 * ROW + 4, ROW)


def _levels(engine: sa.Engine, job_id: int, cpus: int) -> list[tuple[int, Usage]]:
    s = steps.c
    query = (
        sa.select(
            s.level,
            sa.func.count(s.wall_seconds),
            sa.func.coalesce(sa.func.sum(s.attempts), 0),
            sa.func.coalesce(sa.func.sum(s.cpu_seconds), 0.0),
            sa.func.coalesce(sa.func.sum(s.wall_seconds), 0.0),
            sa.func.coalesce(sa.func.max(s.peak_memory), 0),
            sa.func.coalesce(sa.func.sum(s.read_bytes), 0),
            sa.func.coalesce(sa.func.sum(s.written_bytes), 0),
        )
        .where(s.job == job_id, s.wall_seconds.is_not(None))
        .group_by(s.level)
        .order_by(s.level)
    )
    with connect(engine) as conn:
        rows = conn.execute(query).all()
    return [
        (
            int(level),
            Usage(int(n), int(tries), float(cpu), float(wall), float(wall) * cpus, *sizes),
        )
        for level, n, tries, cpu, wall, *sizes in rows
    ]


def job_usage_chart(engine: sa.Engine, job_id: int, cpus: int) -> UsageChart:
    """The job's measured usage, per level and in total (empty when none was measured)."""
    levels = _levels(engine, job_id, cpus)
    longest = max((max(u.wall_seconds, u.cpu_seconds) for _, u in levels), default=0.0)
    scale = (WIDTH - LABEL - 10) / longest if longest > 0 else 0.0
    labels, bars = [], []
    for i, (level, u) in enumerate(levels):
        y = 2 + i * 2 * ROW
        labels.append((y + ROW, f"level {level}"))
        each = f"level {level}, {u.steps} step{'s' if u.steps != 1 else ''}"
        bars.append(
            UsageBar(
                y,
                max(u.wall_seconds * scale, 1.0),
                "wall",
                f"{each}: {u.wall_seconds:.2f} wall seconds",
            )
        )
        bars.append(
            UsageBar(
                y + ROW,
                max(u.cpu_seconds * scale, 1.0),
                "cpu",
                f"{each}: {u.cpu_seconds:.2f} CPU seconds",
            )
        )
    return UsageChart(total(u for _, u in levels), levels, labels, bars)
