"""Per volume: requests by kind and GB-months stored over a window, from
the catalog's ``volume_usage`` rows, and what they cost by a price table
(docs/usage.md, "Per volume"). Pure: the rows come from the caller.

Each row holds the requests counted since its writer's previous row, and
the bytes the volume held at its time (a sample; None if not known). The
bytes held are taken to stay as sampled until the next sample: GB-months
are that step function's integral over the window, in GB (10^9 bytes) and
months of 730 hours (as S3 bills).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from warehouse.usage.prices import CostLine, PriceTable

__all__ = [
    "MONTH_SECONDS",
    "VolumeRow",
    "VolumeUsage",
    "price_volumes",
    "summarize",
]

MONTH_SECONDS = 730 * 3600
_GB = 10**9
_KINDS = ("get", "put", "list", "delete")


@dataclass(frozen=True, slots=True)
class VolumeRow:
    volume: str
    at: float
    stored_bytes: int | None
    gets: int
    puts: int
    lists: int
    deletes: int


@dataclass(frozen=True, slots=True)
class VolumeUsage:
    volume: str
    gets: int
    puts: int
    lists: int
    deletes: int
    # The integral of the bytes held over the window, in byte-seconds
    # (whole), and the last sample of the bytes held (None: never sampled).
    byte_seconds: int
    stored_bytes: int | None

    @property
    def gb_months(self) -> Decimal:
        return Decimal(self.byte_seconds) / _GB / MONTH_SECONDS

    def requests(self, kind: str) -> int:
        return int(getattr(self, f"{kind}s"))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> VolumeUsage:
        stored = d["stored_bytes"]
        return cls(
            str(d["volume"]),
            int(d["gets"]),
            int(d["puts"]),
            int(d["lists"]),
            int(d["deletes"]),
            int(d["byte_seconds"]),
            None if stored is None else int(stored),
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "volume": self.volume,
            "gets": self.gets,
            "puts": self.puts,
            "lists": self.lists,
            "deletes": self.deletes,
            "stored_bytes": self.stored_bytes,
            "byte_seconds": self.byte_seconds,
            "gb_months": float(self.gb_months),
        }


def summarize(rows: Iterable[VolumeRow], since: float | None, now: float) -> list[VolumeUsage]:
    """Per volume (by name): the requests of the rows at ``since`` or later,
    and the integral from ``since`` (or the volume's first sample) to ``now``
    of the bytes held. ``rows`` may include samples from before ``since``:
    the last of them gives what was held when the window opened."""
    by_volume: dict[str, list[VolumeRow]] = {}
    for r in rows:
        by_volume.setdefault(r.volume, []).append(r)
    out = []
    for volume in sorted(by_volume):
        found = sorted(by_volume[volume], key=lambda r: r.at)
        inside = [r for r in found if since is None or r.at >= since]
        samples = [(r.at, r.stored_bytes) for r in found if r.stored_bytes is not None]
        out.append(
            VolumeUsage(
                volume,
                sum(r.gets for r in inside),
                sum(r.puts for r in inside),
                sum(r.lists for r in inside),
                sum(r.deletes for r in inside),
                _integral(samples, since, now),
                samples[-1][1] if samples else None,
            )
        )
    return [u for u in out if u.stored_bytes is not None or any(_counts(u))]


def _counts(u: VolumeUsage) -> tuple[int, ...]:
    return (u.gets, u.puts, u.lists, u.deletes)


def _integral(samples: list[tuple[float, int]], since: float | None, now: float) -> int:
    total = 0.0
    for i, (at, held) in enumerate(samples):
        end = samples[i + 1][0] if i + 1 < len(samples) else now
        start = at if since is None else max(at, since)
        if end > start:
            total += (end - start) * held
    return math.floor(total + 0.5)


def price_volumes(used: Iterable[VolumeUsage], table: PriceTable) -> list[CostLine]:
    """The volumes' storage (GB-months at the table's ``gb_month``) and
    their requests (per 1,000 of each kind the table prices), summed over
    the volumes; a kind the table does not price costs nothing and is
    still shown."""
    used = list(used)
    gb_months = sum((u.gb_months for u in used), Decimal(0))
    lines = [
        CostLine(
            "volume storage", gb_months, "GB-month", table.gb_month, gb_months * table.gb_month
        )
    ]
    for kind in _KINDS:
        n = sum(u.requests(kind) for u in used)
        per = table.per_1000_requests.get(kind, Decimal(0))
        thousands = Decimal(n) / 1000
        lines.append(
            CostLine(f"{kind} requests", thousands, "1,000 requests", per, thousands * per)
        )
    return lines
