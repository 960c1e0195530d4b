"""Files and directories only their owner may read (docs/security.md, "File modes").

Catalogs (which hold token hashes and the blob signing key) are created 0600,
warehouse homes and keep volumes 0700, whatever the umask: a mode given to
``open``/``mkdir`` can only lose bits to the umask, never gain them. One made
looser by an older version is tightened when opened, if it is ours.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

__all__ = ["private_dir", "private_file", "private_sqlite"]


def _tighten(path: str | Path, mode: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        st = os.stat(path, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid():
            return  # a link's target, or someone else's file, is left as it is
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(path, stat.S_IMODE(st.st_mode) & mode)


def private_dir(path: Path) -> Path:
    """``path`` as a directory only we may enter (its missing parents get the usual mode)."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError:  # mkdir's own words ("File exists") for a file there
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path)) from None
    _tighten(path, 0o700)
    return path


def private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists; tighten it if it is ours."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        return
    _tighten(path, 0o600)


def private_sqlite(url: str) -> None:
    """Make the SQLite catalog file of ``url`` private before SQLite creates it.

    SQLite gives its -wal and -shm files the database file's mode.
    """
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        return
    name = url[len(prefix) :].partition("?")[0]
    if not name or name == ":memory:":
        return
    path = Path(name)
    if not path.parent.is_dir():
        return  # SQLite reports the missing directory itself
    private_file(path)
    for suffix in ("-wal", "-shm", "-journal"):
        _tighten(f"{path}{suffix}", 0o600)
