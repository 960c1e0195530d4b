"""A get's destination checked before anything is written.

No component of a target path may be empty, ``.`` or ``..``; no directory
on the way may be a symbolic link (which could lead out of the destination);
an existing file is only replaced with ``force``; every name and path must
fit the file system. Only an early, clear report: the writes themselves
never follow a link (``destination.py``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from warehouse.errors import ForbiddenError, UsageError, WarehouseError, os_error
from warehouse.manifest import FileEntry

__all__ = ["check_dest", "check_plan", "check_rel"]


def check_rel(rel: str) -> None:
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in rel:
        raise UsageError(f"refusing unsafe path {rel!r}: it could escape the destination")


class _Dirs:
    """Directories below DEST as they are now, each looked at once.

    Only an early, clear report: the writes themselves never follow a link
    (see ``destination.py``), whatever appears after these checks.
    """

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.exists: dict[str, bool] = {"": dest.is_dir()}
        self.names: dict[str, set[str]] = {}

    def check(self, rel: str) -> bool:
        """Whether directory DEST/rel exists; raise if it, or a directory on
        the way to it, is a symbolic link or not a directory."""
        known = self.exists.get(rel)
        if known is not None:
            return known
        missing: list[str] = []
        up = rel
        while (known := self.exists.get(up)) is None:
            missing.append(up)
            up = up.rpartition("/")[0]
        for path in reversed(missing):
            # Below a directory that does not exist nothing exists either.
            known = known and self._lstat(path)
            self.exists[path] = known
        return known

    def _lstat(self, rel: str) -> bool:
        cur = self.dest / rel
        try:
            mode = os.lstat(cur).st_mode
        except FileNotFoundError:
            return False
        except OSError as e:
            raise os_error(e, f"cannot look at {cur}") from None
        if stat.S_ISLNK(mode):
            raise UsageError(f"refusing to write through symbolic link {cur}")
        if not stat.S_ISDIR(mode):
            raise WarehouseError(f"{cur} exists and is not a directory")
        return True

    def holds(self, parent: str, name: str) -> bool:
        """Whether anything is named ``name`` in existing directory DEST/parent."""
        names = self.names.get(parent)
        if names is None:
            cur = self.dest / parent if parent else self.dest
            try:
                names = self.names[parent] = set(os.listdir(cur))
            except OSError as e:
                raise os_error(e, f"cannot list {cur}") from None
        return name in names


def _existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.absolute().parents):
        if os.path.lexists(candidate):
            return candidate
    return Path("/")


def _limit(path: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(path, name)
    except (OSError, ValueError):
        return default


class _Room:
    """What this file system cannot hold or we may not write, refused before writing."""

    def __init__(self, dest: Path) -> None:
        base = self.base = _existing_ancestor(dest)
        if not base.is_dir():
            if base.is_symlink():
                raise UsageError(f"refusing to write through symbolic link {base}")
            raise WarehouseError(f"{base} exists and is not a directory")
        if not os.access(base, os.W_OK | os.X_OK):
            raise ForbiddenError(f"cannot write into {base}: permission denied")
        self.name_max = _limit(base, "PC_NAME_MAX", 255)
        self.path_max = _limit(base, "PC_PATH_MAX", 4096)

    def check(self, rel: str) -> None:
        data = rel.encode("utf-8", "surrogateescape")
        # The listing names each file relative to DEST, for `md5sum -c` run there.
        if len(data) >= self.path_max:
            raise WarehouseError(
                f"cannot write {rel[:60]!r}…: its path of {len(data)} bytes is longer "
                f"than the system allows ({self.path_max - 1})"
            )
        if len(data) <= self.name_max:
            return  # no part can be longer than the whole
        for part in data.split(b"/"):
            if len(part) > self.name_max:
                shown = part.decode("utf-8", "replace")
                raise WarehouseError(
                    f"cannot write {shown[:60]!r}…: a name of {len(part)} bytes is longer "
                    f"than the file system of {self.base} allows ({self.name_max})"
                )


def check_plan(
    dest: Path, chosen: list[tuple[str, FileEntry]], dirs: list[str], force: bool
) -> None:
    """Check every path of a chosen list of files before anything is written."""
    files = {rel for rel, _ in chosen}
    # Each directory once, not once a file: 100,000 files share a few hundred.
    parents = dict.fromkeys(rel.rpartition("/")[0] for rel, _ in chosen)
    for parent in parents:
        up = parent
        while up:
            if up in files:
                raise UsageError(f"the collection holds a file and a directory named {up!r}")
            up = up.rpartition("/")[0]
    for rel, _ in chosen:
        check_rel(rel)
    for rel in dirs:
        check_rel(rel)
        if rel in files:
            raise UsageError(f"the collection holds a file and a directory named {rel!r}")
    del files, parents
    check_dest(dest, (rel for rel, _ in chosen), dirs, force)


def check_dest(dest: Path, rels: Iterable[str], dirs: list[str], force: bool) -> None:
    """Every file and directory fits DEST's file system, and none goes through a
    symbolic link or replaces a directory; a file there already only with ``force``.

    ``rels`` is gone through once; ``dirs`` after it (it may be filled meanwhile).
    """
    room = _Room(dest)
    found = _Dirs(dest)
    existing = 0
    shown: list[str] = []
    for rel in rels:
        room.check(rel)
        parent, _, name = rel.rpartition("/")
        if not found.check(parent) or not found.holds(parent, name):
            continue
        target = dest / rel
        if target.is_dir() and not target.is_symlink():
            raise WarehouseError(f"{target} exists and is a directory")
        existing += 1
        if len(shown) <= 5:
            shown.append(rel)
    for rel in dirs:
        room.check(rel)
        found.check(rel)
    if existing and not force:
        listed = ", ".join(shown[:5]) + (" …" if existing > 5 else "")
        raise WarehouseError(
            f"{existing} file(s) already exist in {dest} ({listed}); use --force to overwrite them"
        )
