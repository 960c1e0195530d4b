"""A whole manifest's streams, line by line, with the check that no path is
both a file and a directory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import islice

from warehouse.blocks.locator import Locator
from warehouse.manifest.entries import Stream
from warehouse.manifest.escape import unescape_name
from warehouse.manifest.lines import (
    _LOCATOR_CACHE,
    ManifestError,
    RawSegment,
    RawStream,
    Text,
    _line_source,
    _parse_line,
    _parse_raw,
)


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


def _directories_into(dirs: dict[str, int], index: int, line: str) -> None:
    head, _, rest = line.partition(" ")
    _line_directories(dirs, index, head, (rest,))


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
