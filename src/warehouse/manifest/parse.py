"""The strict manifest parser.

Every problem is reported as a :class:`ManifestError` naming the 1-based line
and the offending token as written, so a user can find it in the text.

The parts: ``lines`` parses and checks one line, ``streams`` a whole
manifest (no path both a file and a directory), ``longlines`` a long line
of a scratch file a piece at a time; this module is their front.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import starmap

from warehouse.manifest.entries import Segment, Stream
from warehouse.manifest.lines import (
    LONG_LINE,
    LONG_LINE_VAR,
    LineSource,
    ManifestError,
    RawSegment,
    RawStream,
    Text,
    decode_line,
    parse_raw_line,
)
from warehouse.manifest.longlines import (
    LinePieces,
    SpanSource,
    iter_line_pieces,
    iter_raw_parts,
    long_line,
)
from warehouse.manifest.streams import iter_raw_streams

__all__ = [
    "LONG_LINE",
    "LONG_LINE_VAR",
    "LinePieces",
    "LineSource",
    "ManifestError",
    "RawSegment",
    "RawStream",
    "SpanSource",
    "Text",
    "decode_line",
    "iter_line_pieces",
    "iter_raw_parts",
    "iter_raw_streams",
    "iter_streams",
    "long_line",
    "parse_raw_line",
    "parse_streams",
]


def parse_streams(text: Text) -> tuple[Stream, ...]:
    """Parse manifest ``text`` into streams, or raise :class:`ManifestError`."""
    return tuple(stream for _, stream in iter_streams(text))


def iter_streams(text: Text) -> Iterator[tuple[str, Stream]]:
    """Parse manifest ``text`` stream by stream: yield each line with its stream."""
    for line, (name, locators, segments) in iter_raw_streams(text):
        yield line, Stream(name, locators, tuple(starmap(Segment, segments)))
