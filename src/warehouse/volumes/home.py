"""Which volume an embedded warehouse home keeps its blocks in.

``$WH_VOLUME`` names it the first time; the home then records it in its
file ``volume`` (one line: the spec), so every process that opens the home
(a job manager started earlier, a step, the web pages) finds the same
blocks without being told, and a later ``$WH_VOLUME`` naming another volume
is refused instead of silently reading an empty one.
"""

from __future__ import annotations

import os
from pathlib import Path

from warehouse.errors import UsageError

__all__ = ["home_volume", "record_volume"]

RECORD = "volume"
_MAX = 4096


def _recorded(home: Path) -> str:
    try:
        with open(home / RECORD, encoding="utf-8") as f:
            return f.read(_MAX).strip()
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read {home / RECORD}: {e}") from None


def _has_blocks(home: Path) -> bool:
    try:
        with os.scandir(home / "blocks") as entries:
            return any(len(e.name) == 3 for e in entries)
    except (FileNotFoundError, NotADirectoryError):
        return False


def home_volume(home: Path, wanted: str) -> tuple[str, bool]:
    """The home's volume spec ("" for its own ``blocks/``), given the
    ``$WH_VOLUME`` of this process ("" when unset), and whether it is new
    (to ``record_volume`` once it has opened)."""
    recorded = _recorded(home)
    if not wanted or wanted == recorded:
        return recorded, False
    if recorded:
        raise UsageError(
            f"the warehouse {home} keeps its blocks in {recorded}, not {wanted}: "
            "unset WH_VOLUME, or give the same"
        )
    if _has_blocks(home):
        raise UsageError(
            f"the warehouse {home} already keeps blocks in {home / 'blocks'}: "
            "WH_VOLUME can only be chosen for a new warehouse"
        )
    return wanted, True


def record_volume(home: Path, spec: str) -> None:
    """Write the home's volume spec, atomically."""
    tmp = home / f".{RECORD}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(spec + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, home / RECORD)
