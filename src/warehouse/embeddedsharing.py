"""Groups, grants and the mode of an embedded warehouse (docs/permissions.md).

An embedded warehouse is one user's own: that user is its admin, so it may
share anything and set the mode. What it records here takes effect when a
controller serves the same catalog.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from warehouse.permissions import Grant, GroupRecord, Level, Mode, Perms, Principal

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = ["EmbeddedSharing"]

# The catalog's module is imported in each method: `wh` and `import warehouse`
# load no SQLAlchemy until a command needs it.


class EmbeddedSharing:
    """The sharing operations of ``Warehouse``, on the catalog itself."""

    user: str

    @property
    def engine(self) -> sa.Engine:
        raise NotImplementedError

    def _me(self) -> Principal:
        from warehouse.catalog import grants

        return grants.principal_of(self.engine, self.user, admin=True)

    def list_groups(self) -> list[GroupRecord]:
        from warehouse.catalog import grants

        return grants.list_groups(self.engine)

    def add_group(self, name: str) -> GroupRecord:
        from warehouse.catalog import grants

        return grants.add_group(self.engine, name, self._me())

    def add_group_member(self, group: str, user: str) -> None:
        from warehouse.catalog import grants

        grants.add_member(self.engine, group, user, self._me())

    def remove_group_member(self, group: str, user: str) -> None:
        from warehouse.catalog import grants

        grants.remove_member(self.engine, group, user, self._me())

    def share(self, key: str, who: str, level: Level) -> Grant:
        from warehouse.catalog import grants

        return grants.share(self.engine, key, who, level, self._me())

    def unshare(self, key: str, who: str) -> None:
        from warehouse.catalog import grants

        grants.unshare(self.engine, key, who, self._me())

    def perms(self, key: str) -> Perms:
        from warehouse.catalog import grants

        return grants.perms(self.engine, key, self._me())

    def permission_mode(self) -> Mode:
        from warehouse.catalog import grants

        return grants.get_mode(self.engine)

    def set_permission_mode(self, mode: Mode) -> None:
        from warehouse.catalog import grants

        grants.set_mode(self.engine, mode, self._me())
