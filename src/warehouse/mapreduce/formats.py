"""Input formats: how a split's bytes divide into records, and where a split may end.

A file always starts a record, so a split that ends at a file's end is
whole. Inside a file a split ends only where a record starts:

- ``lines``: after a newline; a record is one line (its newline not part of
  what a Python mapper gets);
- ``fasta``: before a line starting with ``>``;
- ``fastq``: before a line starting with ``@`` whose line two above starts
  with ``+`` (four-line records: a quality line may start with ``@``, but
  then the line two above it is sequence, never ``+``);
- ``whole-file``: never; the file is one record.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["FORMATS", "count_records", "first_boundary", "last_boundary", "records"]

FORMATS = ("lines", "fasta", "fastq", "whole-file")


def records(fmt: str, data: bytes) -> Iterator[bytes]:
    """The records of ``data`` (whole records only), as bytes."""
    if not data:
        return
    if fmt == "whole-file":
        yield data
    elif fmt == "lines":
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        yield from lines
    elif fmt == "fasta":
        start = 0
        while True:
            nxt = data.find(b"\n>", start)
            if nxt < 0:
                yield data[start:]
                return
            yield data[start : nxt + 1]
            start = nxt + 1
    elif fmt == "fastq":
        lines = data.splitlines(keepends=True)
        for i in range(0, len(lines), 4):
            yield b"".join(lines[i : i + 4])
    else:
        raise ValueError(f"unknown input format {fmt!r}")


def count_records(fmt: str, data: bytes) -> int:
    if not data:
        return 0
    if fmt == "lines":
        return data.count(b"\n") + (not data.endswith(b"\n"))
    return sum(1 for _ in records(fmt, data))


def last_boundary(fmt: str, window: bytes, limit: int) -> int | None:
    """The last place in (0, limit] where a record starts, or None.

    ``window`` may start inside a line, and holds one byte past ``limit``
    (to see whether a record starts exactly there).
    """
    if fmt == "lines":
        at = window.rfind(b"\n", 0, limit)
        return at + 1 if at >= 0 else None
    if fmt == "fasta":
        at = window.rfind(b"\n>", 0, limit + 1)
        return at + 1 if at >= 0 else None
    if fmt == "fastq":
        # starts[0] may be inside a line: only starts[1:] are sure line starts.
        starts = [0] + [i + 1 for i in range(min(limit, len(window))) if window[i] == 0x0A]
        for k in range(len(starts) - 1, 2, -1):
            at, two_up = starts[k], starts[k - 2]
            if window[at : at + 1] == b"@" and window[two_up : two_up + 1] == b"+":
                return at
        return None
    return None  # whole-file


def first_boundary(fmt: str, window: bytes) -> int | None:
    """The first place in (0, len(window)) where a record starts, or None
    (``window`` may start inside a record; used to sample inside a split)."""
    if fmt == "lines":
        at = window.find(b"\n", 0, len(window) - 1)
        return at + 1 if at >= 0 else None
    if fmt == "fasta":
        at = window.find(b"\n>")
        return at + 1 if at >= 0 else None
    if fmt == "fastq":
        # Sure line starts only after the first newline; the line two above
        # must be a sure one too.
        starts: list[int] = []
        at = window.find(b"\n")
        while 0 <= at < len(window) - 1:
            starts.append(at + 1)
            if len(starts) >= 3:
                here, two_up = starts[-1], starts[-3]
                if window[here : here + 1] == b"@" and window[two_up : two_up + 1] == b"+":
                    return here
            at = window.find(b"\n", at + 1)
        return None
    return None  # whole-file
