"""An embedded catalog's few hot reads through the standard library's sqlite3.

``wh name ls`` and ``wh ls NAME`` read two rows; SQLAlchemy's import and an
engine took most of their start (docs/latency.md). These reads run the same
statements the catalog's SQLAlchemy queries compile to on SQLite: a test
(tests/test_latency_imports.py) runs both on one catalog and compares. Only a
catalog at the newest schema is read so; anything else (no file yet, a
migration to run) goes the whole way, through ``catalog.upgrade``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from warehouse.catalog.values import HEAD_REVISION, NameRecord, check_name
from warehouse.errors import NotFoundError

__all__ = ["LiteCatalog"]

_NAME_COLUMNS = "name, pdh, version, owner, updated_at, updated_by"


class LiteCatalog:
    """Read-only statements on an existing SQLite catalog at ``HEAD_REVISION``."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    @classmethod
    def open(cls, path: Path) -> LiteCatalog | None:
        """The catalog at ``path`` if it exists and is current, else None."""
        if not path.is_file():
            return None
        # isolation_level None: no implicit transaction is left open; the
        # timeout is the engine's (a writer holding the file is waited for).
        conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
        try:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        except sqlite3.Error:
            row = None
        if row is None or row[0] != HEAD_REVISION:
            conn.close()
            return None
        return cls(conn)

    def close(self) -> None:
        self._conn.close()

    def get_name(self, name: str) -> NameRecord:
        check_name(name)
        sql = f"SELECT {_NAME_COLUMNS} FROM names WHERE names.name = ?"
        row = self._conn.execute(sql, (name,)).fetchone()
        if row is None:
            raise NotFoundError(f"no name {name!r}")
        return NameRecord(*row)

    def list_names(self, prefix: str = "") -> list[NameRecord]:
        # SQLite orders text by code point, as catalog.list_names asks of
        # every backend; substr, not LIKE, as there (LIKE ignores case).
        where: str = ""
        args: tuple[int | str, ...] = ()
        if prefix:
            where, args = "WHERE substr(names.name, 1, ?) = ? ", (len(prefix), prefix)
        sql = f"SELECT {_NAME_COLUMNS} FROM names {where}ORDER BY names.name"
        return [NameRecord(*r) for r in self._conn.execute(sql, args)]

    def manifest_blocks(self, pdh: str) -> str:
        """The locators of collection ``pdh``'s manifest (``get_collection``'s field)."""
        sql = "SELECT manifest_blocks FROM collections WHERE collections.pdh = ?"
        row = self._conn.execute(sql, (pdh,)).fetchone()
        if row is None:
            raise NotFoundError(f"no collection {pdh}")
        return str(row[0])
