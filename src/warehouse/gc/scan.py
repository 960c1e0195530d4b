"""Find block hashes in manifest text without parsing whole manifests.

A manifest line is ``streamname locator… segment…``. A stream name starts
with ``.``, a segment is ``position:length:name`` and names never hold a
space or a newline (they are escaped), so a token that starts right after a
space or a line start and reads ``<32 hex>+<digits>`` followed by a hint, a
space or the line end is a locator and nothing else is. The scan runs in
the ``re`` engine over the raw bytes: no ``Manifest`` objects are built.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from warehouse.blocks.locator import EMPTY_MD5

__all__ = ["block_md5s", "locator_keys", "update_md5s"]

# md5 preceded by a line start or a space, then +size, then a hint, space or line end.
_LOCATOR = re.compile(rb"(?:^|(?<= ))([0-9a-f]{32})\+[0-9]+(?=[+ \n]|$)", re.MULTILINE)
_KEY = re.compile(r"(?:^|(?<= ))([0-9a-f]{32}\+[0-9]+)(?=[+ \n]|$)", re.MULTILINE)


def update_md5s(found: set[str], text: bytes) -> set[str]:
    """Add the hash of every block ``text`` (manifest lines) lists to ``found``.

    The empty block is never stored, so it is never added.
    """
    found.update(m.decode() for m in _LOCATOR.findall(text))
    found.discard(EMPTY_MD5)
    return found


def block_md5s(texts: Iterable[bytes]) -> set[str]:
    """The hashes of every block the manifest texts list."""
    found: set[str] = set()
    for text in texts:
        update_md5s(found, text)
    return found


def locator_keys(text: str) -> list[str]:
    """``md5+size`` of every locator in ``text``, in order (hints dropped)."""
    return _KEY.findall(text)
