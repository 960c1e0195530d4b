"""A destination directory written without ever following a symbolic link.

DEST may be writable by other users (a shared scratch directory), who could
plant a symbolic link where ``wh get`` is about to create a file or a
directory and so steer the write elsewhere. So, below DEST, no path is ever
resolved by name: each directory is opened relative to its parent's
descriptor with ``O_NOFOLLOW``, each file is created under a fresh,
unguessable, short name with ``O_CREAT|O_EXCL|O_NOFOLLOW`` and then renamed
to its name in the same directory (without ``--force``, with
``RENAME_NOREPLACE``, or hard-linked where that is not offered). A link that
appears after the checks is refused, or, when it sits where a file goes and
``--force`` was given, replaced itself, never followed.

Whole small files may instead be written a batch at a time by the native
library (``put_files``): made unnamed (``O_TMPFILE``) and linked in, which
fails as a rename without replacing does, or named and renamed as above.

DEST itself is what the user named: it may be a link to a directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import itertools
import os
import secrets
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warehouse.errors import UsageError, WarehouseError, os_error
from warehouse.native import files as native_files

__all__ = ["Destination", "Parts"]

Parts = tuple[str, ...]  # a directory below DEST, as its components

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# Hard links are not offered by every file system; there a rename is used.
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK}
# renameat2() without replacing: one directory operation where a link and an
# unlink are two. Not offered by every C library, kernel or file system.
_RENAME_NOREPLACE = 1
_NO_RENAMEAT2 = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP}


class _Renameat2:
    """libc's renameat2, looked up once; ``usable`` turns False where it fails."""

    def __init__(self) -> None:
        self.usable = True
        self._call: Any = None  # the C function, once found

    def __call__(self, dir_fd: int, old: str, new: str) -> bool:
        """Rename without replacing; False if renameat2 is not offered here."""
        call = self._call
        if call is None:
            try:
                call = ctypes.CDLL(None, use_errno=True).renameat2
            except (OSError, AttributeError):
                self.usable = False
                return False
            call.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p)
            call.argtypes += (ctypes.c_uint,)
            call.restype = ctypes.c_int
            self._call = call
        if call(dir_fd, os.fsencode(old), dir_fd, os.fsencode(new), _RENAME_NOREPLACE) == 0:
            return True
        code = ctypes.get_errno()
        if code in _NO_RENAMEAT2:
            self.usable = False
            return False
        raise OSError(code, os.strerror(code))


_renameat2 = _Renameat2()


def _shown(root: Path, parts: Parts) -> Path:
    return root.joinpath(*parts)


@dataclass(slots=True)
class _Cursor:
    """The directory a thread last asked for, kept open for its next file."""

    parts: Parts
    fd: int


class Destination:
    """DEST, opened once; directories below it reached by descriptor only.

    Several threads may write files at once. Each keeps the descriptor of the
    last directory it asked for (its cursor) and closes it when it asks for
    another one, so files written in order, a directory after another, open
    each directory once per thread.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made_above: list[Path] = []  # DEST and missing parents, made here
        missing = [p for p in (root, *root.parents) if not os.path.lexists(p)]
        for path in reversed(missing):
            try:
                path.mkdir()
            except FileExistsError:
                continue
            except OSError as e:
                self._remove_made_above()
                raise os_error(e, f"cannot create {path}") from None
            self._made_above.append(path)
        try:
            self._root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            self._remove_made_above()
            if e.errno == errno.ENOTDIR:
                raise WarehouseError(f"{root} exists and is not a directory") from None
            raise os_error(e, f"cannot open {root}") from None
        self._made: list[Parts] = []  # directories below DEST made here
        self._local = threading.local()
        self._cursors: list[_Cursor] = []
        self._lock = threading.Lock()
        self._prefix = f".wh-{secrets.token_hex(4)}-"
        self._count = itertools.count()
        self._named = False  # unnamed files found not offered here

    # -- directories -----------------------------------------------------------

    def _cursor(self) -> _Cursor:
        cursor: _Cursor | None = getattr(self._local, "cursor", None)
        if cursor is None:
            cursor = self._local.cursor = _Cursor((), self._root_fd)
            with self._lock:
                self._cursors.append(cursor)
        return cursor

    def directory(self, parts: Parts, *, create: bool = True) -> int:
        """The descriptor of DEST/parts (made if missing), valid until this
        thread's next call."""
        cursor = self._cursor()
        if parts == cursor.parts:
            return cursor.fd
        common = 0
        if parts[: len(cursor.parts)] == cursor.parts:
            common = len(cursor.parts)  # going deeper: start from where we are
        else:
            self._close_current(cursor)
        fd = cursor.fd if common else self._root_fd
        try:
            for depth in range(common, len(parts)):
                child = self._open_child(fd, parts[: depth + 1], create)
                if fd != self._root_fd:
                    os.close(fd)
                fd = child
        except BaseException:
            if fd != self._root_fd:
                os.close(fd)
            cursor.parts, cursor.fd = (), self._root_fd
            raise
        cursor.parts, cursor.fd = parts, fd
        return fd

    def _open_child(self, parent: int, parts: Parts, create: bool) -> int:
        name = parts[-1]
        for _ in range(3):  # a name that comes and goes between mkdir and open
            try:
                return os.open(name, _DIR, dir_fd=parent)
            except FileNotFoundError:
                if not create:
                    raise
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise self._not_a_directory(parent, parts) from None
                raise os_error(e, f"cannot open {_shown(self.root, parts)}") from None
            try:
                os.mkdir(name, 0o777, dir_fd=parent)
                self._made.append(parts)
            except FileExistsError:
                continue
            except OSError as e:
                raise os_error(e, f"cannot create {_shown(self.root, parts)}") from None
        raise WarehouseError(f"{_shown(self.root, parts)} keeps changing")

    def _not_a_directory(self, parent: int, parts: Parts) -> WarehouseError:
        shown = _shown(self.root, parts)
        try:
            mode = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode
        except OSError:
            mode = 0
        if stat.S_ISLNK(mode):
            return UsageError(f"refusing to write through symbolic link {shown}")
        return WarehouseError(f"{shown} exists and is not a directory")

    def _close_current(self, cursor: _Cursor) -> None:
        if cursor.fd != self._root_fd:
            os.close(cursor.fd)
        cursor.parts, cursor.fd = (), self._root_fd

    # -- files -----------------------------------------------------------------

    def create(self, parts: Parts) -> tuple[int, str]:
        """A new empty file in DEST/parts under a temporary name: (its descriptor, name)."""
        fd = self.directory(parts)
        for _ in range(100):
            tmp = f"{self._prefix}{next(self._count)}"
            try:
                return os.open(tmp, _NEW_FILE, 0o666, dir_fd=fd), tmp
            except FileExistsError:
                continue  # someone took the name: never reuse what is there
            except OSError as e:
                raise os_error(e, f"cannot create a file in {_shown(self.root, parts)}") from None
        raise WarehouseError(f"cannot create a temporary file in {_shown(self.root, parts)}")

    def commit(self, parts: Parts, tmp: str, name: str, *, replace: bool) -> None:
        """Give the temporary file its name; ``replace``: whatever holds it goes."""
        fd = self.directory(parts, create=False)
        try:
            if not replace and _renameat2.usable:
                try:
                    if _renameat2(fd, tmp, name):
                        return
                except FileExistsError:
                    raise self._appeared(parts, name) from None
            if not replace:
                try:
                    # Fails if anything appeared under the name since the checks.
                    os.link(tmp, name, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
                except FileExistsError:
                    raise self._appeared(parts, name) from None
                except OSError as e:
                    if e.errno not in _NO_LINKS:
                        raise
                else:
                    os.unlink(tmp, dir_fd=fd)
                    return
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except IsADirectoryError:
            shown = _shown(self.root, (*parts, name))
            raise WarehouseError(f"{shown} exists and is a directory") from None
        except OSError as e:
            raise os_error(e, f"cannot write {_shown(self.root, (*parts, name))}") from None

    def put_files(self, parts: Parts, files: Sequence[tuple[str, bytes]], *, replace: bool) -> int:
        """Whole files (name, data) into DEST/parts, in order, in one call to
        the native library: how many were written before one failed (0
        without the library). The caller writes the rest with ``create`` and
        ``commit``, which report the failure in their words."""
        if not files or not native_files.available():
            return 0
        fd = self.directory(parts)
        prefix = f"{self._prefix}{next(self._count)}."
        names = [name for name, _ in files]
        written = native_files.write_files(
            fd, prefix, names, [data for _, data in files], replace=replace, named=self._named
        )
        if written.named:
            self._named = True
        return written.count

    def _appeared(self, parts: Parts, name: str) -> WarehouseError:
        shown = _shown(self.root, (*parts, name))
        return WarehouseError(f"{shown} appeared while the get ran; use --force to overwrite it")

    def discard(self, parts: Parts, tmp: str) -> None:
        # Best effort, on the way out of a failure that must stay the one reported.
        with contextlib.suppress(OSError, WarehouseError):
            os.unlink(tmp, dir_fd=self.directory(parts, create=False))

    # -- the end ---------------------------------------------------------------

    def close(self, *, failed: bool) -> None:
        """Close; after a failure, remove the directories made here that are still empty.

        Only once no other thread writes here any more.
        """
        try:
            if failed:
                # Deepest first: threads may have recorded a child before its parent.
                for parts in sorted(self._made, key=len, reverse=True):
                    with contextlib.suppress(OSError, WarehouseError):
                        parent = self.directory(parts[:-1], create=False)
                        os.rmdir(parts[-1], dir_fd=parent)
        finally:
            for cursor in self._cursors:
                self._close_current(cursor)
            os.close(self._root_fd)
        if failed:
            self._remove_made_above()

    def _remove_made_above(self) -> None:
        for path in reversed(self._made_above):
            with contextlib.suppress(OSError):
                path.rmdir()
        self._made_above = []
