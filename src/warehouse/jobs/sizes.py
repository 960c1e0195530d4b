"""Sizes as people write them (``4G``, ``512MiB``) for a job's resources
and a MapReduce's splits: here, apart from submitting, so that reading a
size loads no database library."""

from __future__ import annotations

import re

from warehouse.errors import UsageError

__all__ = ["parse_size"]

_SIZE = re.compile(r"(\d+)\s*([kmgt]?)(i?b?)", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``4G``, ``512MiB``, ``1000000`` → bytes (K, M, G, T are powers of 1024)."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise UsageError(f"bad size {text!r} (like 512M or 4G)")
    power: int = " kmgt".index(m.group(2).lower() or " ")
    return int(m.group(1)) * 1024**power  # type: ignore[no-any-return]
