"""Which keep servers to ask for a block, and in what order (DESIGN §4.3).

Pure functions: rendezvous hashing ranks every server by ``md5(block + id)``,
highest first, so each block has its own stable order and adding a server
moves only the blocks it now ranks first for.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "PREFERRED",
    "Service",
    "hinted_copies",
    "k_hint",
    "order_from_hint",
    "own_host_first",
    "probe_order",
]

PREFERRED = 8  # the first 8 servers of the order are a block's preferred positions


@dataclass(frozen=True, slots=True)
class Service:
    id: str
    url: str
    host: str = ""  # its host label from the controller's host map (docs/clusters.md)


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


def hinted_copies(hint: str | None, cluster: str) -> int | None:
    """How many servers a ``+K`` hint (without its K) of this cluster names (None: none)."""
    if not hint:
        return None
    mask_text, _, where = hint.partition("@")
    if where != cluster or not mask_text:
        return None
    try:
        mask = int(mask_text, 16) & ((1 << PREFERRED) - 1)
    except ValueError:
        return None
    return mask.bit_count() or None


def own_host_first(order: list[Service], copies: int, host: str) -> list[Service]:
    """Move the first server on ``host`` among the first ``copies`` of the order
    (those holding the block's copies) to the front: a step reads the copy on
    its own host when there is one, else in the order given."""
    if not host:
        return order
    local = next((s for s in order[: max(copies, 1)] if s.host == host), None)
    if local is None or local is order[0]:
        return order
    return [local, *(s for s in order if s is not local)]
