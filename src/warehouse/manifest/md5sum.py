"""Checksum listings in the exact format of GNU ``md5sum``."""

from __future__ import annotations

__all__ = ["md5sum_line"]

_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r"})


def md5sum_line(md5hex: str, path: str) -> str:
    """``<md5>  <path>`` as md5sum prints it (no trailing newline).

    Like md5sum, a path holding a backslash, newline or carriage return is
    written escaped, and the line then starts with a backslash so that
    ``md5sum -c`` knows to unescape it.
    """
    if "\\" in path or "\n" in path or "\r" in path:
        return f"\\{md5hex}  {path.translate(_ESCAPES)}"
    return f"{md5hex}  {path}"
