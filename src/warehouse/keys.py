"""What a user may type to name data: ``<pdh>[/path]`` or ``<name>[/path]``.

A name may hold "/" (a name in a project: ``lab/run42``), so where a name
ends is known only to the catalog: ``split_key`` asks it, shortest first.
No name is a project above another name (the catalog refuses to make one),
so at most one prefix of a key is a name (docs/formats.md, "Keys").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from warehouse.errors import UsageError

__all__ = ["Key", "is_pdh", "name_candidates", "parse_key", "split_key"]

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


def name_candidates(text: str) -> list[Key]:
    """The ways ``text`` may split into a name and a path, shortest name first
    (one way for a PDH, or a key without "/")."""
    first = parse_key(text)
    if first.is_pdh or not first.path:
        return [first]
    parts = [first.head, *first.path.split("/")]
    return [Key("/".join(parts[:i]), "/".join(parts[i:])) for i in range(1, len(parts) + 1)]


def split_key(text: str, is_name: Callable[[str], bool]) -> Key:
    """``text`` split at the name it starts with: the first candidate
    ``is_name`` knows; else at its first "/" (``parse_key``), so a key naming
    nothing fails on its first segment as it did before names held "/"."""
    candidates = name_candidates(text)
    if len(candidates) > 1:
        for k in candidates:
            if is_name(k.head):
                return k
    return candidates[0]
