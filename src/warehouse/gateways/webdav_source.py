"""What the WebDAV gateway reads for one user: a controller's catalog and
block client, with the API's permission rules (docs/permissions.md).

In private mode a collection or name the user may not read is "not found",
worded as for one that does not exist, and ``list_names`` shows only the
names the user reads: as through the API (and so as ``wh mount`` through a
controller shows them).
"""

from __future__ import annotations

from warehouse import catalog
from warehouse.blocks.store import BlockStore
from warehouse.collection.records import load_stored_text, manifest_from_blocks
from warehouse.collection.storedtext import StoredText
from warehouse.errors import NotFoundError
from warehouse.keys import is_pdh
from warehouse.manifest import Manifest
from warehouse.server.controller import access
from warehouse.server.controller.state import ControllerState

__all__ = ["UserView"]


class UserView:
    """One user's view of a controller (a ``mount.Source``)."""

    def __init__(self, state: ControllerState, user: catalog.User) -> None:
        self.state = state
        self.user = user

    @property
    def store(self) -> BlockStore:
        # The controller's client: it verifies every block it reads.
        return self.state.keep()

    def require(self, pdh: str) -> None:
        """NotFoundError unless the user may read collection ``pdh`` now."""
        if not is_pdh(pdh):
            raise NotFoundError(f"{pdh!r} is not a collection's PDH")
        access.require_collection_read(self.state.engine, self.user, pdh)

    def stored_text(self, key: str) -> StoredText | None:
        self.require(key)
        return load_stored_text(self.store, self.state.engine, key, None)

    def manifest(self, key: str) -> Manifest:
        self.require(key)
        record = catalog.get_collection(self.state.engine, key)
        return manifest_from_blocks(self.store, key, record.manifest_blocks)

    def get_name(self, name: str) -> catalog.NameRecord:
        access.hide_name(self.state.engine, self.user, name)
        return catalog.get_name(self.state.engine, name)

    def list_names(self, prefix: str = "") -> list[catalog.NameRecord]:
        found = catalog.list_names(self.state.engine, prefix)
        shown = access.readable_names(self.state.engine, self.user, [r.name for r in found])
        return [r for r in found if r.name in shown]
