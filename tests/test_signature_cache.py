"""The client's cache of signed locators (remote/signatures.py)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from warehouse.blocks import Locator
from warehouse.remote.signatures import SignatureCache


def test_a_cache_another_client_is_writing_as_it_opens_is_waited_for(tmp_path: Path) -> None:
    """Two clients started at once open the same fresh cache: the one that
    switches it to WAL needs the file to itself, and SQLite answers the
    other "database is locked" at once rather than after its busy timeout.
    It waits instead (two `wh put`s started together once failed so)."""
    opened = SignatureCache(tmp_path, "https://ctl", "token")
    path = next(tmp_path.glob("signatures-*.sqlite"))
    opened.close()
    path.unlink()
    for extra in tmp_path.glob("signatures-*"):
        extra.unlink()
    # The other client: a write under way on the fresh file, a moment long.
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE first (x)")
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO first VALUES (1)")
    done = threading.Timer(0.3, lambda: other.execute("COMMIT"))
    done.start()
    try:
        cache = SignatureCache(tmp_path, "https://ctl", "token")
    finally:
        done.join()
        other.close()
    md5 = "0" * 32
    signed = Locator.parse(f"{md5}+3+A{'1' * 40}@{0xFFFFFFFF:x}")
    cache.add(signed)
    assert cache.get(signed.key) == signed
    cache.close()
