"""What a user may type to name data: ``<pdh>[/path]`` or ``<name>[/path]``."""

from __future__ import annotations

import re
from dataclasses import dataclass

from warehouse.errors import UsageError

__all__ = ["Key", "is_pdh", "parse_key"]

_PDH = re.compile(r"[0-9a-f]{32}\+(0|[1-9][0-9]{0,14})")


def is_pdh(text: str) -> bool:
    return _PDH.fullmatch(text) is not None


@dataclass(frozen=True, slots=True)
class Key:
    head: str  # a PDH or a name
    path: str  # "" for the whole collection, else "dir/file" without leading "/"

    @property
    def is_pdh(self) -> bool:
        return is_pdh(self.head)


def parse_key(text: str) -> Key:
    """Split ``KEY[/sub/path]``; a PDH may carry hints (``+A…``), which are dropped."""
    head, _, path = text.partition("/")
    if not head:
        raise UsageError(f"no collection key or name in {text!r}")
    if re.fullmatch(r"[0-9a-f]{32}\+\d+(\+\S*)?", head):
        head = "+".join(head.split("+")[:2])
        if not is_pdh(head):
            raise UsageError(f"bad portable data hash {text!r}")
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise UsageError(f"path {path!r} may not contain '.' or '..' components")
    return Key(head, "/".join(parts))
