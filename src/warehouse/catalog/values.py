"""The catalog's records as plain values, and the rule for names.

No database library here: a client of a remote warehouse gets these records
from the controller's JSON and never needs SQLAlchemy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from warehouse.errors import UsageError

# The newest migration; checked against the migration scripts by a test, so a
# new script without this bump fails the suite. Here, with no database
# library, so that a read of a current catalog (catalog.lite) needs none.
HEAD_REVISION = "0023_cwl_output_files"

# What the catalog's listing row holds for a listing kept in parts (one row
# per piece in ``collection_listing_parts``, joined in order).
IN_PARTS = "{}"

__all__ = [
    "HEAD_REVISION",
    "IN_PARTS",
    "NAME_LIMIT",
    "AccountingRow",
    "CollectionRecord",
    "NameChange",
    "NameRecord",
    "check_account",
    "check_name",
    "check_writer",
]


@dataclass(frozen=True, slots=True)
class CollectionRecord:
    pdh: str
    manifest_blocks: str
    size: int
    file_count: int
    created_at: float
    created_by: str
    file_md5s: str | None = None
    # Its distinct blocks' bytes, as a user's put recorded it (the quota's).
    block_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class AccountingRow:
    user: str
    writes: int
    new_blocks: int
    bytes_written: int
    bytes_new: int


# Characters of a name, everywhere (CLI and API alike; docs/cli.md, "Keys").
NAME_LIMIT = 255
# A user's or a group's name is one segment; a name is segments joined by "/"
# (a name in a project: ``lab/run42``, docs/formats.md "Keys").
_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9._@+=-]*"
_ACCOUNT = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._@+=-]{{0,{NAME_LIMIT - 1}}}")
_NAME = re.compile(rf"{_SEGMENT}(/{_SEGMENT})*")
# Any case and with hints: a key shaped so is read as a PDH (keys.parse_key), so
# such a name could not be reached, and in capitals it passes for another PDH.
_LOOKS_LIKE_PDH = re.compile(r"[0-9a-f]{32}\+\d+(\+.*)?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class NameRecord:
    name: str
    pdh: str
    version: int
    owner: str
    updated_at: float
    updated_by: str


@dataclass(frozen=True, slots=True)
class NameChange:
    name: str
    version: int
    old_pdh: str | None
    new_pdh: str | None
    by: str
    at: float


def check_name(name: str) -> str:
    """``name`` if it may be a name: segments joined by "/" (a project's
    names, ``lab/run42``), the first not shaped like a PDH (a key starting
    so is read as one)."""
    if (
        len(name) > NAME_LIMIT
        or not _NAME.fullmatch(name)
        or _LOOKS_LIKE_PDH.fullmatch(name.partition("/")[0])
    ):
        raise UsageError(
            f"bad name {name!r}: use letters, digits and . _ @ + = - (starting with a letter "
            f"or digit, at most {NAME_LIMIT} characters, and not shaped like a PDH), "
            "in a project after '/' (lab/run42)"
        )
    return name


def check_account(name: str) -> str:
    """``name`` if it may be a user's or a group's name: a name of one
    segment (no "/": it is a path segment of the API's routes)."""
    if not _ACCOUNT.fullmatch(name) or _LOOKS_LIKE_PDH.fullmatch(name):
        raise UsageError(
            f"bad name {name!r}: use letters, digits and . _ @ + = - (starting with a letter "
            f"or digit, at most {NAME_LIMIT} characters, and not shaped like a PDH)"
        )
    return name


def check_writer(user: str) -> str:
    """``user`` if it may be a user's name (``wh user add`` checks the same):
    unchecked, ``..`` or ``a/b`` reached other routes through a controller."""
    try:
        return check_account(user)
    except UsageError as e:
        raise UsageError(str(e).replace("bad name", "bad user name", 1)) from None
