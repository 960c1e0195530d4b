"""Damage done to stored files on purpose, as a disk would do it."""

from __future__ import annotations

import os
from pathlib import Path


def rot(path: Path) -> None:
    """One byte changed in place with the mtime kept, as bit rot would: the
    copy's verified mark still holds, so only a read that checks it sees it."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(10)
        byte = f.read(1)
        f.seek(10)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
