"""Whole small files written a batch at a time, in one call without Python's lock.

``write_files`` hands a batch of files of one directory to the library the
package's build compiles (``files.c``, next to this file): each is made
unnamed and linked in once whole, or made under a temporary name and
renamed, never following a symbolic link. Without the library (no compiler
at build time, another system, or ``WH_NATIVE_FILES=0`` in the environment)
``available()`` is False and the caller writes each file itself.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["LIBRARY", "Written", "available", "write_files"]

LIBRARY = Path(__file__).with_name("_files.so")

_REPLACE = 1
_NAMED = 2

_lib: list[Any] = []  # [library or None], once looked at
_lock = threading.Lock()


def _load() -> Any:
    with _lock:
        if not _lib:
            _lib.append(_open())
        return _lib[0]


def _open() -> Any:
    if os.environ.get("WH_NATIVE_FILES") == "0":
        return None
    try:
        lib = ctypes.CDLL(str(LIBRARY))  # CDLL: the call releases the GIL
        call = lib.wh_write_files
    except (OSError, AttributeError):  # not built here, or for another system
        return None
    call.restype = ctypes.c_long
    call.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_long,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_int),
    ]
    return lib


def available() -> bool:
    return _load() is not None


@dataclass(frozen=True, slots=True)
class Written:
    count: int  # files written, from the first
    named: bool  # unnamed files are not offered in that directory


def write_files(
    dir_fd: int,
    prefix: str,
    names: Sequence[str],
    datas: Sequence[bytes],
    *,
    replace: bool,
    named: bool,
) -> Written:
    """Files ``names`` holding ``datas``, in directory ``dir_fd``, in order,
    each whole before it has its name. ``replace``: a file already under the
    name is replaced (else the name must be free). ``named``: use temporary
    names (``prefix`` and a number), as where unnamed files were found not
    offered. Stops at the first file that fails, leaving nothing of it."""
    lib = _load()
    assert lib is not None, "write_files without the library"
    n = len(names)
    flags = ctypes.c_int((_REPLACE if replace else 0) | (_NAMED if named else 0))
    # c_char_p elements point into the bytes objects, which the lists keep alive.
    count = lib.wh_write_files(
        dir_fd,
        os.fsencode(prefix),
        n,
        (ctypes.c_char_p * n)(*map(os.fsencode, names)),
        (ctypes.c_char_p * n)(*datas),
        (ctypes.c_size_t * n)(*map(len, datas)),
        ctypes.byref(flags),
    )
    return Written(count, bool(flags.value & _NAMED))
