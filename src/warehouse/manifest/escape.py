"""Escaping of stream and file names inside manifest text.

Space separates tokens, ``:`` separates segment fields and ``\\`` starts an
escape, so those, and every control byte, are written as ``\\ooo`` (three
octal digits). Everything else, non-ASCII letters included, is written as
UTF-8 unchanged.
"""

from __future__ import annotations

import re

__all__ = ["escape_name", "unescape_name"]

_ESCAPES = {code: f"\\{code:03o}" for code in range(0o41)}
_ESCAPES[ord(":")] = "\\072"
_ESCAPES[ord("\\")] = "\\134"
_NEEDS_ESCAPE = re.compile(r"[\x00-\x20:\\]")

# A backslash, then (optionally) the three octal digits it must have; an
# escape without them is reported instead of being passed through.
_ESCAPE_SEQ = re.compile(rb"\\([0-7]{3})?")


def escape_name(name: str) -> str:
    """Write ``name`` the way it appears in a manifest."""
    if _NEEDS_ESCAPE.search(name) is None:
        return name
    return name.translate(_ESCAPES)


def unescape_name(text: str) -> str:
    """Undo :func:`escape_name`; raise ValueError saying what is wrong.

    Escapes are turned back into bytes before decoding, so a name another
    writer stored as escaped UTF-8 bytes (``\\303\\251`` for ``é``) reads the
    same as the raw letter.
    """
    if "\\" not in text:
        return text
    raw = text.encode("utf-8")
    out = bytearray()
    start = 0
    for match in _ESCAPE_SEQ.finditer(raw):
        digits = match.group(1)
        if digits is None:
            bad = raw[match.start() : match.start() + 4].decode("utf-8", "backslashreplace")
            raise ValueError(f"bad escape {bad!r}: want a backslash and three octal digits")
        value = int(digits, 8)
        if value > 0o377:
            raise ValueError(f"bad escape '\\{digits.decode()}': over \\377")
        out += raw[start : match.start()]
        out.append(value)
        start = match.end()
    out += raw[start:]
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError("escaped bytes are not valid UTF-8") from exc
