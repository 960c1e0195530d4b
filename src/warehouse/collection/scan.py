"""Walk the paths given to ``wh put`` into a tree of directories and files.

Decisions made here (documented in docs/cli.md): a single directory argument
stores its contents at the collection root; several arguments (or a single
file) are stored by their base names. Symbolic links are followed; a link
loop, a special file or a name that is not valid UTF-8 is refused.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from warehouse.errors import NotFoundError, UsageError, os_error

__all__ = ["DirNode", "scan_paths"]


@dataclass
class DirNode:
    """One directory of the collection being written (``rel`` is "" at the root)."""

    rel: str
    files: list[tuple[str, Path, int]] = field(default_factory=list)  # (name, source, size)
    dirs: list[DirNode] = field(default_factory=list)

    def walk(self) -> Iterator[DirNode]:
        """Depth-first: a directory, then each subdirectory in name order."""
        yield self
        for d in self.dirs:
            yield from d.walk()

    @property
    def is_empty(self) -> bool:
        return not self.files and not self.dirs

    @property
    def total_size(self) -> int:
        return sum(size for d in self.walk() for _, _, size in d.files)

    @property
    def file_count(self) -> int:
        return sum(len(d.files) for d in self.walk())


def _name(entry: str, where: Path) -> str:
    try:
        entry.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError(f"file name is not valid UTF-8: {os.fsencode(where / entry)!r}") from None
    return entry


def _stat(path: Path) -> os.stat_result:
    try:
        return path.stat()  # follows symbolic links
    except FileNotFoundError:
        if path.is_symlink():
            raise UsageError(f"dangling symbolic link: {path}") from None
        raise NotFoundError(f"no such file or directory: {path}") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UsageError(f"symbolic link loop at {path}") from None
        # A directory on the way one may not enter, a path too long, …
        raise os_error(e, f"cannot read {path}") from None


def _add(node: DirNode, name: str, path: Path, ancestors: frozenset[tuple[int, int]]) -> None:
    st = _stat(path)
    rel = f"{node.rel}/{name}" if node.rel else name
    if stat.S_ISREG(st.st_mode):
        node.files.append((name, path, st.st_size))
    elif stat.S_ISDIR(st.st_mode):
        key = (st.st_dev, st.st_ino)
        if key in ancestors:
            raise UsageError(f"symbolic link loop at {path}")
        child = DirNode(rel)
        _fill(child, path, ancestors | {key})
        node.dirs.append(child)
    else:
        raise UsageError(f"cannot store special file (not a regular file or directory): {path}")


def _fill(node: DirNode, path: Path, ancestors: frozenset[tuple[int, int]]) -> None:
    try:
        entries = os.listdir(path)
    except OSError as e:
        raise os_error(e, f"cannot read directory {path}") from None
    for entry in sorted(_name(e, path) for e in entries):
        _add(node, entry, path / entry, ancestors)
    node.files.sort(key=lambda f: f[0])
    node.dirs.sort(key=lambda d: d.rel.rsplit("/", 1)[-1])


def scan_paths(paths: Sequence[Path]) -> DirNode:
    """The tree that ``wh put paths`` stores."""
    if not paths:
        raise UsageError("nothing to store: give at least one path")
    root = DirNode("")
    if len(paths) == 1 and stat.S_ISDIR((st := _stat(Path(paths[0]))).st_mode):
        p = Path(paths[0])
        _fill(root, p, frozenset({(st.st_dev, st.st_ino)}))
        return root
    seen: set[str] = set()
    for p in map(Path, paths):
        name = _name(p.resolve().name if p.name in ("", ".", "..") else p.name, p.parent)
        if not name:
            raise UsageError(f"cannot store the file system root: {p}")
        if name in seen:
            raise UsageError(f"two arguments would both be stored as {name!r}")
        seen.add(name)
        _add(root, name, p, frozenset())
    root.files.sort(key=lambda f: f[0])
    root.dirs.sort(key=lambda d: d.rel)
    return root
