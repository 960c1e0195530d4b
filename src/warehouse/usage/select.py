"""Which steps ``wh usage`` and ``wh cost`` sum, and per-job usage rows."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from warehouse.errors import UsageError
from warehouse.usage.model import Usage

__all__ = ["JobUsage", "Selection", "parse_since"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True, slots=True)
class Selection:
    """Steps of one job, of the jobs of one workflow run, of one user's jobs,
    and/or finished at or after ``since`` (seconds since the epoch); all
    given are required at once, none: every step."""

    job: int | None = None
    workflow: int | None = None
    user: str | None = None
    since: float | None = None

    def query(self) -> dict[str, Any]:
        """As the API's query parameters."""
        return {k: v for k, v in self.as_dict().items() if v is not None}

    def as_dict(self) -> dict[str, Any]:
        return {"job": self.job, "workflow": self.workflow, "user": self.user, "since": self.since}


@dataclass(frozen=True, slots=True)
class JobUsage:
    job: int
    user: str
    state: str
    cpus: int  # asked per step: ``usage.reserved_seconds`` is wall seconds times this
    usage: Usage

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "user": self.user,
            "state": self.state,
            "cpus": self.cpus,
            **self.usage.as_dict(),
        }

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> JobUsage:
        ids = (int(row["job"]), str(row["user"]), str(row["state"]), int(row["cpus"]))
        return cls(*ids, Usage.from_dict(row))


def parse_since(text: str, now: float | None = None) -> float:
    """``--since``: a time as seconds since the epoch, an ISO 8601 date or
    time (UTC unless it says otherwise), or a span back from now (``90m``,
    ``12h``, ``7d``, ``2w``)."""
    now = time.time() if now is None else now
    text = text.strip()
    span = re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw])", text)
    if span:
        return now - float(span.group(1)) * _UNITS[span.group(2)]
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if math.isfinite(value) and value >= 0:
            return value
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"since: {text[:50]!r} is no time (a date like 2026-12-01, "
            "an ISO time, seconds since 1970, or a span back such as 12h or 7d)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()
