"""The catalog: collections, names and accounting in a relational database."""

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
    signing_key,
)
from warehouse.catalog.db import HEAD_REVISION, open_engine, upgrade
from warehouse.catalog.names import (
    NameChange,
    NameRecord,
    add_writer,
    check_name,
    get_name,
    list_names,
    name_log,
    set_name,
)
from warehouse.catalog.records import (
    AccountingRow,
    CollectionRecord,
    accounting,
    add_collection,
    get_collection,
    list_collections,
    record_block_writes,
)

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
    "create_token",
    "get_collection",
    "get_name",
    "get_user",
    "list_collections",
    "list_keep_services",
    "list_names",
    "list_users",
    "name_log",
    "open_engine",
    "record_block_writes",
    "register_keep_service",
    "set_name",
    "signing_key",
    "upgrade",
    "user_for_token",
]
