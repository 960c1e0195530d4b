"""Which keep servers to ask for a block, and in what order (DESIGN §4.3).

Pure functions: rendezvous hashing ranks every server by ``md5(block + id)``,
highest first, so each block has its own stable order and adding a server
moves only the blocks it now ranks first for.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PREFERRED", "Service", "k_hint", "order_from_hint", "probe_order"]

PREFERRED = 8  # the first 8 servers of the order are a block's preferred positions


@dataclass(frozen=True, slots=True)
class Service:
    id: str
    url: str


def probe_order(md5: str, services: Sequence[Service]) -> list[Service]:
    return sorted(
        services, key=lambda s: hashlib.md5((md5 + s.id).encode()).hexdigest(), reverse=True
    )


def k_hint(positions: Sequence[int], cluster: str) -> str:
    """``K<mask>@cluster``: bit i set when the i-th preferred server holds a copy."""
    mask = sum(1 << p for p in positions if p < PREFERRED)
    return f"K{mask:02x}@{cluster}"


def order_from_hint(order: list[Service], hint: str | None, cluster: str) -> list[Service]:
    """Move the servers a ``+K`` hint names to the front (the hint without its ``K``)."""
    if not hint:
        return order
    mask_text, _, where = hint.partition("@")
    if where != cluster or not mask_text:
        return order
    try:
        mask = int(mask_text, 16)
    except ValueError:
        return order
    first = [s for i, s in enumerate(order[:PREFERRED]) if mask >> i & 1]
    return first + [s for s in order if s not in first]
