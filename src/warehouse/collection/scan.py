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

from warehouse.errors import NotFoundError, UsageError, WarehouseError, os_error

__all__ = ["DirNode", "Filter", "scan_paths"]

# Bounds on what a command line may ask of the matcher.
MAX_EXCLUDES = 1000
MAX_PATTERN = 4096


@dataclass
class Filter:
    """What ``wh put`` leaves out: --exclude patterns (gitignore rules, matched
    against the path inside the collection) and, with --skip-unreadable, what
    cannot be read (listed in ``skipped``, with the reason)."""

    exclude: Sequence[str] = ()
    skip_unreadable: bool = False
    skipped: list[tuple[str, str]] = field(default_factory=list)
    excluded: int = 0

    def __post_init__(self) -> None:
        if len(self.exclude) > MAX_EXCLUDES:
            raise UsageError(f"--exclude: more than {MAX_EXCLUDES} patterns")
        for pattern in self.exclude:
            if not pattern.strip() or len(pattern) > MAX_PATTERN:
                raise UsageError(f"--exclude: {pattern[:80]!r} is not a pattern")
        self._spec = None
        if self.exclude:
            import pathspec

            try:
                self._spec = pathspec.GitIgnoreSpec.from_lines(self.exclude)
            except (ValueError, TypeError) as e:
                raise UsageError(f"--exclude: {e}") from None

    def leaves_out(self, rel: str, is_dir: bool) -> bool:
        if self._spec is None:
            return False
        if self._spec.match_file(rel + "/" if is_dir else rel):
            self.excluded += 1
            return True
        return False


@dataclass
class DirNode:
    """One directory of the collection being written (``rel`` is "" at the root)."""

    rel: str
    # (name, source path, size): the path a str, not a Path (a put of a
    # million files holds them all).
    files: list[tuple[str, str, int]] = field(default_factory=list)
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


def _name(entry: str, where: str) -> str:
    try:
        entry.encode("utf-8")
    except UnicodeEncodeError:
        full = os.path.join(os.fsencode(where), os.fsencode(entry))
        raise UsageError(f"file name is not valid UTF-8: {full!r}") from None
    return entry


def _stat(path: str) -> os.stat_result:
    try:
        return os.stat(path)  # follows symbolic links
    except FileNotFoundError:
        if os.path.islink(path):
            raise UsageError(f"dangling symbolic link: {path}") from None
        raise NotFoundError(f"no such file or directory: {path}") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UsageError(f"symbolic link loop at {path}") from None
        # A directory on the way one may not enter, a path too long, …
        raise os_error(e, f"cannot read {path}") from None


def _add(
    node: DirNode,
    name: str,
    path: str,
    ancestors: frozenset[tuple[int, int]],
    keep: Filter,
) -> None:
    rel = f"{node.rel}/{name}" if node.rel else name
    try:
        st = _stat(path)
        if keep.leaves_out(rel, stat.S_ISDIR(st.st_mode)):
            return
        if stat.S_ISREG(st.st_mode):
            if keep.skip_unreadable:
                os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
            node.files.append((name, path, st.st_size))
        elif stat.S_ISDIR(st.st_mode):
            key = (st.st_dev, st.st_ino)
            if key in ancestors:
                raise UsageError(f"symbolic link loop at {path}")
            child = DirNode(rel)
            _fill(child, path, ancestors | {key}, keep)
            node.dirs.append(child)
        else:
            raise UsageError(f"cannot store special file (not a regular file or directory): {path}")
    except WarehouseError as e:
        # Not a bad name (refused always): what is there but cannot be read.
        if not keep.skip_unreadable or str(e).startswith("file name is not valid UTF-8"):
            raise
        keep.skipped.append((path, str(e)))
    except OSError as e:
        if not keep.skip_unreadable:
            raise os_error(e, f"cannot read {path}") from None
        # Named as an error would be: "Skipped: REASON" must say what.
        keep.skipped.append((path, f"cannot read {path}: {e.strerror or e}"))


def _fill(node: DirNode, path: str, ancestors: frozenset[tuple[int, int]], keep: Filter) -> None:
    try:
        entries = os.listdir(path)
    except OSError as e:
        raise os_error(e, f"cannot read directory {path}") from None
    prefix = path if path.endswith("/") else path + "/"
    for entry in sorted(_name(e, path) for e in entries):
        _add(node, entry, prefix + entry, ancestors, keep)
    node.files.sort(key=lambda f: f[0])
    node.dirs.sort(key=lambda d: d.rel.rsplit("/", 1)[-1])


def scan_paths(paths: Sequence[Path | str], keep: Filter | None = None) -> DirNode:
    """The tree that ``wh put paths`` stores (less what ``keep`` leaves out)."""
    if not paths:
        raise UsageError("nothing to store: give at least one path")
    keep = keep or Filter()
    root = DirNode("")
    if len(paths) == 1 and stat.S_ISDIR((st := _stat(str(Path(paths[0])))).st_mode):
        _fill(root, str(Path(paths[0])), frozenset({(st.st_dev, st.st_ino)}), keep)
        return root
    seen: set[str] = set()
    for p in map(Path, paths):
        name = _name(p.resolve().name if p.name in ("", ".", "..") else p.name, str(p.parent))
        if not name:
            raise UsageError(f"cannot store the file system root: {p}")
        if name in seen:
            raise UsageError(f"two arguments would both be stored as {name!r}")
        seen.add(name)
        _add(root, name, str(p), frozenset(), keep)
    root.files.sort(key=lambda f: f[0])
    root.dirs.sort(key=lambda d: d.rel)
    return root
