"""The exceptions the library raises, each tied to one CLI exit code.

The CLI maps an exception to its ``exit_code``; the library itself never
prints and never exits.
"""

from __future__ import annotations

import errno

__all__ = [
    "ConflictError",
    "CorruptDataError",
    "ForbiddenError",
    "NotFoundError",
    "UsageError",
    "WarehouseError",
    "disk_full",
    "os_error",
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


def os_error(error: OSError, what: str) -> WarehouseError:
    """The library error for an operating-system failure while doing ``what``.

    A permission refused is 6 like any other, a missing path 4, a symbolic
    link loop bad input (2); a full disk, a name too long and the rest are
    plain errors (1). The message is one line: ``what: reason``.
    """
    reason = error.strerror or str(error)
    message = f"{what}: {reason}"
    code = error.errno
    if code in (errno.EACCES, errno.EPERM):
        return ForbiddenError(message)
    if code == errno.ENOENT:
        return NotFoundError(message)
    if code == errno.ELOOP:
        return UsageError(message)
    return WarehouseError(message)


# SQLite's words for SQLITE_FULL; PostgreSQL's SQLSTATE for disk_full.
_FULL_WORDS = ("database or disk is full", "no space left on device", "disk quota exceeded")
_FULL_SQLSTATE = "53100"


def disk_full(error: BaseException) -> bool:
    """Whether ``error`` (an OSError, or a database's error, perhaps wrapped
    by SQLAlchemy as ``.orig``) says the disk or a quota is full."""
    for e in (error, getattr(error, "orig", None), error.__cause__):
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if e is not None and (
            getattr(e, "sqlstate", None) == _FULL_SQLSTATE
            or any(w in str(e).lower() for w in _FULL_WORDS)
        ):
            return True
    return False
