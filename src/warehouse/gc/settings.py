"""GC's retention settings, kept in the catalog's ``settings`` table.

| key | default | meaning |
|---|---|---|
| ``gc.history_retention`` | 30 days | a PDH a name held this recently stays a root |
| ``gc.job_retention`` | 90 days | a job finished this recently keeps its input, output, log |
| ``gc.signature_ttl`` | 14 days | an unreferenced block younger than this is kept |
| ``gc.trash_lifetime`` | 14 days | a trashed block is removed after this |

Values are seconds. On a remote installation the signature TTL and the trash
lifetime belong to the controller's and keep servers' configuration; the
two retentions come from here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import sqlalchemy as sa

from warehouse.blocks.signing import DEFAULT_SIGNATURE_TTL
from warehouse.blocks.volume import DEFAULT_TRASH_LIFETIME
from warehouse.catalog.db import connect, write
from warehouse.catalog.schema import settings as settings_table
from warehouse.errors import UsageError

__all__ = ["DAY", "GcSettings", "load_settings", "parse_duration", "save_settings"]

DAY = 24 * 3600.0
_PREFIX = "gc."
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY, "w": 7 * DAY}
# A thousand years is "forever" for any of these; beyond it a deadline no
# longer fits a trashed block's file name, a JSON number or a timestamp.
MAX_DURATION = 1000 * 365 * DAY


@dataclass(frozen=True, slots=True)
class GcSettings:
    history_retention: float = 30 * DAY
    job_retention: float = 90 * DAY
    signature_ttl: float = float(DEFAULT_SIGNATURE_TTL)
    trash_lifetime: float = DEFAULT_TRASH_LIFETIME


FIELDS = tuple(f.name for f in dataclasses.fields(GcSettings))


def parse_duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``15m``, ``12h``, ``30d`` or ``2w``."""
    t = text.strip().lower()
    unit = _UNITS.get(t[-1:])
    number = t[:-1] if unit is not None else t
    try:
        value = float(number) * (unit or 1.0)
    except ValueError:
        value = math.nan
    if math.isnan(value):  # also "nan" itself, which float() takes
        raise UsageError(f"not a duration: {text!r} (use e.g. 3600, 90s, 15m, 12h, 30d, 2w)")
    if value < 0:
        raise UsageError(f"a duration must not be negative: {text!r}")
    if value > MAX_DURATION:
        raise UsageError(f"a duration must be at most 1000 years: {text!r}")
    return value


def load_settings(engine: sa.Engine) -> GcSettings:
    """The stored settings, defaults for those never set."""
    query = sa.select(settings_table.c.key, settings_table.c.value).where(
        settings_table.c.key.in_([_PREFIX + f for f in FIELDS])
    )
    with connect(engine) as conn:
        stored = {k.removeprefix(_PREFIX): float(v) for k, v in conn.execute(query)}
    return GcSettings(**stored)


def save_settings(engine: sa.Engine, changes: dict[str, float]) -> GcSettings:
    """Store some settings (by field name) and return them all."""
    for key, value in changes.items():
        if key not in FIELDS:
            raise UsageError(f"no GC setting {key!r} (there are: {', '.join(FIELDS)})")
        if not 0 <= value <= MAX_DURATION:  # also refuses NaN
            raise UsageError(f"{key} must be 0 to {MAX_DURATION:.0f} seconds (1000 years)")
    with write(engine) as conn:
        for key, value in changes.items():
            conn.execute(settings_table.delete().where(settings_table.c.key == _PREFIX + key))
            conn.execute(settings_table.insert().values(key=_PREFIX + key, value=repr(value)))
    return load_settings(engine)
