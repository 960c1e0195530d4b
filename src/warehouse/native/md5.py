"""MD5 of many buffers at once, in SIMD lanes when the native library is built.

``md5_many`` gives the same digests as ``hashlib.md5`` always. With the
library that the package's build compiles (``md5.c``, next to this file) and
a CPU with AVX2, eight buffers are hashed side by side, one per lane, in one
call that releases the GIL; otherwise each buffer goes through ``hashlib``.
The library and the CPU are looked at once, on first use;
``WH_NATIVE_MD5=0`` in the environment then leaves the library unused.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "LIBRARY",
    "can_map",
    "can_read_fds",
    "lanes",
    "map_md5",
    "md5_fds",
    "md5_many",
    "md5_many_hashlib",
]

LIBRARY = Path(__file__).with_name("_md5.so")

_lib: list[Any] = []  # [library or None], once looked at
_lock = threading.Lock()


class _Buffer(ctypes.Structure):
    """CPython's ``Py_buffer``: a read-only buffer's address (ctypes' own
    ``from_buffer`` wants a writable one, and an mmap of a block is not)."""

    _fields_ = (
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.py_object),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    )


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_Buffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_Buffer)]
_release_buffer.restype = None
_PYBUF_SIMPLE = 0  # contiguous bytes, read-only allowed
_WHOLE_FILE_CALLS = ("wh_map_md5", "wh_md5_fds")


def _load() -> Any:
    with _lock:
        if not _lib:
            _lib.append(_open())
        return _lib[0]


def _has(symbol: str) -> bool:
    """Whether the library is used here and exports ``symbol`` (an older or
    another system's build may not)."""
    lib = _load()
    return lib is not None and hasattr(lib, symbol)


def _open() -> Any:
    if os.environ.get("WH_NATIVE_MD5") == "0":
        return None
    try:
        lib = ctypes.CDLL(str(LIBRARY))  # CDLL: each call releases the GIL
    except OSError:  # not built here (no compiler), or built for another system
        return None
    lib.wh_md5_lanes.restype = ctypes.c_int
    lib.wh_md5_lanes.argtypes = []
    lib.wh_md5_many_width.restype = None
    lib.wh_md5_many_width.argtypes = [
        ctypes.c_int,
        ctypes.c_size_t,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    # Both take a count and four arrays and answer < 0 when out of memory.
    # Built for Linux: wh_map_md5; from this md5.c, wh_md5_fds as well.
    for name in _WHOLE_FILE_CALLS:
        if hasattr(lib, name):
            call = getattr(lib, name)
            call.restype = ctypes.c_int
            call.argtypes = [ctypes.c_size_t] + [ctypes.c_void_p] * 4
    if hasattr(lib, "wh_map_md5"):
        lib.wh_unmap.restype = None
        lib.wh_unmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    # One lane (no AVX2) would be no quicker than hashlib: not worth the calls.
    return lib if lib.wh_md5_lanes() > 1 else None


def lanes() -> int:
    """How many buffers the native library hashes at once; 0 if it is not used."""
    lib = _load()
    return 0 if lib is None else int(lib.wh_md5_lanes())


def md5_many_hashlib(buffers: Sequence[Any]) -> list[bytes]:
    """The digests one buffer at a time (what ``md5_many`` does without the library)."""
    return [hashlib.md5(b).digest() for b in buffers]


def md5_many(buffers: Sequence[Any], *, width: int = 16) -> list[bytes]:
    """The 16-byte MD5 digest of each buffer (bytes, bytearray, memoryview,
    mmap: anything contiguous), in order. ``width``: at most so many lanes
    (16, 8, or 1 for the library's plain C code), for tests to compare them."""
    lib = _load()
    n = len(buffers)
    if lib is None or (n < 3 and width > 1):  # the library would hash them one by one
        return md5_many_hashlib(buffers)
    views = [_Buffer() for _ in range(n)]
    held = 0
    try:
        for b, view in zip(buffers, views, strict=True):
            _get_buffer(b, ctypes.byref(view), _PYBUF_SIMPLE)  # raises if not contiguous
            held += 1
        ptrs = (ctypes.c_void_p * n)(*(v.buf for v in views))
        lens = (ctypes.c_size_t * n)(*(v.len for v in views))
        out = ctypes.create_string_buffer(16 * n)
        lib.wh_md5_many_width(width, n, ptrs, lens, out)
    finally:
        for view in views[:held]:
            _release_buffer(ctypes.byref(view))
    raw = out.raw
    return [raw[16 * i : 16 * i + 16] for i in range(n)]


class _Mapping:
    """One file mapped by ``wh_map_md5``: unmapped once no view of it is left."""

    __slots__ = ("addr", "size", "unmap")

    def __init__(self, addr: int, size: int, unmap: Any) -> None:
        self.addr = addr
        self.size = size
        self.unmap = unmap

    def __del__(self) -> None:
        self.unmap(self.addr, self.size)


def can_map() -> bool:
    """Whether ``map_md5`` maps and hashes files in one native call here."""
    return _has("wh_map_md5")


def map_md5(paths: Sequence[str], sizes: Sequence[int]) -> list[tuple[memoryview, bytes] | None]:
    """Each file mapped read-only with its pages faulted in, and the MD5
    digest of what is mapped, all in one call that releases the GIL; None
    for a file that is not there with that size, or could not be mapped so
    (its read error, if any, is for the caller's own read to report). Only
    where ``can_map()``. A view keeps its mapping until it is dropped."""
    lib = _load()
    n = len(paths)
    names = [os.fsencode(p) for p in paths]
    c_paths = (ctypes.c_char_p * n)(*names)
    c_sizes = (ctypes.c_size_t * n)(*sizes)
    addrs = (ctypes.c_void_p * n)()
    out = ctypes.create_string_buffer(16 * n)
    if lib.wh_map_md5(n, c_paths, c_sizes, addrs, out) < 0:
        raise MemoryError("no memory to map the blocks")
    raw = out.raw
    found: list[tuple[memoryview, bytes] | None] = []
    for i in range(n):
        addr = addrs[i]
        if not addr:
            found.append(None)
            continue
        pages = (ctypes.c_ubyte * sizes[i]).from_address(addr)
        # The array holds the mapping, a view of it holds the array.
        pages._wh_mapping = _Mapping(addr, sizes[i], lib.wh_unmap)  # type: ignore[attr-defined]
        found.append((memoryview(pages).cast("B").toreadonly(), raw[16 * i : 16 * i + 16]))
    return found


def can_read_fds() -> bool:
    """Whether ``md5_fds`` reads and hashes files in one native call here."""
    return _has("wh_md5_fds")


def md5_fds(fds: Sequence[int], sizes: Sequence[int]) -> list[bytes | None]:
    """The MD5 digest of the first ``sizes[i]`` bytes of each open file
    ``fds[i]``, read a piece (256 KiB) at a time and hashed side by side, in
    one call that releases the GIL: what is held is a piece per file, never
    the file. None for a file that could not be read that far (its error is
    for the caller's own read to report). Only where ``can_read_fds()``."""
    lib = _load()
    n = len(fds)
    c_fds = (ctypes.c_int * n)(*fds)
    c_sizes = (ctypes.c_uint64 * n)(*sizes)
    ok = (ctypes.c_int * n)()
    out = ctypes.create_string_buffer(16 * n)
    if lib.wh_md5_fds(n, c_fds, c_sizes, out, ok) < 0:
        raise MemoryError("no memory to read the blocks")
    raw = out.raw
    return [raw[16 * i : 16 * i + 16] if ok[i] else None for i in range(n)]
