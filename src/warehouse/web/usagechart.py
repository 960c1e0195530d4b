"""Usage on the pages, drawn on the server as SVG (docs/usage.md, docs/web.md):
a job's CPU against wall seconds per level; a run's jobs and a user's runs
as CPU, bytes and cost bars, priced by the site's table (``$WH_PRICES``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from decimal import Decimal

import sqlalchemy as sa

from warehouse.catalog.db import connect
from warehouse.catalog.schema import steps
from warehouse.errors import UsageError
from warehouse.jobs.usage import block_sums
from warehouse.usage import PriceTable, Usage, parse_prices, price, total

__all__ = [
    "CostChart",
    "CostRow",
    "UsageBar",
    "UsageChart",
    "cost_chart",
    "job_usage_chart",
    "site_prices",
]

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
            sa.func.coalesce(sa.func.sum(s.input_bytes), 0),
            *block_sums(),  # Usage's fields after input_bytes, in order
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


# -- Runs and users: CPU, bytes and cost per row ------------------------------

PRICES_ENV = "WH_PRICES"  # the price table the pages price with (docs/usage.md)
_MAX_TABLE = 1024 * 1024
_tables: dict[tuple[str, int], PriceTable] = {}


def site_prices() -> tuple[PriceTable | None, str]:
    """The pages' price table (``$WH_PRICES``), read again when the file
    changes; (None, why) when none is set or it is bad: a page then shows
    no cost, and why, rather than failing."""
    path = os.environ.get(PRICES_ENV)
    if not path:
        return None, f"no price table: set {PRICES_ENV} to one (docs/usage.md)"
    try:
        key = (path, os.stat(path).st_mtime_ns)
        if key not in _tables:
            with open(path, "rb") as f:
                data = f.read(_MAX_TABLE + 1)
            if len(data) > _MAX_TABLE:
                raise UsageError(f"{path}: over {_MAX_TABLE} bytes: no price table")
            _tables.clear()
            _tables[key] = parse_prices(data.decode("utf-8", "replace"), path)
        return _tables[key], ""
    except OSError as e:
        return None, f"{path}: cannot read the price table: {e.strerror}"
    except UsageError as e:
        return None, str(e)


@dataclass(frozen=True, slots=True)
class CostRow:
    """One row of a run or user chart: a job or a run, its usage and cost."""

    label: str
    href: str
    usage: Usage
    cost: Decimal | None


@dataclass(frozen=True, slots=True)
class CostChart:
    """Rows of three bars each (CPU seconds, bytes read and written, cost),
    each kind scaled to its largest on the chart."""

    rows: list[CostRow]
    bars: list[UsageBar]
    labels: list[tuple[int, str]]
    currency: str
    table: str
    why_no_cost: str
    total_cost: Decimal | None  # the rows' usage summed, then priced: as ``wh cost``
    width: int = WIDTH
    label: int = LABEL

    @property
    def height(self) -> int:
        return max(len(self.rows) * 3 * ROW + 4, ROW)

    @property
    def total(self) -> Usage:
        return total(r.usage for r in self.rows)



def cost_chart(rows: list[tuple[str, str, Usage]]) -> CostChart:
    """(label, link, usage) rows drawn as CPU, bytes and cost bars; each row
    priced alone by the site's table (hourly billing rounds each row up)."""
    table, why = site_prices()
    priced = [
        CostRow(label, href, u, price(u, table).total if table is not None else None)
        for label, href, u in rows
    ]
    room = WIDTH - LABEL - 10
    most_cpu = max((r.usage.cpu_seconds for r in priced), default=0.0)
    most_bytes = max((r.usage.input_bytes + r.usage.written_bytes for r in priced), default=0)
    most_cost = max((r.cost or Decimal(0) for r in priced), default=Decimal(0))
    bars, labels = [], []
    for i, r in enumerate(priced):
        y = 2 + i * 3 * ROW
        labels.append((y + ROW + ROW // 2, r.label))
        moved = r.usage.input_bytes + r.usage.written_bytes
        bars.append(
            UsageBar(
                y,
                max(r.usage.cpu_seconds / most_cpu * room if most_cpu else 0, 1.0),
                "cpu",
                f"{r.label}: {r.usage.cpu_seconds:.2f} CPU seconds",
            )
        )
        bars.append(
            UsageBar(
                y + ROW,
                max(moved / most_bytes * room if most_bytes else 0, 1.0),
                "bytes",
                f"{r.label}: {r.usage.input_bytes} bytes of warehouse files read, "
                f"{r.usage.written_bytes} bytes written",
            )
        )
        if r.cost is not None and table is not None:
            share = float(r.cost / most_cost) if most_cost else 0.0
            bars.append(
                UsageBar(
                    y + 2 * ROW,
                    max(share * room, 1.0),
                    "cost",
                    f"{r.label}: {r.cost:.6f} {table.currency} by {table.name}",
                )
            )
    return CostChart(
        priced,
        bars,
        labels,
        table.currency if table else "",
        table.name if table else "",
        why,
        price(total(r.usage for r in priced), table).total if table is not None else None,
    )
