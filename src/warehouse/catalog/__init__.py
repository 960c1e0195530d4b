"""The catalog: collections, names and accounting in a relational database."""

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
    "NameChange",
    "NameRecord",
    "accounting",
    "add_collection",
    "add_writer",
    "check_name",
    "get_collection",
    "get_name",
    "list_collections",
    "list_names",
    "name_log",
    "open_engine",
    "record_block_writes",
    "set_name",
    "upgrade",
]
