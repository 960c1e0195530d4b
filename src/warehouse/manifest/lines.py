"""One manifest line parsed and checked: its stream's name, locators and segments."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from itertools import starmap
from operator import add
from typing import Protocol

from warehouse.blocks.locator import Locator, LocatorError
from warehouse.errors import UsageError
from warehouse.manifest.entries import Segment, Stream
from warehouse.manifest.escape import unescape_name

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
