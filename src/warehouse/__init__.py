"""Free Factory's warehouse: content-addressed collections, names and batch jobs.

``import warehouse`` gives the same operations as the ``wh`` command::

    import warehouse
    with warehouse.open() as wh:
        result = wh.put([Path("data")], name="raw-data")
        for f in wh.get(result.pdh, Path("copy")):
            print(f.md5, f.path)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from warehouse.errors import (
    ConflictError,
    CorruptDataError,
    ForbiddenError,
    NotFoundError,
    UsageError,
    WarehouseError,
)
from warehouse.lazy import lazy_names

if TYPE_CHECKING:
    from warehouse.base import PutResult
    from warehouse.blocks import EMPTY_LOCATOR, MAX_BLOCK_SIZE, Locator, LocatorError
    from warehouse.collection.reader import CollectionReader
    from warehouse.embedded import EmbeddedWarehouse
    from warehouse.interface import Warehouse
    from warehouse.manifest import Manifest, ManifestError

__all__ = [
    "EMPTY_LOCATOR",
    "MAX_BLOCK_SIZE",
    "CollectionReader",
    "ConflictError",
    "CorruptDataError",
    "EmbeddedWarehouse",
    "ForbiddenError",
    "Locator",
    "LocatorError",
    "Manifest",
    "ManifestError",
    "NotFoundError",
    "PutResult",
    "UsageError",
    "Warehouse",
    "WarehouseError",
    "open",
    "workflow",
]


def open(
    home: Path | str | None = None,
    *,
    replication: int | None = None,
    min_copies: int | None = None,
) -> Warehouse:
    """The remote warehouse at ``$WH_URL`` (with ``$WH_TOKEN``) if set, else the
    embedded one in ``home`` (default ``$WH_HOME``, else ~/.local/share/warehouse).

    Settings come as for ``wh``: a variable, else the config file
    (``$XDG_CONFIG_HOME/warehouse/config.toml``); a bad one raises ``UsageError``.

    ``replication`` and ``min_copies`` apply to a remote warehouse's block writes.
    """
    from warehouse.settings import applied

    # The settings `wh` uses: the environment, then the config file, checked.
    applied()
    url = os.environ.get("WH_URL")
    if url and home is None:
        from warehouse.remote.warehouse import RemoteWarehouse
        from warehouse.settings import clusters

        return RemoteWarehouse(
            url,
            os.environ.get("WH_TOKEN", ""),
            replication=replication,
            min_copies=min_copies,
            clusters=clusters(),
        )
    from warehouse.embedded import EmbeddedWarehouse

    return EmbeddedWarehouse(None if home is None else Path(home))


def workflow(definition: Any, **options: Any) -> dict[str, Any]:
    """Build and run a workflow from a program (docs/workflows.md, "From Python")."""
    from warehouse.workflows.api import workflow as run_workflow

    return run_workflow(definition, **options)


# Every process of the package imports this file first (a keep server, a
# step, each command): the rest loads when first asked for, so that one
# that needs no collections does not pay for them (0.15 s of a keep
# server's start), nor a remote client for SQLAlchemy.
__getattr__ = lazy_names(
    __name__,
    {
        "PutResult": "base",
        "EMPTY_LOCATOR": "blocks",
        "MAX_BLOCK_SIZE": "blocks",
        "Locator": "blocks",
        "LocatorError": "blocks",
        "CollectionReader": "collection.reader",
        "EmbeddedWarehouse": "embedded",
        "Warehouse": "interface",
        "Manifest": "manifest",
        "ManifestError": "manifest",
    },
)
