"""K-mers of up to 63 bases as numpy arrays: one 64-bit word each to k = 31, two beyond.

Two bits a base (A=0, C=1, G=2, T=3), first base highest. For k <= 31 a
k-mer's value is one ``uint64`` and so is its sort key. For 31 < k <= 63 its
value is a row of two ``uint64`` words (high, low: the first 2k - 64 bits
and the last 64), and its sort key the 16 bytes of the two words big-endian
as one numpy ``S16`` item: byte order is number order, so numpy sorts,
``unique`` and ``searchsorted`` work on it as on integers (each item is
exactly 16 bytes, so numpy's NUL padding never comes into a comparison).
Pure functions; dbg.py uses them.
"""

from __future__ import annotations

import numpy as np

MAX_K = 63
_U = np.uint64
_M1 = _U(0x3333333333333333)
_M2 = _U(0x0F0F0F0F0F0F0F0F)
_M3 = _U(0x00FF00FF00FF00FF)
_M4 = _U(0x0000FFFF0000FFFF)
_ALL = _U(0xFFFFFFFFFFFFFFFF)


def wide(k: int) -> bool:
    return k > 31


def key_dtype(k: int) -> np.dtype:
    return np.dtype("S16") if wide(k) else np.dtype(np.uint64)


def empty(k: int) -> np.ndarray:
    return np.zeros((0, 2) if wide(k) else 0, dtype=np.uint64)


def _reverse_groups(x: np.ndarray) -> np.ndarray:
    """The 32 two-bit groups of each word in reverse order."""
    x = ((x >> _U(2)) & _M1) | ((x & _M1) << _U(2))
    x = ((x >> _U(4)) & _M2) | ((x & _M2) << _U(4))
    x = ((x >> _U(8)) & _M3) | ((x & _M3) << _U(8))
    x = ((x >> _U(16)) & _M4) | ((x & _M4) << _U(16))
    out: np.ndarray = (x >> _U(32)) | (x << _U(32))
    return out


def revcomp(v: np.ndarray, k: int) -> np.ndarray:
    """The reverse complements of k-mer values."""
    if not wide(k):
        return _reverse_groups(v ^ _U((1 << (2 * k)) - 1)) >> _U(64 - 2 * k)
    hi = v[:, 0] ^ _U((1 << (2 * k - 64)) - 1)
    lo = v[:, 1] ^ _ALL
    # Reversed, the low word's groups come first: a 128-bit value shifted right by 128 - 2k.
    rhi, rlo = _reverse_groups(lo), _reverse_groups(hi)
    s = 128 - 2 * k  # 2 to 62
    out = np.empty_like(v)
    out[:, 0] = rhi >> _U(s)
    out[:, 1] = (rlo >> _U(s)) | (rhi << _U(64 - s))
    return out


def shift_in(v: np.ndarray, base: int, k: int) -> np.ndarray:
    """Each k-mer moved on by one base: its first base dropped, ``base`` appended."""
    if not wide(k):
        return ((v << _U(2)) & _U((1 << (2 * k)) - 1)) | _U(base)
    out = np.empty_like(v)
    out[:, 0] = ((v[:, 0] << _U(2)) | (v[:, 1] >> _U(62))) & _U((1 << (2 * k - 64)) - 1)
    out[:, 1] = (v[:, 1] << _U(2)) | _U(base)
    return out


def smaller(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where value ``a`` is below ``b``."""
    if a.ndim == 1:
        out: np.ndarray = a < b
    else:
        out = (a[:, 0] < b[:, 0]) | ((a[:, 0] == b[:, 0]) & (a[:, 1] < b[:, 1]))
    return out


def where(mask: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.where(mask[:, None] if a.ndim == 2 else mask, a, b)
    return out


def canonical(v: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The canonical values (the smaller of each value and its reverse complement) and
    whether each was the reverse complement (its strand: 1)."""
    r = revcomp(v, k)
    flip = smaller(r, v)
    return where(flip, r, v), flip


def key(v: np.ndarray, k: int) -> np.ndarray:
    """Sort keys of values (the values themselves up to k = 31)."""
    if not wide(k):
        return v
    be = np.empty(v.shape, dtype=">u8")
    be[...] = v
    out: np.ndarray = np.ascontiguousarray(be).view("S16").ravel()
    return out


def value(keys: np.ndarray, k: int) -> np.ndarray:
    """Values of sort keys."""
    if not wide(k):
        return keys
    out: np.ndarray = keys.view(">u8").reshape(-1, 2).astype(np.uint64)
    return out


def low_word(keys: np.ndarray) -> np.ndarray:
    """The last 64 bits of each key (for hashing)."""
    if keys.dtype == np.uint64:
        return keys
    out: np.ndarray = keys.view(">u8").reshape(-1, 2)[:, 1].astype(np.uint64)
    return out


def last_base(v: np.ndarray) -> np.ndarray:
    out: np.ndarray = (v if v.ndim == 1 else v[:, 1]) & _U(3)
    return out


def as_int(v: np.ndarray, i: int) -> int:
    """Value ``i`` as one Python integer."""
    if v.ndim == 1:
        return int(v[i])
    return (int(v[i, 0]) << 64) | int(v[i, 1])


def windows(codes: np.ndarray, k: int) -> np.ndarray:
    """The values of every window of k of 2-bit ``codes`` (len(codes) - k + 1 of them)."""
    n = len(codes) - k + 1
    values = codes.astype(np.uint64)
    if not wide(k):
        acc = np.zeros(n, dtype=np.uint64)
        for j in range(k):
            acc <<= _U(2)
            acc |= values[j : j + n]
        return acc
    head = k - 32  # the first k - 32 bases go to the high word, the last 32 to the low one
    out = np.zeros((n, 2), dtype=np.uint64)
    hi, lo = out[:, 0], out[:, 1]
    for j in range(head):
        hi <<= _U(2)
        hi |= values[j : j + n]
    for j in range(head, k):
        lo <<= _U(2)
        lo |= values[j : j + n]
    return out


def oriented(nodes: np.ndarray, k: int) -> np.ndarray:
    """Values of oriented nodes ``2 * index + strand`` of sorted keys ``nodes``."""
    v = value(nodes, k)
    out = np.empty((2 * len(v), *v.shape[1:]), dtype=np.uint64)
    out[0::2] = v
    out[1::2] = revcomp(v, k)
    return out


def hex_lines(keys: np.ndarray, counts: np.ndarray) -> bytes:
    """``<hex k-mer>\\t<count>`` lines: 16 hex digits a key to k = 31, 32 beyond."""
    if keys.dtype == np.uint64:
        pairs = zip(keys.tolist(), counts.tolist(), strict=True)
        return "".join(f"{a:016x}\t{c}\n" for a, c in pairs).encode()
    w = keys.view(">u8").reshape(-1, 2)
    rows = zip(w[:, 0].tolist(), w[:, 1].tolist(), counts.tolist(), strict=True)
    return "".join(f"{h:016x}{lo:016x}\t{c}\n" for h, lo, c in rows).encode()
