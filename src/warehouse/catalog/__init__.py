"""The catalog: collections, names and accounting in a relational database.

Names load on first use: the records and the name rule (``values``) need no
database library, so a remote client reads them without importing SQLAlchemy
(a fifth of a second at every start).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from warehouse.lazy import lazy_names

if TYPE_CHECKING:
    from warehouse.catalog.auth import (
        User,
        add_user,
        create_token,
        get_user,
        list_users,
        user_for_token,
    )
    from warehouse.catalog.cluster import (
        KeepService,
        list_keep_services,
        register_keep_service,
        retire_keep_service,
        signing_key,
    )
    from warehouse.catalog.db import HEAD_REVISION, open_engine, upgrade
    from warehouse.catalog.names import (
        add_writer,
        conflict_message,
        get_name,
        list_names,
        list_writers,
        name_log,
        remove_name,
        remove_writer,
        set_name,
        split_key,
    )
    from warehouse.catalog.records import (
        accounting,
        add_collection,
        get_collection,
        list_collections,
        record_block_writes,
    )
    from warehouse.catalog.values import (
        AccountingRow,
        CollectionRecord,
        NameChange,
        NameRecord,
        check_name,
    )

# Where each public name lives (kept equal to __all__; a test checks).
_WHERE = {
    "User": "auth",
    "add_user": "auth",
    "create_token": "auth",
    "get_user": "auth",
    "list_users": "auth",
    "user_for_token": "auth",
    "KeepService": "cluster",
    "list_keep_services": "cluster",
    "register_keep_service": "cluster",
    "retire_keep_service": "cluster",
    "signing_key": "cluster",
    "HEAD_REVISION": "db",
    "open_engine": "db",
    "upgrade": "db",
    "add_writer": "names",
    "conflict_message": "names",
    "get_name": "names",
    "list_names": "names",
    "list_writers": "names",
    "name_log": "names",
    "remove_name": "names",
    "remove_writer": "names",
    "set_name": "names",
    "split_key": "names",
    "accounting": "records",
    "add_collection": "records",
    "get_collection": "records",
    "list_collections": "records",
    "record_block_writes": "records",
    "AccountingRow": "values",
    "CollectionRecord": "values",
    "NameChange": "values",
    "NameRecord": "values",
    "check_name": "values",
}

__all__ = [
    "HEAD_REVISION",
    "AccountingRow",
    "CollectionRecord",
    "KeepService",
    "NameChange",
    "NameRecord",
    "User",
    "accounting",
    "add_collection",
    "add_user",
    "add_writer",
    "check_name",
    "conflict_message",
    "create_token",
    "get_collection",
    "get_name",
    "get_user",
    "list_collections",
    "list_keep_services",
    "list_names",
    "list_users",
    "list_writers",
    "name_log",
    "open_engine",
    "record_block_writes",
    "register_keep_service",
    "remove_name",
    "remove_writer",
    "retire_keep_service",
    "set_name",
    "signing_key",
    "split_key",
    "upgrade",
    "user_for_token",
]


__getattr__ = lazy_names(__name__, _WHERE)
