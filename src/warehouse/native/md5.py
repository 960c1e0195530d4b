"""MD5 of many buffers at once, in SIMD lanes when the native library is built.

``md5_many`` gives the same digests as ``hashlib.md5`` always. With the
library that the package's build compiles (``md5.c``, next to this file) and
a CPU with AVX2, eight buffers are hashed side by side, one per lane, in one
call that releases the GIL; otherwise each buffer goes through ``hashlib``.
The library and the CPU are looked at once, on first use.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["LIBRARY", "lanes", "md5_many", "md5_many_hashlib"]

LIBRARY = Path(__file__).with_name("_md5.so")

_lib: list[Any] = []  # [library or None], once looked at
_lock = threading.Lock()


def _load() -> Any:
    with _lock:
        if not _lib:
            _lib.append(_open())
        return _lib[0]


def _open() -> Any:
    try:
        lib = ctypes.CDLL(str(LIBRARY))  # CDLL: each call releases the GIL
    except OSError:  # not built here (no compiler), or built for another system
        return None
    lib.wh_md5_lanes.restype = ctypes.c_int
    lib.wh_md5_lanes.argtypes = []
    lib.wh_md5_many.restype = None
    lib.wh_md5_many.argtypes = [
        ctypes.c_size_t,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    # One lane (no AVX2) would be no quicker than hashlib: not worth the calls.
    return lib if lib.wh_md5_lanes() > 1 else None


def lanes() -> int:
    """How many buffers the native library hashes at once; 0 if it is not used."""
    lib = _load()
    return 0 if lib is None else int(lib.wh_md5_lanes())


def md5_many_hashlib(buffers: Sequence[Any]) -> list[bytes]:
    """The digests one buffer at a time (what ``md5_many`` does without the library)."""
    return [hashlib.md5(b).digest() for b in buffers]


def md5_many(buffers: Sequence[Any]) -> list[bytes]:
    """The 16-byte MD5 digest of each buffer (bytes, bytearray, memoryview,
    mmap: anything contiguous), in order."""
    lib = _load()
    n = len(buffers)
    if lib is None or n < 3:  # two or fewer: the library would hash them one by one
        return md5_many_hashlib(buffers)
    # numpy reads a read-only buffer's address (ctypes' from_buffer needs a writable one).
    arrays = [np.frombuffer(b, dtype=np.uint8) for b in buffers]
    ptrs = np.fromiter((a.ctypes.data for a in arrays), dtype=np.uintp, count=n)
    lens = np.fromiter((a.size for a in arrays), dtype=np.uintp, count=n)
    out = np.empty(16 * n, dtype=np.uint8)
    lib.wh_md5_many(n, ptrs.ctypes.data, lens.ctypes.data, out.ctypes.data)
    raw = out.tobytes()
    del arrays  # held until the call returned
    return [raw[16 * i : 16 * i + 16] for i in range(n)]
