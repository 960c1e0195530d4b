"""Permission signatures on locators (DESIGN §3.4).

``+A<sig>@<expiry>`` with ``sig = hex(HMAC-SHA256(key, md5 "+" size "@"
token "@" expiryhex8 "@" ttlhex))``: a read capability for one block of one
size, bound to one token, until ``expiry`` (Unix seconds, 8 hex digits). The
TTL is part of the signed text so that a server configured with another TTL
refuses it; the size is, so that a signature for ``md5+16`` cannot vouch for
``md5+67108864`` (docs/formats.md).

Signatures made before the size was signed (``md5 "@" token ...``) are still
recognised until they expire, as ``Check.LEGACY``: good for reading a block
(a keep server checks the stored length anyway), but a size they carry must
be checked against the stored block before anyone records it.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import time

from warehouse.blocks.locator import Locator

__all__ = [
    "DEFAULT_SIGNATURE_TTL",
    "Check",
    "check_signature",
    "legacy_signature",
    "sign",
    "signature",
]

DEFAULT_SIGNATURE_TTL = 14 * 24 * 3600
# An expiry is written as 8 hex digits (Unix seconds up to 2106): 50 years
# keeps it there for decades to come.
MAX_SIGNATURE_TTL = 50 * 365 * 24 * 3600


class Check(enum.Enum):
    OK = "ok"
    MISSING = "missing"  # no +A hint: the caller must sign in (401)
    EXPIRED = "expired"  # a true signature whose time is up (403)
    BAD = "bad"  # made with another key or for another token (403)
    # True but of the old format, which did not sign the size: readable; a
    # recorder must check the size against what is stored.
    LEGACY = "legacy"


def signature(md5: str, size: int, token: str, expiry: int, key: bytes, ttl: int) -> str:
    text = f"{md5}+{size}@{token}@{expiry:08x}@{ttl:x}"
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def legacy_signature(md5: str, token: str, expiry: int, key: bytes, ttl: int) -> str:
    """The old format, without the size: only checked, never made."""
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
    sig = signature(locator.md5, locator.size, token, expiry, key, ttl)
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
    expiry = int(expiry_hex, 16)
    verdict = Check.OK
    if not hmac.compare_digest(sig, signature(locator.md5, locator.size, token, expiry, key, ttl)):
        if not hmac.compare_digest(sig, legacy_signature(locator.md5, token, expiry, key, ttl)):
            return Check.BAD
        verdict = Check.LEGACY
    if expiry < (time.time() if now is None else now):
        return Check.EXPIRED
    return verdict
