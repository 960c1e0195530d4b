"""Groups, grants and the mode through a controller's API (docs/permissions.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from warehouse.catalog.values import check_account
from warehouse.errors import WarehouseError
from warehouse.keys import is_pdh

# The permission records load when a sharing call is made: every command
# through a controller has these methods, few use them (docs/latency.md).
if TYPE_CHECKING:
    from warehouse.permissions import Grant, GroupRecord, Level, Mode, Perms
    from warehouse.remote.api import ApiClient

__all__ = ["RemoteSharing", "grant_of", "perms_of"]


def _key(key: str) -> str:
    from warehouse.permissions import check_target

    return key if is_pdh(key) else check_target(key)


def _part(name: str) -> str:
    return quote(check_account(name), safe="")


def grant_of(row: Any) -> Grant:
    from warehouse.permissions import Grant, parse_level

    try:
        return Grant(
            str(row["target"]),
            str(row["grantee_kind"]),
            str(row["grantee"]),
            parse_level(str(row["level"])),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise WarehouseError(f"the controller answered a grant that is not one: {e}") from None


def perms_of(row: Any) -> Perms:
    from warehouse.permissions import Level, Perms, parse_mode

    try:
        return Perms(
            str(row["key"]),
            tuple((str(k), str(n)) for k, n in row["owners"]),
            tuple(grant_of(g) for g in row["grants"]),
            Level[str(row["level"]).upper()],
            parse_mode(str(row["mode"])),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise WarehouseError(f"the controller answered permissions that are not: {e}") from None


class RemoteSharing:
    """The sharing operations of ``Warehouse``, over ``/api/v1``."""

    api: ApiClient

    def list_groups(self) -> list[GroupRecord]:
        from warehouse.permissions import GroupRecord

        return [
            GroupRecord(str(g["name"]), str(g["owner"]), tuple(str(m) for m in g["members"]))
            for g in self.api.get("/groups")
        ]

    def add_group(self, name: str) -> GroupRecord:
        from warehouse.permissions import GroupRecord

        g = self.api.call_object("POST", "/groups", json={"name": check_account(name)})
        return GroupRecord(str(g["name"]), str(g["owner"]), tuple(str(m) for m in g["members"]))

    def add_group_member(self, group: str, user: str) -> None:
        self.api.post(f"/groups/{_part(group)}/members", {"user": check_account(user)})

    def remove_group_member(self, group: str, user: str) -> None:
        self.api.call("DELETE", f"/groups/{_part(group)}/members/{_part(user)}")

    def share(self, key: str, who: str, level: Level) -> Grant:
        body = {"key": _key(key), "who": check_account(who), "level": str(level)}
        return grant_of(self.api.post("/grants", body))

    def unshare(self, key: str, who: str) -> None:
        self.api.call("DELETE", "/grants", params={"key": _key(key), "who": check_account(who)})

    def perms(self, key: str) -> Perms:
        return perms_of(self.api.get("/perms", key=_key(key)))

    def permission_mode(self) -> Mode:
        from warehouse.permissions import parse_mode

        return parse_mode(str(self.api.call_object("GET", "/permission-mode")["mode"]))

    def set_permission_mode(self, mode: Mode) -> None:
        self.api.put("/permission-mode", {"mode": mode.value})
