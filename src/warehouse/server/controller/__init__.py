"""The controller (``wh serve``): the JSON API over the catalog and keep servers."""

from warehouse.server.controller.app import create_app
from warehouse.server.controller.state import ControllerConfig, ControllerState

__all__ = ["ControllerConfig", "ControllerState", "create_app"]
