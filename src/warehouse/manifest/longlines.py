"""Manifest text in a scratch file whose long lines are read a piece at a time."""

from __future__ import annotations

import os
from collections.abc import Iterator
from itertools import chain
from typing import Protocol, cast

from warehouse.blocks.locator import Locator
from warehouse.errors import UsageError
from warehouse.manifest.lines import (
    _CONTROL,
    _LOCATOR_CACHE,
    LONG_LINE,
    LONG_LINE_VAR,
    LineSource,
    ManifestError,
    RawSegment,
    RawStream,
    Text,
    _locator,
    _parse_raw,
    _parse_stream_name,
    _segments,
    decode_line,
)
from warehouse.manifest.streams import (
    _children,
    _clash,
    _clash_error,
    _clash_in,
    _directories_into,
    _line_directories,
    iter_raw_streams,
)


def long_line() -> int:
    """Bytes of a manifest line above which a reader of text kept in a
    scratch file goes through it a piece at a time (``iter_raw_parts``)."""
    value = os.environ.get(LONG_LINE_VAR, "").strip()
    if not value:
        return LONG_LINE
    if not value.isdigit() or not 1 <= int(value) <= 1 << 40:
        raise UsageError(f"{LONG_LINE_VAR}: {value[:40]!r} is not a whole number from 1")
    return int(value)


class SpanSource(LineSource, Protocol):
    """Text in a scratch file whose long lines can be read a piece at a time."""

    def line_spans(self, limit: int) -> Iterator[str | tuple[int, int]]:
        """Each line (as ``lines``), or, if longer than ``limit`` bytes,
        where it lies: (start, end), without its newline."""

    def pieces(self, size: int, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The bytes from ``start`` to ``end`` in pieces of at most ``size``."""


def iter_raw_parts(text: Text) -> Iterator[RawStream]:
    """What ``iter_raw_streams`` yields, without the lines; a line longer
    than ``long_line()`` bytes of text kept in a scratch file (a flat
    directory of a million files is one line of 19 MB) is read from it a
    piece at a time, its segments given in parts of a piece's worth, each
    part a stream of the same name and locators.

    A part never ends inside a run of segments of one name, so each file of
    normalized text (whose segments lie together) lies in one part. Every
    check of a whole parse is made; a fault in a long line is reported as
    a whole parse reports it (the line is then read whole, to say so), but
    the parts before the fault may have been yielded already.
    """
    for _, line, got in iter_line_pieces(text):
        if line is not None:
            yield cast(RawStream, got)
            continue
        pending: list[RawSegment] = []
        name = ""
        held: tuple[Locator, ...] = ()
        for (name, held, segments), _ in cast(LinePieces, got):
            if not segments:
                continue
            start = len(pending)
            pending += segments
            # A part ends before the run of segments of the last name, which
            # may go on in the next piece. What is pending from earlier
            # pieces is one such run: only this piece's segments are looked
            # at (a file of millions of segments is not scanned each piece).
            last = pending[-1][2]
            cut = len(pending) - 1
            while cut > start and pending[cut - 1][2] == last:
                cut -= 1
            if cut == start and start and pending[start - 1][2] == last:
                cut = 0
            if cut:
                yield name, held, pending[:cut]
                del pending[:cut]
        if pending:
            yield name, held, pending


LinePieces = Iterator[tuple[RawStream, str]]


def iter_line_pieces(
    text: Text,
) -> Iterator[tuple[int, str, RawStream] | tuple[int, None, LinePieces]]:
    """Each line as (its index, the line, its stream), checked as
    ``iter_raw_streams`` checks it; but a line longer than ``long_line()``
    bytes of text kept in a scratch file as (its index, None, its pieces):
    each piece of it (256 KiB) as (the stream's name and locators with the
    piece's segments, the piece as written), in order; the first piece
    written begins with the stream's name and locators, and the pieces
    joined by a space are the line. A line's pieces are gone through
    before the next line comes.
    """
    if isinstance(text, str | bytes | bytearray | memoryview) or not hasattr(text, "line_spans"):
        for index, (line, raw) in enumerate(iter_raw_streams(text)):
            yield index, line, raw
        return
    source = cast(SpanSource, text)
    if not source.size or not source.ends_with_newline():
        for index, (line, raw) in enumerate(iter_raw_streams(text)):  # the fault, as before
            yield index, line, raw
        return
    limit = long_line()
    dirs: dict[str, int] = {}
    for index, item in enumerate(source.line_spans(limit)):
        if isinstance(item, str):
            _directories_into(dirs, index, item)
            continue
        texts = _span_texts(source, item, index + 1, whole_on_fault=True)
        head = next(texts, "")
        first, _, rest = head.partition(" ")
        _line_directories(dirs, index, first, chain((rest,), texts))
        for _ in texts:  # decoded to its end, as a whole reading decodes every line first
            pass
    children = _children(dirs)
    cache: dict[str, Locator] = {}
    clash: list[tuple[int, str]] = []  # the first file found that is a directory too
    for index, item in enumerate(source.line_spans(limit)):
        if len(cache) > _LOCATOR_CACHE:
            cache.clear()  # bounded: a manifest may list millions of blocks
        if isinstance(item, str):
            raw = _parse_raw(index + 1, item, cache)
            if not clash and (found := _clash(index, item, raw, dirs, children)) is not None:
                clash.append(found)
            yield index, item, raw
            continue
        pieces = _span_checked(index, source, item, cache, dirs, children, clash)
        yield index, None, pieces
        for _ in pieces:  # what the caller left of them, checked all the same
            pass
    if clash:
        raise _clash_error(clash[0], dirs, source.lines, cache)


def _span_checked(
    index: int,
    source: SpanSource,
    span: tuple[int, int],
    cache: dict[str, Locator],
    dirs: dict[str, int],
    children: dict[str, set[str]],
    clash: list[tuple[int, str]],
) -> LinePieces:
    for raw, written in _parse_span(index + 1, source, span, cache):
        if not clash and (found := _clash_in(index, raw[0], raw[2], dirs, children)) is not None:
            clash.append(found)
        yield raw, written


# What a long line is read by at once: a part of its segments is what one
# piece holds (some 14,000 of a flat directory's files).
_SPAN_PIECE = 1 << 18
# What a long line with a fault in it is read by, to be parsed whole.
_PIECE_WHOLE = 1 << 20


class _Unusual(Exception):
    """A long line holds something a piece-wise reading does not judge
    (bytes that are not UTF-8, a control character, a stray space): the
    line is read whole to report it as a whole parse does."""


def _span_texts(
    source: SpanSource, span: tuple[int, int], line_no: int, *, whole_on_fault: bool = False
) -> Iterator[str]:
    """Long line ``span`` of ``source`` as decoded pieces cut at spaces: joined
    with a space between them, they are the line. Raises ``_Unusual`` for bytes
    that are not UTF-8, or (``whole_on_fault``) the ManifestError a decode
    of the whole line raises."""
    start, end = span
    # The pieces since the last space: a token over many pieces (a
    # controller's text of one huge token) is joined once, not once a piece.
    carry: list[bytes] = []
    for piece in source.pieces(_SPAN_PIECE, start, end):
        cut = piece.rfind(b" ")
        if cut < 0:
            carry.append(piece)
            continue
        carry.append(piece[:cut])
        data = b"".join(carry) if len(carry) > 1 else carry[0]
        carry = [piece[cut + 1 :]]
        yield _decode_piece(source, span, line_no, data, whole_on_fault)
    yield _decode_piece(source, span, line_no, b"".join(carry), whole_on_fault)


def _decode_piece(
    source: SpanSource, span: tuple[int, int], line_no: int, data: bytes, whole: bool
) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        if not whole:
            raise _Unusual() from None
    decode_line(b"".join(source.pieces(_PIECE_WHOLE, *span)), line_no)
    raise AssertionError("a piece of a line fails to decode, the whole line does not")


def _parse_span(
    line_no: int, source: SpanSource, span: tuple[int, int], cache: dict[str, Locator]
) -> LinePieces:
    """Long line ``span``, checked a piece at a time (``iter_line_pieces``)."""
    try:
        yield from _span_pieces(line_no, source, span, cache)
    except (_Unusual, ManifestError) as fault:
        # Reported as a whole parse reports it: which fault comes first
        # depends on the whole line (a control character anywhere comes
        # before a bad token earlier in the line).
        line = decode_line(b"".join(source.pieces(_PIECE_WHOLE, *span)), line_no)
        _parse_raw(line_no, line, cache)
        if isinstance(fault, ManifestError):
            raise
        raise AssertionError("a long line reads unusual in pieces, not whole") from None


def _span_pieces(
    line_no: int, source: SpanSource, span: tuple[int, int], cache: dict[str, Locator]
) -> LinePieces:
    stream_name: str | None = None
    locators: list[Locator] = []
    held: tuple[Locator, ...] | None = None  # once the first segment is met
    head: list[str] = []  # the pieces before the first segment, as written
    stream_size = 0
    for text in _span_texts(source, span, line_no):
        if _CONTROL.search(text) is not None:
            raise _Unusual()
        tokens = text.split(" ")
        if "" in tokens:
            raise _Unusual()
        index = 0
        if stream_name is None:
            stream_name = _parse_stream_name(line_no, tokens[0])
            index = 1
        written = text
        if held is None:
            count = len(tokens)
            while index < count and ":" not in tokens[index]:
                locators.append(_locator(line_no, tokens[index], cache))
                index += 1
            head.append(text)
            if index == count:
                continue  # more locators, or none: the next piece says
            if not locators:
                raise _Unusual()  # "no locator", as a whole parse says it
            held = tuple(locators)
            stream_size = sum(locator.size for locator in held)
            written = " ".join(head)
            head = []
        tail = text if index == 0 else text[sum(map(len, tokens[:index])) + index :]
        yield (stream_name, held, _segments(line_no, tokens[index:], tail, stream_size)), written
    if stream_name is None or held is None:
        raise _Unusual()  # no locator or no segment, as a whole parse says it
