"""The exceptions the library raises, each tied to one CLI exit code.

The CLI maps an exception to its ``exit_code``; the library itself never
prints and never exits.
"""

from __future__ import annotations

__all__ = [
    "ConflictError",
    "CorruptDataError",
    "ForbiddenError",
    "NotFoundError",
    "UsageError",
    "WarehouseError",
]


class WarehouseError(Exception):
    """Base of every error the library raises on purpose."""

    exit_code = 1


class UsageError(WarehouseError, ValueError):
    """Bad input from the caller: a malformed manifest, locator, name or path."""

    exit_code = 2


class ConflictError(WarehouseError):
    """A compare-and-swap found something other than what the caller expected."""

    exit_code = 3


class NotFoundError(WarehouseError, KeyError):
    """A name, collection, block or path that does not exist."""

    exit_code = 4

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "not found"


class CorruptDataError(WarehouseError):
    """Stored bytes that do not match their digest."""

    exit_code = 5


class ForbiddenError(WarehouseError):
    """The caller may not do this (not the owner of a name, not an admin)."""

    exit_code = 6
