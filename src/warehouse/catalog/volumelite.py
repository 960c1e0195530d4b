"""One row of ``volume_usage`` written through the standard library's
sqlite3 (docs/usage.md, "Per volume"): a process that read or wrote blocks
of an embedded warehouse and never loaded SQLAlchemy (a read, a step) does
not load it to close. The statements are those of ``volumeusage.record_taken``."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from warehouse.blocks.volumecounts import Taken
from warehouse.catalog.values import HEAD_REVISION

__all__ = ["record_taken_file"]

_LATEST = (
    "SELECT stored_bytes FROM volume_usage WHERE volume = ? AND stored_bytes IS NOT NULL "
    "ORDER BY at DESC, id DESC LIMIT 1"
)
_INSERT = (
    "INSERT INTO volume_usage (volume, at, stored_bytes, gets, puts, lists, deletes) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def record_taken_file(
    path: Path, volume: str, taken: Taken, held: Callable[[], int], at: float | None = None
) -> bool:
    """``record_taken`` on an embedded catalog's file through the standard
    library's sqlite3: a process that never opened SQLAlchemy (a step, a
    read) does not load it to close. False, and nothing written, when the
    file is not a catalog at ``HEAD_REVISION`` (the engine must migrate it)."""
    # isolation_level None: transactions are begun below, as the engine's are.
    conn = sqlite3.connect(path, timeout=60, isolation_level=None)
    try:
        try:
            version = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        except sqlite3.Error:
            return False
        if version is None or version[0] != HEAD_REVISION:
            return False
        if conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
            # A usage row need not be on disk before the command ends (the
            # catalog's own writes are, with FULL): no fsync at its commit, a
            # few ms of every read's close. WAL stays whole in a crash; the
            # row may be lost with the last moments before one.
            conn.execute("PRAGMA synchronous=NORMAL")
        known = conn.execute(_LATEST, (volume,)).fetchone() is not None
        walked = None if known else held()
        conn.execute("BEGIN IMMEDIATE")
        try:
            latest = conn.execute(_LATEST, (volume,)).fetchone()
            stored = walked if latest is None else int(latest[0]) + taken.added_bytes
            conn.execute(
                _INSERT,
                (
                    volume,
                    time.time() if at is None else at,
                    None if stored is None else max(0, stored),
                    taken.gets,
                    taken.puts,
                    taken.lists,
                    taken.deletes,
                ),
            )
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return True
    finally:
        conn.close()
