"""Cutting the input into map splits (pure: the bytes near a cut come from a callback).

A split is ``(stream, start, end)``: a byte range of the stream's files laid
end to end in manifest order. Small files share a split up to ``split_size``;
a larger file is cut at record boundaries into pieces of at most
``split_size`` (a single record longer than that is an error; with
``whole-file`` a larger file is a split of its own).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from warehouse.errors import UsageError
from warehouse.mapreduce.formats import last_boundary

__all__ = ["Split", "decode_split", "encode_split", "plan_splits"]

Split = tuple[str, int, int]
# (file index, offset, length) -> those bytes of that file
ReadRange = Callable[[int, int, int], bytes]

_WINDOW = 1 << 16


def plan_splits(
    stream: str,
    sizes: Sequence[int],
    fmt: str,
    split_size: int,
    read: ReadRange,
    paths: Sequence[str] = (),
) -> list[Split]:
    """The splits of one stream's files (``paths``: their names, for errors)."""
    splits: list[Split] = []
    start = pos = 0  # the open split starts at `start`; files so far end at `pos`
    for index, size in enumerate(sizes):
        if pos + size - start > split_size and pos > start:
            splits.append((stream, start, pos))  # close the split before this file
            start = pos
        offset = 0
        while size - offset > split_size and fmt != "whole-file":
            where = paths[index] if index < len(paths) else f"file {index + 1} of the stream"
            cut = _cut(fmt, index, offset, split_size, read, where)
            splits.append((stream, pos + offset, pos + cut))
            offset = cut
            start = pos + offset
        pos += size
    if pos > start:
        splits.append((stream, start, pos))
    return splits


def _cut(fmt: str, index: int, offset: int, split_size: int, read: ReadRange, where: str) -> int:
    """The last record boundary in (offset, offset + split_size] of file ``index``."""
    end = offset + split_size
    width = min(_WINDOW, split_size)
    while True:
        lo = max(offset, end - width)
        # One byte past the cut too: a boundary exactly at `end` ends a full split.
        window = read(index, lo, end + 1 - lo)
        found = last_boundary(fmt, window, end - lo)
        if found is not None:
            return lo + found
        if lo == offset:
            raise UsageError(
                f"a record at byte {offset} of {where} is longer than "
                f"split_size ({split_size} bytes), or the input is not {fmt}"
            )
        width *= 4


def encode_split(split: Split) -> str:
    return json.dumps(list(split), ensure_ascii=False, separators=(",", ":"))


def decode_split(text: str) -> Split:
    stream, start, end = json.loads(text)
    return str(stream), int(start), int(end)
