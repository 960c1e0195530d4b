"""Child processes that die with their parent, and a server id kept on disk.

``die_with_parent``: on Linux the kernel sends the child SIGTERM when the
parent thread that started it ends (``PR_SET_PDEATHSIG``), so a controller
killed with SIGKILL leaves no keep servers behind. Elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import secrets
import signal
import sys
from pathlib import Path

from warehouse.errors import UsageError

__all__ = ["PARENT_ENV", "die_with_parent", "server_id"]

PARENT_ENV = "WH_DIE_WITH_PARENT"  # the parent's pid, set by `wh serve`
_PR_SET_PDEATHSIG = 1
ID_FILE = "keep-server-id"
_ID = re.compile(r"keep-[0-9a-f]{15}")


def die_with_parent(parent: int) -> None:
    """Ask for SIGTERM when the parent dies; exit now if it already has."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        return  # only a safety net: the parent also stops its children
    if os.getppid() != parent:  # died before the request was made
        os.kill(os.getpid(), signal.SIGTERM)


def server_id(volume: Path) -> str:
    """This keep server's id, kept in its first volume so it survives restarts
    (and moves with the volume); made on first use.

    An empty file (a crash while it was made) gets a new id; any other text
    that is not an id is an error naming the file.
    """
    path = volume / ID_FILE
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        text = None
    if text == "":
        path.unlink(missing_ok=True)
    elif text is not None:
        if _ID.fullmatch(text) is None:
            raise UsageError(
                f"{path} holds no keep server id (keep-<15 hex digits>): "
                "remove it to give this server a new id"
            )
        return text
    sid = "keep-" + secrets.token_hex(8)[:15]
    tmp = path.with_name(f".{ID_FILE}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(sid + "\n")
        f.flush()
        os.fsync(f.fileno())  # never an empty id file after a crash
    try:
        os.link(tmp, path)  # first writer wins, atomically
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    fd = os.open(volume, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path.read_text().strip()
