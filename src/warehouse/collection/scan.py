"""Walk the paths given to ``wh put`` into a tree of directories and files.

Decisions made here (documented in docs/cli.md): a single directory argument
stores its contents at the collection root; several arguments (or a single
file) are stored by their base names. Symbolic links are followed; a link
loop, a special file or a name that is not valid UTF-8 is refused.
"""

from __future__ import annotations

import errno
import heapq
import os
import stat
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from warehouse.collection.scratch import Records, held_entries
from warehouse.errors import NotFoundError, UsageError, WarehouseError, os_error

__all__ = ["DirNode", "Files", "Filter", "LazyTree", "SpilledFiles", "scan_paths"]

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


class Files:
    """One directory's files as (name, source path, size), in name order.

    Held compactly, since a put holds every file of the tree: the names, the
    sizes in an array, and the source paths only where a file is not read
    from ``prefix + name`` (the files named on the command line): about 70
    bytes a file, not the 250 of a tuple with its path and size.
    """

    __slots__ = ("_names", "_paths", "_prefix", "_sizes")

    def __init__(self, prefix: str = "") -> None:
        self._prefix = prefix
        self._names: list[str] = []
        self._sizes = array("q")
        self._paths: list[str] | None = None  # only if some path is not prefix + name

    @classmethod
    def of(cls, files: Iterable[tuple[str, str, int]], prefix: str = "") -> Files:
        out = cls(prefix)
        for name, path, size in files:
            out.append(name, path, size)
        return out

    def only(self, test: Callable[[str], bool], keep: bool = True) -> Files:
        """The files whose names ``test`` is ``keep`` for."""
        return Files.of((f for f in self if bool(test(f[0])) is keep), self._prefix)

    def without(self, names: Iterable[str]) -> Files:
        """The files but those named in ``names`` (some of them, in name
        order); of spilled files, spilled files again (never held)."""
        out = type(self)(self._prefix)
        skip = iter(names)
        next_skip = next(skip, None)
        for name, path, size in self:
            if name == next_skip:
                next_skip = next(skip, None)
            else:
                out.append(name, path, size)
        if next_skip is not None:
            raise ValueError(f"{next_skip!r} is not one of the files, or out of order")
        return out

    def append(self, name: str, path: str, size: int) -> None:
        if self._paths is None and path != self._prefix + name:
            self._paths = [self._prefix + n for n in self._names]
        if self._paths is not None:
            self._paths.append(path)
        self._names.append(name)
        self._sizes.append(size)

    def sort(self) -> None:
        """Into name order (the order of a normalized stream)."""
        order = sorted(range(len(self._names)), key=self._names.__getitem__)
        self._names = [self._names[i] for i in order]
        self._sizes = array("q", (self._sizes[i] for i in order))
        if self._paths is not None:
            self._paths = [self._paths[i] for i in order]

    @property
    def names(self) -> list[str]:
        return self._names

    def iter_names(self) -> Iterator[str]:
        return iter(self._names)

    @property
    def spilled(self) -> bool:
        """Whether the files are in a scratch file rather than held."""
        return False

    def close(self) -> None:
        """Close the scratch file the files are in, if any (a put that
        failed closes it before it raises, not when it is collected)."""

    @property
    def total_size(self) -> int:
        return sum(self._sizes)

    def path(self, i: int) -> str:
        return self._prefix + self._names[i] if self._paths is None else self._paths[i]

    def __iter__(self) -> Iterator[tuple[str, str, int]]:
        names, sizes, paths = self._names, self._sizes, self._paths
        if paths is None:
            prefix = self._prefix
            return ((n, prefix + n, s) for n, s in zip(names, sizes, strict=True))
        return zip(names, paths, sizes, strict=True)

    def __len__(self) -> int:
        return len(self._names)

    def __bool__(self) -> bool:
        return bool(self._names)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Files):
            return list(self) == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"Files({list(self)!r})"


class SpilledFiles(Files):
    """A directory's files in name order in a scratch file (``Records``):
    what a directory of more files than ``held_entries()`` is read into, so
    that what is held of it does not grow with its file count. Every file's
    path is ``prefix + name`` (the files of a directory read by the scan);
    each iteration reads the file again from its start."""

    __slots__ = ("_count", "_records", "_total")

    def __init__(self, prefix: str = "") -> None:
        super().__init__(prefix)
        self._records = Records()
        self._count = 0
        self._total = 0

    def append(self, name: str, path: str, size: int) -> None:
        if path != self._prefix + name:
            raise ValueError(f"a spilled file is read from its directory: {path}")
        self._records.append(name, size)
        self._count += 1
        self._total += size

    def sort(self) -> None:
        raise TypeError("spilled files are appended in name order")

    @property
    def names(self) -> list[str]:
        raise TypeError("spilled files are not held: iterate over them")

    def iter_names(self) -> Iterator[str]:
        return (name for name, _ in self._records.read())

    @property
    def spilled(self) -> bool:
        return True

    def close(self) -> None:
        self._records.close()

    @property
    def total_size(self) -> int:
        return self._total

    def path(self, i: int) -> str:
        raise TypeError("spilled files are not held: iterate over them")

    def __iter__(self) -> Iterator[tuple[str, str, int]]:
        prefix = self._prefix
        return ((n, prefix + n, s) for n, s in self._records.read())

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0


@dataclass
class DirNode:
    """One directory of the collection being written (``rel`` is "" at the root)."""

    rel: str
    files: Files = field(default_factory=Files)
    dirs: list[DirNode] = field(default_factory=list)

    def walk(self) -> Iterator[DirNode]:
        """Depth-first: a directory, then each subdirectory in name order."""
        yield self
        for d in self.dirs:
            yield from d.walk()

    def survey(self) -> Iterator[DirNode]:
        """A walk of its own to learn the files and their sizes (a lazy tree
        reads the tree again for it, leaving the put's skipped and excluded
        counts alone)."""
        return self.walk()

    @property
    def is_empty(self) -> bool:
        return not self.files and not self.dirs

    @property
    def total_size(self) -> int:
        return sum(d.files.total_size for d in self.walk())

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


@dataclass
class _Pending(DirNode):
    """A directory a lazy walk has found but not read yet: its source path and
    the directories above it (to find a link loop)."""

    source: str = ""
    ancestors: frozenset[tuple[int, int]] = frozenset()


def _add(
    node: DirNode,
    name: str,
    path: str,
    ancestors: frozenset[tuple[int, int]],
    keep: Filter,
    lazy: bool = False,
) -> None:
    rel = f"{node.rel}/{name}" if node.rel else name
    try:
        st = _stat(path)
        if keep.leaves_out(rel, stat.S_ISDIR(st.st_mode)):
            return
        if stat.S_ISREG(st.st_mode):
            if keep.skip_unreadable:
                os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
            node.files.append(name, path, st.st_size)
        elif stat.S_ISDIR(st.st_mode):
            key = (st.st_dev, st.st_ino)
            if key in ancestors:
                raise UsageError(f"symbolic link loop at {path}")
            if lazy:
                if keep.skip_unreadable:
                    # Read when its turn comes, but found unreadable now, as
                    # the whole scan would: its parent is then empty or not.
                    try:
                        os.close(os.open(path, os.O_RDONLY | os.O_DIRECTORY))
                    except OSError as e:
                        raise os_error(e, f"cannot read directory {path}") from None
                node.dirs.append(_Pending(rel, source=path, ancestors=ancestors | {key}))
                return
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


def _fill(
    node: DirNode,
    path: str,
    ancestors: frozenset[tuple[int, int]],
    keep: Filter,
    lazy: bool = False,
) -> None:
    # Read an entry at a time: a directory of more entries than are held is
    # sorted in runs kept in a scratch file, then merged.
    held = held_entries()
    names: list[str] = []
    runs: Records | None = None
    bounds: list[tuple[int, int]] = []
    try:
        with os.scandir(path) as entries:
            for e in entries:
                names.append(_name(e.name, path))
                if len(names) > held:
                    runs = runs or Records()
                    bounds.append(_run(runs, names))
                    names = []
    except OSError as e:
        if runs is not None:
            runs.close()
        raise os_error(e, f"cannot read directory {path}") from None
    prefix = path if path.endswith("/") else path + "/"
    ordered: Iterable[str]
    if runs is None:
        node.files = Files(prefix)
        ordered = sorted(names)
    else:
        if names:
            bounds.append(_run(runs, names))
        node.files = SpilledFiles(prefix)
        ordered = heapq.merge(*((n for n, _ in runs.read(a, b)) for a, b in bounds))
    del names
    try:
        # In name order, so the files are too (each appended in turn).
        for entry in ordered:
            _add(node, entry, prefix + entry, ancestors, keep, lazy)
    except BaseException:
        node.files.close()  # the error's traceback holds the node: not with it
        raise
    finally:
        if runs is not None:
            runs.close()
    node.dirs.sort(key=lambda d: d.rel.rsplit("/", 1)[-1])


def _run(runs: Records, names: list[str]) -> tuple[int, int]:
    """Write ``names`` sorted to ``runs``: where the run starts and ends."""
    start = runs.end
    names.sort()
    for name in names:
        runs.append(name, 0)
    return start, runs.end


def scan_paths(paths: Sequence[Path | str], keep: Filter | None = None) -> DirNode:
    """The tree that ``wh put paths`` stores (less what ``keep`` leaves out)."""
    return _top(paths, keep or Filter(), lazy=False)


def _top(paths: Sequence[Path | str], keep: Filter, lazy: bool) -> DirNode:
    """The root of the tree; lazily, its subdirectories are left to be read."""
    if not paths:
        raise UsageError("nothing to store: give at least one path")
    root = DirNode("")
    if len(paths) == 1 and stat.S_ISDIR((st := _stat(str(Path(paths[0])))).st_mode):
        _fill(root, str(Path(paths[0])), frozenset({(st.st_dev, st.st_ino)}), keep, lazy)
        return root
    seen: set[str] = set()
    for p in map(Path, paths):
        name = _name(p.resolve().name if p.name in ("", ".", "..") else p.name, str(p.parent))
        if not name:
            raise UsageError(f"cannot store the file system root: {p}")
        if name in seen:
            raise UsageError(f"two arguments would both be stored as {name!r}")
        seen.add(name)
        _add(root, name, str(p), frozenset(), keep, lazy)
    root.files.sort()
    root.dirs.sort(key=lambda d: d.rel)
    return root


class LazyTree(DirNode):
    """The tree of ``wh put PATHS``, read a directory at a time as it is walked.

    A walk yields the directories in the order of the normalized manifest
    (a directory, then its subdirectories in name order) and holds only the
    directories found and not yet visited, not the tree: a put of ten
    million files holds the files of one directory at a time. A node's
    ``dirs`` are emptied once the walk goes on past it (``is_empty`` is to
    be asked when it is yielded). Each walk
    reads the tree again; ``file_count`` and ``total_size`` are a walk of
    their own (sizes only), made when first asked for.
    """

    def __init__(self, paths: Sequence[Path | str], keep: Filter | None = None) -> None:
        super().__init__("")
        self._paths = list(paths)
        self._keep = keep or Filter()
        # The arguments themselves are checked now: a missing path fails at once.
        self._root: DirNode | None = _top(self._paths, self._keep, lazy=True)
        self._counted: tuple[int, int] | None = None

    def walk(self) -> Iterator[DirNode]:
        root, self._root = self._root, None  # the first walk reuses the root read above
        return self._walk(self._keep, root)

    def _walk(self, keep: Filter, root: DirNode | None = None) -> Iterator[DirNode]:
        stack = [root if root is not None else _top(self._paths, keep, lazy=True)]
        del root  # held by the stack alone: a node is dropped once walked
        while stack:
            node = stack.pop()
            if isinstance(node, _Pending):
                try:
                    _fill(node, node.source, node.ancestors, keep, lazy=True)
                except WarehouseError as e:
                    if not keep.skip_unreadable:
                        raise
                    keep.skipped.append((node.source, str(e)))
                    continue
            yield node
            stack.extend(reversed(node.dirs))
            # Whoever still holds the node does not hold its subdirectories,
            # which are filled in as the walk goes on.
            node.dirs = []

    def survey(self) -> Iterator[DirNode]:
        # A filter of its own: what it leaves out is counted by the put's walk.
        return self._walk(Filter(self._keep.exclude, self._keep.skip_unreadable))

    def _count(self) -> tuple[int, int]:
        if self._counted is None:
            files = size = 0
            for node in self.survey():
                files += len(node.files)
                size += node.files.total_size
            self._counted = (files, size)
        return self._counted

    @property
    def is_empty(self) -> bool:
        return next(self.survey()).is_empty  # the root, as read now

    @property
    def file_count(self) -> int:
        return self._count()[0]

    @property
    def total_size(self) -> int:
        return self._count()[1]
