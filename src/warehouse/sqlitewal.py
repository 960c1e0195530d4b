"""SQLite files in WAL mode, switched safely when several open them at once."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

__all__ = ["use_wal"]


def use_wal(cur: Any) -> None:
    """Switch a new database file to WAL through ``cur`` (a DB-API cursor or
    connection); it stays so (the mode is kept in the file).

    Two processes or threads opening a fresh file at once both try: the
    switch needs the database to itself and SQLite reports "locked" at once
    rather than waiting its busy timeout, so the loser retries until the
    winner is done.
    """
    deadline = time.monotonic() + 30
    while True:
        try:
            if cur.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
