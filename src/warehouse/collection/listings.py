"""md5sum listings a client sends with a collection, checked in form.

A listing is a claim: the server cannot tell whether the digests are true
without reading every file. So it is checked in form here (one digest of 32
lowercase hex digits for each file of the manifest, no more, no fewer) and
then kept as the sender's own: it is shown to that user only, never to
another (docs/security.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from warehouse.errors import CorruptDataError, UsageError
from warehouse.manifest import Manifest

__all__ = [
    "Digests",
    "NotWellFormed",
    "OrderedListing",
    "check_listing",
    "listing_pieces",
    "listing_text",
    "ordered_listing",
    "parse_listing",
]


class Digests(Protocol):
    """Each file's recorded MD5 by its path (a dict, or an ``OrderedListing``)."""

    def get(self, path: str, /) -> str | None: ...


_MD5 = re.compile(r"[0-9a-f]{32}")


def check_listing(manifest: Manifest, file_md5s: object) -> dict[str, str]:
    """``file_md5s`` if it is a well-formed listing of exactly ``manifest``'s files.

    Raises UsageError naming the first file (or digest) that is wrong.
    """
    if not isinstance(file_md5s, dict):
        raise UsageError("file_md5s: want an object {path: md5}")
    paths = manifest.file_paths()
    for path, md5 in file_md5s.items():
        if path not in paths:
            raise UsageError(f"file_md5s: {path!r} is not a file of the manifest")
        if not isinstance(md5, str) or _MD5.fullmatch(md5) is None:
            raise UsageError(f"file_md5s: the digest of {path!r} is not 32 lowercase hex digits")
    if len(file_md5s) != len(paths):
        missing = next(p for p in manifest.files() if p not in file_md5s)
        raise UsageError(f"file_md5s: no digest for {missing!r}")
    return file_md5s


def listing_text(manifest: Manifest, file_md5s: Mapping[str, str] | None) -> str | None:
    """The listing as stored (JSON), or None when there is none or it is not well formed.

    The files come in the order of ``manifest`` (normalized, as stored), so
    that a get reads the listing in step with the manifest (``OrderedListing``).
    """
    if not isinstance(file_md5s, Mapping):
        return None
    try:
        return "".join(listing_pieces(manifest, file_md5s, 1 << 24))
    except NotWellFormed:
        return None


class NotWellFormed(Exception):
    """Raised by ``listing_pieces``: the listing is not one of exactly the
    manifest's files (kept by nobody, as before)."""


def listing_pieces(manifest: Manifest, file_md5s: Mapping[str, str], size: int) -> Iterator[str]:
    """The listing's JSON text (as ``listing_text``) in pieces of about
    ``size`` characters, checked and written in one pass, so that a caller
    recording it a piece at a time holds a piece, not the whole text (55 B
    a file). Raises NotWellFormed as soon as a digest is missing or wrong,
    or, at the end, if there are digests of files the manifest does not
    have: a caller that has recorded pieces already undoes them.
    """
    quote = _json_string
    md5_form = _MD5.fullmatch
    chunk: list[str] = []
    held = 1  # the opening brace
    pieces: list[str] = ["{"]
    found = 0
    first = True
    for path in manifest.file_paths_in_order():
        md5 = file_md5s.get(path)
        if not isinstance(md5, str) or md5_form(md5) is None:
            raise NotWellFormed(path)
        chunk.append(f'{quote(path)}:"{md5}"')
        found += 1
        if len(chunk) == _CHUNK:
            text = ",".join(chunk)
            pieces += (text,) if first else (",", text)
            held += len(text) + (0 if first else 1)
            first, chunk = False, []
            if held >= size:
                yield "".join(pieces)
                pieces, held = [], 0
    if found != len(file_md5s):  # a digest of a file the manifest does not have
        raise NotWellFormed()
    if chunk:
        text = ",".join(chunk)
        pieces += (text,) if first else (",", text)
    pieces.append("}")
    yield "".join(pieces)


_CHUNK = 4096
# JSON's own string encoder (C), as json.dumps(..., ensure_ascii=False) writes a key.
_json_string: Callable[[str], str] = json.encoder.encode_basestring


def parse_listing(text: str | None) -> dict[str, str] | None:
    """A stored listing's table of path to MD5; None for no listing. Text
    that is not one is damage (CorruptDataError), never a traceback."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise CorruptDataError("a recorded listing is not a JSON object of paths and MD5s")
    return value


# One entry of a listing as ``listing_text`` writes it: "path":"md5" and then
# the comma or brace after it. A path's JSON escapes are undone only where a
# backslash occurs.
_ENTRY = re.compile(r'"((?:[^"\\]|\\.)*)":"([0-9a-f]{32})"([,}])')


class OrderedListing:
    """A stored listing read in step with the manifest, without a table of it.

    ``listing_text`` writes the files in manifest order, so a get, which
    asks for its files in that order too, finds each one at or after the
    previous one: the text is scanned forward, an entry at a time. A listing
    kept in parts is read a part at a time (``pieces``): only the part being
    scanned, and what is left of the one before it, is held. A listing
    stored in another order or layout (written before it was kept in
    manifest order) is parsed into a dict on the first path not found ahead,
    and answered from that from then on.
    """

    def __init__(
        self,
        text: str,
        rest: Iterable[str] = (),
        whole: Callable[[], str | None] | None = None,
        close: Callable[[], None] | None = None,
    ) -> None:
        """``text``: the listing, or its first part; ``rest``: its parts after
        that, read as needed; ``whole``: the listing read again, whole, for a
        table (needed only with ``rest``); ``close``: lets go of what they
        are read from, once the listing is no longer needed."""
        self._close = close
        self._first = text
        self._text = text
        self._pos = 1  # after the opening brace
        self._rest: Iterator[str] | None = iter(rest)
        self._whole = whole
        self._table: dict[str, str] | None = None

    def close(self) -> None:
        if self._close is not None:
            self._close()

    def get(self, path: str, /) -> str | None:
        if self._table is not None:
            return self._table.get(path)
        match = _ENTRY.match
        if self._first.startswith("{"):
            text, pos = self._text, self._pos
            while True:
                found = match(text, pos)
                if found is None:
                    # An entry may run on into the next part: keep what is
                    # left of this one (the part itself let go before the
                    # next is read) and read on.
                    left = text[pos:]
                    self._text = text = ""
                    piece = None if self._rest is None else next(self._rest, None)
                    if piece is None:
                        self._text, self._pos = left, 0
                        break
                    text, pos = (left + piece if left else piece), 0
                    del piece
                    self._text, self._pos = text, pos
                    continue
                pos = found.end()
                key = found[1]
                if "\\" in key:
                    key = json.loads(f'"{key}"')
                if key == path:
                    self._pos = pos
                    return found[2]
                if found[3] == "}":
                    break
        self._text, self._rest = "", None
        whole = self._first if self._whole is None else self._whole()
        self._first = ""
        table = self._table = parse_listing(whole) or {}
        return table.get(path)


def ordered_listing(
    text: str | None,
    rest: Iterable[str] = (),
    whole: Callable[[], str | None] | None = None,
    close: Callable[[], None] | None = None,
) -> OrderedListing | None:
    """``text`` (a stored listing, or its first part, then ``rest``) read in
    manifest order; None: no listing. See ``OrderedListing``."""
    return None if text is None else OrderedListing(text, rest, whole, close)
