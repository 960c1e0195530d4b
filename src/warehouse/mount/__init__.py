"""``wh mount``: collections and names as a read-only FUSE file system
(DESIGN §4.5, docs/mount.md).

A high layer over the client: it reads through the ``Warehouse`` interface
(embedded, or a controller with the user's token, whose permissions apply
as they do to ``wh get``), so nothing below imports it. pyfuse3 and trio
(the ``[mount]`` extra) are imported only when a mount is made.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from warehouse.errors import WarehouseError
from warehouse.interface import Warehouse
from warehouse.mount._tree import Tree

__all__ = ["Tree", "mount"]


def mount(
    warehouse: Warehouse,
    mountpoint: Path,
    *,
    allow_other: bool = False,
    ready: Callable[[], None] | None = None,
) -> None:
    """Serve ``warehouse`` at ``mountpoint`` until it is unmounted
    (``fusermount3 -u``, SIGINT or SIGTERM); ``ready`` is called once the
    mount answers."""
    try:
        from warehouse.mount._fuse import serve
    except ImportError as e:
        raise WarehouseError(
            f"wh mount needs pyfuse3 (pip install 'warehouse[mount]', with libfuse3-dev): {e}"
        ) from None
    serve(Tree(warehouse), mountpoint, allow_other=allow_other, ready=ready)
