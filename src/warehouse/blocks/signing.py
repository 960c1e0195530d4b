"""Permission signatures on locators (DESIGN §3.4).

``+A<sig>@<expiry>`` with ``sig = hex(HMAC-SHA256(key, md5 "@" token "@"
expiryhex8 "@" ttlhex))``: a read capability for one block, bound to one
token, until ``expiry`` (Unix seconds, 8 hex digits). The TTL is part of the
signed text so that a server configured with another TTL refuses it.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import time

from warehouse.blocks.locator import Locator

__all__ = ["DEFAULT_SIGNATURE_TTL", "Check", "check_signature", "sign", "signature"]

DEFAULT_SIGNATURE_TTL = 14 * 24 * 3600


class Check(enum.Enum):
    OK = "ok"
    MISSING = "missing"  # no +A hint: the caller must sign in (401)
    EXPIRED = "expired"  # a true signature whose time is up (403)
    BAD = "bad"  # made with another key or for another token (403)


def signature(md5: str, token: str, expiry: int, key: bytes, ttl: int) -> str:
    text = f"{md5}@{token}@{expiry:08x}@{ttl:x}"
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def sign(
    locator: Locator,
    token: str,
    key: bytes,
    ttl: int = DEFAULT_SIGNATURE_TTL,
    now: float | None = None,
) -> Locator:
    """The locator with a fresh signature for ``token`` (any old one replaced)."""
    expiry = int(time.time() if now is None else now) + ttl
    sig = signature(locator.md5, token, expiry, key, ttl)
    return locator.with_hint(f"A{sig}@{expiry:08x}")


def check_signature(
    locator: Locator,
    token: str,
    key: bytes,
    ttl: int = DEFAULT_SIGNATURE_TTL,
    now: float | None = None,
) -> Check:
    hint = locator.hint("A")
    if hint is None:
        return Check.MISSING
    sig, _, expiry_hex = hint.partition("@")
    expected = signature(locator.md5, token, int(expiry_hex, 16), key, ttl)
    if not hmac.compare_digest(sig, expected):
        return Check.BAD
    if int(expiry_hex, 16) < (time.time() if now is None else now):
        return Check.EXPIRED
    return Check.OK
