"""Signed locators this client was given, kept on disk between runs.

A later ``wh put`` of the same data then only checks (HEAD) that the copies
are still there instead of sending the bytes again. The file holds read
capabilities for one token, so it is private to the user (mode 0600) and
named after a hash of the controller URL and the token.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
import time
from pathlib import Path

from warehouse.blocks import Locator
from warehouse.sqlitewal import use_wal

__all__ = ["SignatureCache", "default_cache_dir"]

# A signature this close to its expiry is not worth trusting for a new collection.
MARGIN = 24 * 3600


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "warehouse"


class SignatureCache:
    def __init__(self, directory: Path, url: str, token: str) -> None:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        name = hashlib.sha256(f"{url}\n{token}".encode()).hexdigest()[:20]
        path = directory / f"signatures-{name}.sqlite"
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        os.close(fd)
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=30)
        use_wal(self._db)  # another client may be opening it too
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS signed (key TEXT PRIMARY KEY, locator TEXT, expiry INT)"
        )
        self._lock = threading.Lock()

    def get(self, key: str) -> Locator | None:
        with self._lock:
            row = self._db.execute(
                "SELECT locator FROM signed WHERE key = ? AND expiry > ?",
                (key, int(time.time()) + MARGIN),
            ).fetchone()
        return None if row is None else Locator.parse(row[0])

    def add(self, locator: Locator) -> None:
        hint = locator.hint("A")
        if hint is None:
            return
        expiry = int(hint.rpartition("@")[2], 16)
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO signed VALUES (?, ?, ?)",
                (locator.key, str(locator), expiry),
            )

    def close(self) -> None:
        self._db.close()
