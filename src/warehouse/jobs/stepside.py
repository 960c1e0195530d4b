"""The embedded warehouse as a step sees it: reads through the standard library.

A step of an embedded warehouse reads a few rows of the catalog (its input's
manifest locators, the user's listing, earlier steps' intermediate
fragments). Opening the catalog the usual way loads SQLAlchemy and checks the
migrations, which under load cost a step more than its work; here those rows
are read with ``sqlite3`` over a read-only connection, and the full catalog
opens only if something else asks for it (``engine``). The manager that
started the step has already brought the catalog up to date.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from urllib.parse import quote

from warehouse.catalog.values import IN_PARTS
from warehouse.collection.listings import parse_listing
from warehouse.collection.records import manifest_from_blocks
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import NotFoundError, WarehouseError
from warehouse.manifest import Manifest

__all__ = ["StepWarehouse"]

_TIMEOUT = 60.0  # seconds a read waits for a writer, as the catalog's own connections


class StepWarehouse(EmbeddedWarehouse):
    open_catalog_at_once = False

    def _db(self) -> closing[sqlite3.Connection]:
        path = (self.home / "warehouse.db").resolve()
        try:
            conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=_TIMEOUT)
        except sqlite3.Error as e:
            raise WarehouseError(f"cannot open the catalog {path}: {e}") from None
        return closing(conn)

    def _collection(self, pdh: str) -> tuple[Manifest, dict[str, str] | None]:
        try:
            with self._db() as conn:
                row = conn.execute(
                    "SELECT manifest_blocks FROM collections WHERE pdh = ?", (pdh,)
                ).fetchone()
                found = conn.execute(
                    'SELECT file_md5s FROM collection_listings WHERE pdh = ? AND "user" = ?',
                    (pdh, self.user),
                ).fetchone()
                listing = None if found is None else str(found[0])
                if listing == IN_PARTS:  # a long listing (catalog.records.get_listing)
                    parts = conn.execute(
                        "SELECT text FROM collection_listing_parts"
                        ' WHERE pdh = ? AND "user" = ? ORDER BY part',
                        (pdh, self.user),
                    ).fetchall()
                    listing = "".join(str(text) for (text,) in parts) or listing
        except sqlite3.Error as e:
            raise WarehouseError(f"cannot read the catalog: {e}") from None
        if row is None:
            raise NotFoundError(f"no collection {pdh}")
        manifest = manifest_from_blocks(self.store, pdh, str(row[0]))
        return manifest, parse_listing(listing)

    def intermediates(self, job: int, level: int) -> list[tuple[int, str]]:
        """(step number, fragment) of the steps of ``job`` at ``level`` that passed one."""
        try:
            with self._db() as conn:
                rows = conn.execute(
                    "SELECT number, intermediate FROM steps WHERE job = ? AND level = ?"
                    " ORDER BY number",
                    (job, level),
                ).fetchall()
        except sqlite3.Error as e:
            raise WarehouseError(f"cannot read the catalog: {e}") from None
        return [(int(n), str(text)) for n, text in rows if text]
