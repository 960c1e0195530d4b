"""Pointing a run's output names (``--name-outputs``) at what it made."""

from __future__ import annotations

from typing import Protocol

from warehouse import catalog
from warehouse.errors import ConflictError, NotFoundError

__all__ = ["point_name"]

# Tries before giving up on a name that other writers keep moving.
_TRIES = 5


class Names(Protocol):
    def set_name(
        self, name: str, pdh: str, *, expect: str | None, create: bool = False
    ) -> catalog.NameRecord: ...

    def get_name(self, name: str) -> catalog.NameRecord: ...


def point_name(host: Names, name: str, pdh: str) -> None:
    """Point ``name`` at ``pdh`` by compare-and-swap, reading it again when
    another writer won; ConflictError if it kept changing."""
    for _ in range(_TRIES):
        try:
            current: str | None = host.get_name(name).pdh
        except NotFoundError:
            current = None
        if current == pdh:
            return
        try:
            host.set_name(name, pdh, expect=current)
            return
        except ConflictError:
            continue
    raise ConflictError(f"name {name!r} kept changing")
