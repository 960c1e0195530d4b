"""Range partitioning (pure): where to sample the input, which split points to
choose, and which reducer a key goes to.

With ``partitioner: range`` step 0 maps a sample of the input (at most
``WINDOWS`` windows of ``WIDTH`` bytes spread evenly over all splits, or every
split whole when the input is smaller), sorts the keys the mapper made and
takes R-1 of them at even ranks as split points. A key goes to the number of
split points not greater than it, so reducer r gets the keys from split point
r-1 (included) to split point r (excluded), and the reducers' outputs laid end
to end are in key order.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Sequence

__all__ = [
    "WIDTH",
    "WINDOWS",
    "Partitioner",
    "decode_points",
    "encode_points",
    "hash_partitioner",
    "range_partitioner",
    "sample_windows",
    "split_points",
]

WINDOWS = 128
WIDTH = 64 << 10

Partitioner = Callable[[bytes], int]
# (stream, start, end): a byte range of a stream's files laid end to end
Range = tuple[str, int, int]


def sample_windows(
    splits: Sequence[Range], windows: int = WINDOWS, width: int = WIDTH
) -> list[tuple[Range, bool]]:
    """Byte ranges to sample, in input order, each with whether it starts a split
    (else its first bytes may be the end of a record)."""
    total = sum(end - start for _, start, end in splits)
    if total <= windows * width:
        return [(s, True) for s in splits if s[2] > s[1]]
    # Cumulative starts of the splits in the input laid end to end.
    starts, pos = [], 0
    for _, start, end in splits:
        starts.append(pos)
        pos += end - start
    out: list[tuple[Range, bool]] = []
    for j in range(windows):
        at = j * total // windows
        i = bisect.bisect_right(starts, at) - 1
        stream, start, end = splits[i]
        lo = start + at - starts[i]
        out.append(((stream, lo, min(lo + width, end)), lo == start))
    return out


def split_points(keys: list[bytes], partitions: int) -> list[bytes]:
    """R-1 keys at even ranks of the sorted sample (none without a sample)."""
    if not keys:
        return []
    keys = sorted(keys)
    return [keys[i * len(keys) // partitions] for i in range(1, partitions)]


def encode_points(points: Sequence[bytes]) -> bytes:
    # Keys hold no newline (the pair-line contract): one a line.
    return b"".join(p + b"\n" for p in points)


def decode_points(data: bytes) -> list[bytes]:
    return data.split(b"\n")[:-1] if data else []


def hash_partitioner(partitions: int) -> Partitioner:
    """A stable hash of the key's bytes (the same on every machine and run),
    remembered for recent keys (most jobs see a key many times)."""
    memo: dict[bytes, int] = {}

    def partition(key: bytes) -> int:
        found = memo.get(key)
        if found is None:
            found = int(hashlib.md5(key).hexdigest()[:8], 16) % partitions
            if len(memo) >= 1 << 16:
                memo.clear()  # bounded memory
            memo[key] = found
        return found

    return partition


def range_partitioner(points: Sequence[bytes]) -> Partitioner:
    points = list(points)

    def partition(key: bytes) -> int:
        return bisect.bisect_right(points, key)

    return partition
