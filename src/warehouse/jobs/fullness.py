"""Whether the disk a step wrote its scratch and log to filled up under it.

A step that ignores its write errors (many programs do) may end well with
its log or output cut short: the manager would call that job complete. So a
step that ends with its disk full fails, saying so (docs/jobs.md).
"""

from __future__ import annotations

import os

__all__ = ["ROOM", "disk_full"]

# Less room than one ordinary write (64 KiB) left: the disk counts as full.
ROOM = 64 << 10


def disk_full(path: str) -> str | None:
    """Why the step whose directory is ``path`` fails, its disk being full;
    None while there is room (or the disk cannot be asked)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    left = st.f_bavail * st.f_frsize
    if left >= ROOM:
        return None
    return (
        f"the disk holding the step's scratch and log is full ({left} bytes left): "
        "what it wrote may be cut short"
    )
