"""The strict manifest parser.

Every problem is reported as a :class:`ManifestError` naming the 1-based line
and the offending token as written, so a user can find it in the text.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator
from itertools import chain, islice, starmap
from operator import add
from typing import Protocol, cast

from warehouse.blocks.locator import Locator, LocatorError
from warehouse.errors import UsageError
from warehouse.manifest.entries import Segment, Stream
from warehouse.manifest.escape import unescape_name

__all__ = [
    "LONG_LINE",
    "LONG_LINE_VAR",
    "LineSource",
    "ManifestError",
    "RawSegment",
    "RawStream",
    "SpanSource",
    "decode_line",
    "iter_line_pieces",
    "iter_raw_parts",
    "iter_raw_streams",
    "iter_streams",
    "long_line",
    "parse_raw_line",
    "parse_streams",
]

_MAX_NUMBER = 2**63
_TOKEN_SHOWN = 80
_CONTROL = re.compile(r"[\x00-\x1f]")
# Fast path for a well-formed segment; anything else goes to _segment_problem
# for a precise reason. 19 digits cover every number below 2**63.
_SEGMENT = re.compile(r"(0|[1-9][0-9]{0,18}):(0|[1-9][0-9]{0,18}):(.+)", re.DOTALL)
_NUMBER = re.compile(r"0|[1-9][0-9]*")
_DIGITS = re.compile(r"[0-9]+")
_NUM = "(?:0|[1-9][0-9]{0,18})"
_SEGMENTS = re.compile(f"{_NUM}:{_NUM}:[^ ]+(?: {_NUM}:{_NUM}:[^ ]+)*")
_FIND_SEGMENT = re.compile(f"({_NUM}):({_NUM}):([^ ]+)")
# The fast path leaves to the careful one escapes, names with a '/' and
# names that are '.' or '..'.
_DOT_NAME = re.compile(r":\.\.?(?: |$)")
# Parsed locators kept for reuse (a block is listed by many streams of a big
# tree); cleared when it grows past this.
_LOCATOR_CACHE = 100_000
# A line longer than this (bytes) of text in a scratch file is read a piece
# at a time (``iter_raw_parts``); a setting of the environment so that tests
# reach it with a few thousand files.
LONG_LINE = 1 << 20
LONG_LINE_VAR = "WH_MANIFEST_LONG_LINE"


RawSegment = tuple[int, int, str]  # position, length, unescaped name
RawStream = tuple[str, tuple[Locator, ...], list[RawSegment]]


class LineSource(Protocol):
    """Manifest text kept outside memory (a scratch file), read a line at a time."""

    @property
    def size(self) -> int:
        """Bytes of text."""

    def ends_with_newline(self) -> bool: ...

    def lines(self) -> Iterator[str]:
        """Each line, decoded (see ``decode_line``), without its newline."""

    def read(self) -> bytes:
        """The whole text: only to report a fault in it."""


Text = str | bytes | LineSource


class ManifestError(UsageError):
    """Malformed manifest text; names the line and the token at fault."""

    def __init__(self, line: int, token: str, reason: str) -> None:
        shown = token if len(token) <= _TOKEN_SHOWN else token[: _TOKEN_SHOWN - 3] + "..."
        super().__init__(f"manifest line {line}: {reason}: {shown!r}")
        self.line = line
        self.token = token
        self.reason = reason

    def __reduce__(self) -> tuple[type[ManifestError], tuple[int, str, str]]:
        return (type(self), (self.line, self.token, self.reason))


def _token_at(line: str, index: int) -> str:
    """The space-separated token of ``line`` covering character ``index``."""
    start = line.rfind(" ", 0, index) + 1
    end = line.find(" ", index)
    return line[start:] if end < 0 else line[start:end]


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = data.count(b"\n", 0, exc.start) + 1
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        line_end = data.find(b"\n", exc.start)
        line = data[line_start : None if line_end < 0 else line_end]
        text = line.decode("utf-8", "backslashreplace")
        # Find the token by byte offset, then show it with the bad bytes escaped.
        offset = exc.start - line_start
        token_start = line.rfind(b" ", 0, offset) + 1
        token_end = line.find(b" ", offset)
        raw = line[token_start : None if token_end < 0 else token_end]
        token = raw.decode("utf-8", "backslashreplace") if raw else text
        raise ManifestError(line_no, token, "invalid UTF-8") from None


def decode_line(raw: bytes, number: int) -> str:
    """Line ``number`` (1-based) of manifest text, decoded; bytes that are not
    UTF-8 fail as a decode of the whole text does."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        try:
            _decode(raw)
        except ManifestError as e:
            raise ManifestError(number, e.token, e.reason) from None
        raise


def _check_encodable(text: str) -> None:
    """Refuse lone surrogates, which a str can hold but UTF-8 cannot."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        line_no = text.count("\n", 0, exc.start) + 1
        line_start = text.rfind("\n", 0, exc.start) + 1
        line_end = text.find("\n", exc.start)
        line = text[line_start : None if line_end < 0 else line_end]
        token = _token_at(line, exc.start - line_start)
        raise ManifestError(line_no, token, "invalid UTF-8") from None


def _check_spacing(line_no: int, line: str, tokens: list[str]) -> None:
    """Report leading, trailing and doubled spaces, naming the nearest token."""
    if not line.strip(" "):
        raise ManifestError(line_no, "", "line holds only spaces")
    if tokens[0] == "":
        raise ManifestError(line_no, line.lstrip(" ").split(" ", 1)[0], "leading space")
    if tokens[-1] == "":
        raise ManifestError(line_no, line.rstrip(" ").rsplit(" ", 1)[-1], "trailing space")
    index = tokens.index("")
    following = next(token for token in tokens[index:] if token)
    raise ManifestError(line_no, following, "two spaces between tokens")


def _unescape(line_no: int, token: str, text: str) -> str:
    try:
        name = unescape_name(text)
    except ValueError as exc:
        raise ManifestError(line_no, token, str(exc)) from None
    if "\x00" in name:
        raise ManifestError(line_no, token, "NUL in name")
    return name


def _parse_stream_name(line_no: int, token: str) -> str:
    if token != "." and not token.startswith("./"):
        raise ManifestError(line_no, token, "stream name must be '.' or start with './'")
    name = _unescape(line_no, token, token)
    if name == ".":
        return name
    if name.endswith("/"):
        raise ManifestError(line_no, token, "stream name ends in '/'")
    for component in name[2:].split("/"):
        if component in ("", ".", ".."):
            raise ManifestError(line_no, token, f"stream name has a {component!r} component")
    return name


def _segment_problem(token: str) -> str:
    """Why ``token`` (which holds a ':') is not a segment."""
    fields = token.split(":", 2)
    if len(fields) < 3:
        return "segment must be position:length:name"
    for label, text in (("position", fields[0]), ("length", fields[1])):
        if _DIGITS.fullmatch(text) is None:
            return f"segment {label} is not a decimal number"
        if _NUMBER.fullmatch(text) is None:
            return f"segment {label} has a leading zero"
        if len(text) > 19 or int(text) >= _MAX_NUMBER:
            return f"segment {label} too large"
    return "segment has an empty file name"


def _check_file_name(line_no: int, token: str, name: str, length: int) -> None:
    if name.startswith("/"):
        raise ManifestError(line_no, token, "absolute file name")
    components = name.split("/")
    last = len(components) - 1
    for index, component in enumerate(components):
        if component == "." and index == last:
            if length != 0:
                raise ManifestError(line_no, token, "directory marker with nonzero length")
        elif component in ("", ".", ".."):
            raise ManifestError(line_no, token, f"file name has a {component!r} component")


def _locator(line_no: int, token: str, cache: dict[str, Locator]) -> Locator:
    """``token`` parsed as a locator (through ``cache``: a block is named by
    many streams), or the error naming it."""
    locator = cache.get(token)
    if locator is None:
        try:
            locator = Locator.parse(token)
        except LocatorError as exc:
            raise ManifestError(line_no, token, f"bad locator: {exc.reason}") from None
        cache[token] = locator
    return locator


def _parse_line(line_no: int, line: str, cache: dict[str, Locator]) -> Stream:
    name, locators, segments = _parse_raw(line_no, line, cache)
    return Stream(name, locators, tuple(starmap(Segment, segments)))


def _parse_raw(line_no: int, line: str, cache: dict[str, Locator]) -> RawStream:
    """One line as (stream name, locators, (position, length, name) of each segment)."""
    if not line:
        raise ManifestError(line_no, "", "empty line")
    control = _CONTROL.search(line)
    if control is not None:
        char = control.group()
        what = "tab" if char == "\t" else f"control character {char!r}"
        raise ManifestError(line_no, _token_at(line, control.start()), f"raw {what}")
    tokens = line.split(" ")
    if "" in tokens:
        _check_spacing(line_no, line, tokens)
    stream_name = _parse_stream_name(line_no, tokens[0])

    locators: list[Locator] = []
    index = 1
    count = len(tokens)
    while index < count and ":" not in tokens[index]:
        locators.append(_locator(line_no, tokens[index], cache))
        index += 1
    if not locators:
        raise ManifestError(line_no, tokens[min(1, count - 1)], "stream has no locator")
    if index == count:
        raise ManifestError(line_no, tokens[-1], "stream has no segment")

    stream_size = sum(locator.size for locator in locators)
    tail = line[sum(map(len, tokens[:index])) + index :]
    return stream_name, tuple(locators), _segments(line_no, tokens[index:], tail, stream_size)


def _segments(line_no: int, tokens: list[str], tail: str, stream_size: int) -> list[RawSegment]:
    """The segments ``tokens`` (``tail``: them joined by spaces) of a
    stream of ``stream_size`` bytes, checked."""
    # Most lines hold only plain, well-formed segments: one regex checks them
    # all, another splits them, both at C speed. Anything else (or a segment
    # past the end) takes the token-by-token loop, which says what is wrong.
    if (
        "\\" not in tail
        and "/" not in tail
        and (":." not in tail or _DOT_NAME.search(tail) is None)
        and _SEGMENTS.fullmatch(tail) is not None
    ):
        positions, lengths, names = zip(*_FIND_SEGMENT.findall(tail), strict=True)
        starts = list(map(int, positions))
        sizes = list(map(int, lengths))
        if max(map(add, starts, sizes)) <= stream_size:
            return list(zip(starts, sizes, names, strict=True))
    segments: list[RawSegment] = []
    match_segment = _SEGMENT.fullmatch
    for token in tokens:
        match = match_segment(token)
        if match is None:
            if ":" in token:
                raise ManifestError(line_no, token, _segment_problem(token))
            try:
                Locator.parse(token)
            except LocatorError:
                raise ManifestError(line_no, token, "bad segment") from None
            raise ManifestError(line_no, token, "locator after a segment")
        position_text, length_text, raw_name = match.groups()
        position = int(position_text)
        length = int(length_text)
        if position >= _MAX_NUMBER or length >= _MAX_NUMBER:
            raise ManifestError(line_no, token, "segment number too large")
        if position + length > stream_size:
            raise ManifestError(line_no, token, "segment past the end of its stream")
        name = _unescape(line_no, token, raw_name) if "\\" in raw_name else raw_name
        # Plain names (the vast majority) skip the component walk.
        if "/" in name or name in (".", ".."):
            _check_file_name(line_no, token, name, length)
        segments.append((position, length, name))
    return segments


def parse_raw_line(line_no: int, data: bytes, cache: dict[str, Locator]) -> tuple[str, RawStream]:
    """Line ``line_no`` of a manifest (its bytes, without the newline),
    decoded and checked alone: for a reader that goes through text a line at a time. ``cache``
    holds locators already parsed (the caller bounds it). A file that is also
    a directory is the caller's to find."""
    line = decode_line(data, line_no)
    return line, _parse_raw(line_no, line, cache)


def _as_text(text: str | bytes) -> str:
    if isinstance(text, bytes | bytearray | memoryview):
        return _decode(bytes(text))
    _check_encodable(text)
    return text


def _lines(text: str) -> Iterator[str]:
    """Each line of ``text`` (which ends in a newline), without holding a list of them."""
    start = 0
    find = text.find
    while (end := find("\n", start)) >= 0:
        yield text[start:end]
        start = end + 1


def _line_source(text: Text) -> Callable[[], Iterator[str]] | None:
    """What goes through ``text``'s lines, each time called; None for no text.

    Bytes are decoded a line at a time, so that a stored manifest's text is
    not held a second time, as a string (a UTF-8 byte sequence never holds a
    newline byte). Any text that would fail to decode whole, or lacks its
    final newline, fails here as it would whole.
    """
    if not isinstance(text, str | bytes | bytearray | memoryview):
        if not text.size:
            return None
        if text.ends_with_newline():
            return text.lines
        text = text.read()  # to report the missing newline as below
    if isinstance(text, str):
        _check_encodable(text)
        whole = text
        if not whole:
            return None
        if whole.endswith("\n"):
            return lambda: _lines(whole)
    else:
        data = bytes(text)
        if not data:
            return None
        if data.endswith(b"\n"):
            return lambda: _byte_lines(data)
        whole = _as_text(data)
    last = whole[whole.rfind("\n") + 1 :].rsplit(" ", 1)[-1]
    raise ManifestError(whole.count("\n") + 1, last, "missing newline at end of manifest")


def _byte_lines(data: bytes) -> Iterator[str]:
    """Each line of ``data`` (ending in a newline), decoded; bytes that are
    not UTF-8 fail as a decode of the whole text does."""
    start = 0
    find = data.find
    while (end := find(b"\n", start)) >= 0:
        try:
            line = data[start:end].decode("utf-8")
        except UnicodeDecodeError:
            _decode(data)  # raises, naming the line
            raise
        yield line
        start = end + 1


def parse_streams(text: Text) -> tuple[Stream, ...]:
    """Parse manifest ``text`` into streams, or raise :class:`ManifestError`."""
    return tuple(stream for _, stream in iter_streams(text))


def iter_streams(text: Text) -> Iterator[tuple[str, Stream]]:
    """Parse manifest ``text`` stream by stream: yield each line with its stream."""
    for line, (name, locators, segments) in iter_raw_streams(text):
        yield line, Stream(name, locators, tuple(starmap(Segment, segments)))


def iter_raw_streams(text: Text) -> Iterator[tuple[str, RawStream]]:
    """Parse manifest ``text`` stream by stream: yield each line with what it says.

    Only one line's segments are held at a time (as tuples, not Segments:
    a million of those cost a second). Every line is checked as it comes; a
    path that is both a file and a directory is found as its line comes too,
    but reported after the last line, so that a malformed line anywhere is
    reported first (as a whole parse would).
    """
    lines = _line_source(text)
    if lines is None:
        return
    dirs = _directories(lines())
    children = _children(dirs)
    cache: dict[str, Locator] = {}
    clash: tuple[int, str] | None = None
    for index, line in enumerate(lines()):
        if len(cache) > _LOCATOR_CACHE:
            cache.clear()  # bounded: a manifest may list millions of blocks
        raw = _parse_raw(index + 1, line, cache)
        if clash is None:
            clash = _clash(index, line, raw, dirs, children)
        yield line, raw
    if clash is not None:
        raise _clash_error(clash, dirs, lines, cache)


def _clash_error(
    clash: tuple[int, str],
    dirs: dict[str, int],
    lines: Callable[[], Iterator[str]],
    cache: dict[str, Locator],
) -> ManifestError:
    """The error for a file (line and path) that is also a directory."""
    file_line, path = clash
    dir_line = dirs[path]
    # The two lines again, read once more rather than held: a fault is rare.
    wanted = (dir_line, file_line)
    all_lines = {i: line for i, line in enumerate(islice(lines(), max(wanted) + 1)) if i in wanted}
    dir_stream = _parse_line(dir_line + 1, all_lines[dir_line], cache)
    file_stream = _parse_line(file_line + 1, all_lines[file_line], cache)
    where = _token_naming(dir_stream, all_lines[dir_line], path, directory=True)
    return ManifestError(
        file_line + 1,
        _token_naming(file_stream, all_lines[file_line], path, directory=False),
        f"{path!r} is a file and also a directory (line {dir_line + 1}: {where!r})",
    )


def _children(dirs: dict[str, int]) -> dict[str, set[str]]:
    """Each directory's path prefix ("" for the root) -> its subdirectories' names.

    A file clashes only with a directory of the same parent: most streams
    have no subdirectory at all, and their segments need no look-up."""
    children: dict[str, set[str]] = {}
    for path in dirs:
        parent, _, base = path.rpartition("/")
        children.setdefault(parent + "/" if parent else "", set()).add(base)
    return children


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


def _directories_into(dirs: dict[str, int], index: int, line: str) -> None:
    head, _, rest = line.partition(" ")
    _line_directories(dirs, index, head, (rest,))


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


def _add_dirs(dirs: dict[str, int], path: str, line_index: int) -> None:
    """Record ``path`` and its parents as directories first seen on that line."""
    while path and path not in dirs:
        dirs[path] = line_index
        path = path.rpartition("/")[0]


def _may_hold_slash(rest: str) -> bool:
    # "/" is never escaped by a writer, but another could write it as \057.
    return "/" in rest or "\\057" in rest


def _directories(lines: Iterable[str]) -> dict[str, int]:
    """Every directory the manifest makes -> index of the line that first makes it.

    A first, light pass over the text (no segment is parsed unless its name
    holds a '/'); a line it cannot read is left to the full parse to report.
    """
    dirs: dict[str, int] = {}
    for index, line in enumerate(lines):
        head, _, rest = line.partition(" ")
        _line_directories(dirs, index, head, (rest,))
    return dirs


def _line_directories(dirs: dict[str, int], index: int, head: str, rests: Iterable[str]) -> None:
    """The directories line ``index`` makes: its stream's name (``head``) and
    the rest of the line, in pieces cut between tokens, each read as needed."""
    try:
        name = unescape_name(head)
    except ValueError:
        return
    prefix = ""
    if name.startswith("./"):
        prefix = name[2:] + "/"
        _add_dirs(dirs, name[2:], index)
    for rest in rests:
        if not _may_hold_slash(rest):
            continue
        for token in rest.split(" "):
            fields = token.split(":", 2)
            if len(fields) < 3:
                continue
            try:
                seg = unescape_name(fields[2])
            except ValueError:
                continue
            if "/" in seg:
                path = prefix + seg
                end = -2 if seg.endswith("/.") else path.rfind("/")
                _add_dirs(dirs, path[:end], index)


def _clash(
    index: int,
    line: str,
    raw: RawStream,
    dirs: dict[str, int],
    children: dict[str, set[str]],
) -> tuple[int, str] | None:
    """(line index, path) of the first file of a stream that is also a directory."""
    stream_name, _, segments = raw
    prefix = "" if stream_name == "." else stream_name[2:] + "/"
    if prefix not in children and not _may_hold_slash(line[line.find(" ") :]):
        return None
    return _clash_in(index, stream_name, segments, dirs, children)


def _clash_in(
    index: int,
    stream_name: str,
    segments: list[RawSegment],
    dirs: dict[str, int],
    children: dict[str, set[str]],
) -> tuple[int, str] | None:
    """(line index, path) of the first of ``segments`` that is a file and
    also a directory."""
    prefix = "" if stream_name == "." else stream_name[2:] + "/"
    kids = children.get(prefix)
    for _, _, name in segments:
        if "/" in name:
            if name.endswith("/.") or prefix + name not in dirs:
                continue
        elif kids is None or name not in kids:
            continue
        return (index, prefix + name)
    return None


def _token_naming(stream: Stream, line: str, path: str, *, directory: bool) -> str:
    """The token of ``line`` that makes ``path`` a file (or a directory), as written."""
    prefix = "" if stream.name == "." else stream.name[2:] + "/"
    tokens = line.split(" ")
    if directory and (prefix == path + "/" or prefix.startswith(path + "/")):
        return tokens[0]  # the stream's own name
    segment_tokens = tokens[len(tokens) - len(stream.segments) :]
    for token, segment in zip(segment_tokens, stream.segments, strict=True):
        full = prefix + segment.name
        if directory and full.startswith(path + "/"):
            return token
        if not directory and full == path:
            return token
    return tokens[0]
