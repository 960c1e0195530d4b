"""The keep server, ``wh keepd``: blocks over HTTP from local volumes (DESIGN §4.2).

``create_app(config)`` builds the ASGI app; ``run_keepd(options, announce)``
is what the command runs. See docs/keepd.md.
"""

from warehouse.server.keepd.app import KeepServer, create_app
from warehouse.server.keepd.auth import (
    ControllerTokenChecker,
    ControllerUnavailable,
    Principal,
    StaticTokenChecker,
    TokenChecker,
)
from warehouse.server.keepd.config import KeepConfig
from warehouse.server.keepd.controller import ControllerError
from warehouse.server.keepd.launch import KeepdOptions, run_keepd

__all__ = [
    "ControllerError",
    "ControllerTokenChecker",
    "ControllerUnavailable",
    "KeepConfig",
    "KeepServer",
    "KeepdOptions",
    "Principal",
    "StaticTokenChecker",
    "TokenChecker",
    "create_app",
    "run_keepd",
]
