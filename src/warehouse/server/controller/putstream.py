"""Recording a collection from a streamed body: a put of any number of files
in memory bounded by a setting, not by the file count.

``POST /api/v1/collections/text`` (docs/server.md) carries three sections
one after another: the manifest text (``manifest_size`` bytes, normalized,
its locators signed for the caller), the caller's listing of the files'
MD5s as one JSON object in manifest order (``listing_size`` bytes; none
when 0, as a put of manifest text sends it), and the block writes of the
put, a line ``md5 size new`` each, each of a block the manifest names (see
``_Claims``). The body is spooled
to unnamed scratch files as it comes (at most ``max_spooled`` bytes, a
setting); then the text is read a line (a stream) at a time, each line
checked (form, normalized order, signatures) and its files' listing
entries checked against it, and the portable text and listing written to
a put's ``Spool``, which is recorded exactly as an embedded put records
its own: same PDH, same blocks, same catalog rows. What is held at once is
one line (at most ``max_manifest`` bytes, the bound a whole manifest has
on ``POST /collections``) and its ancestors' file names (as many
characters at most).
"""

from __future__ import annotations

import codecs
import contextlib
import json
import os
import re
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from fastapi import HTTPException

from warehouse import catalog
from warehouse.blocks import MAX_BLOCK_SIZE, Locator
from warehouse.blocks.signing import Check, check_signature
from warehouse.catalog.holdings import record_block_bytes
from warehouse.collection.records import store_spooled
from warehouse.collection.spool import Spool
from warehouse.errors import UsageError
from warehouse.manifest.normal import Ancestors, NormalOrder, TooManyNames, is_marker, portable_line
from warehouse.manifest.parse import ManifestError, parse_raw_line
from warehouse.server.controller.quota import check_quota
from warehouse.server.controller.state import ControllerState

__all__ = ["Body", "block_refusal", "record_streamed"]

# What the body is read into before its sections go to their files.
_BUFFER = 1 << 20
# Locators already parsed or checked, kept for the next lines (a block holds
# many small files across directories); cleared when this many. A tree of
# one-file directories names a block a line: 100,000 of them held about
# 0.5 KB each (the parsed locator and the checked one) for few hits.
_CACHE = 10_000
# Block writes recorded per catalog write.
_WRITES_BATCH = 10_000
# The longest block write line taken: "md5 size new\n" is at most 45 bytes.
_WRITE_LINE = 64
_MD5 = re.compile(r"[0-9a-f]{32}")
# JSON's own string encoder, as a put's spool writes each path.
_quote: Callable[[str], str] = json.encoder.encode_basestring


def block_refusal(verdict: Check) -> str | None:
    """Why a block with this signature verdict is refused (None: it is not)."""
    return {
        Check.MISSING: "is not signed",
        Check.EXPIRED: "has an expired signature",
        Check.BAD: "is not signed for this token and size",
    }.get(verdict)


class Body:
    """A streamed put's body, spooled to three unnamed scratch files as it
    comes: gone when closed or when the process dies."""

    def __init__(self, directory: Path | None, manifest_size: int, listing_size: int) -> None:
        self.sizes = (manifest_size, listing_size)
        self.files: list[IO[bytes]] = []
        try:
            for _ in range(3):
                # Held open for the request and closed by close(): no `with`.
                self.files.append(tempfile.TemporaryFile(dir=directory, prefix="put-body-"))  # noqa: SIM115
        except BaseException:
            self.close()
            raise
        self.received = 0
        self._pending: list[bytes] = []
        self._pending_size = 0

    @property
    def seen(self) -> int:
        """Bytes of the body come so far."""
        return self.received + self._pending_size

    def add(self, chunk: bytes) -> bool:
        """Keep ``chunk``; True when enough is buffered to be written (``flush``)."""
        self._pending.append(chunk)
        self._pending_size += len(chunk)
        return self._pending_size >= _BUFFER

    def flush(self) -> None:
        """Write what is buffered to its section's file (blocking: in a thread)."""
        data = b"".join(self._pending)
        self._pending.clear()
        self._pending_size = 0
        at = self.received
        self.received += len(data)
        bounds = (0, self.sizes[0], self.sizes[0] + self.sizes[1])
        for section, start in enumerate(bounds):
            end = bounds[section + 1] if section < 2 else None
            lo = max(at, start)
            hi = at + len(data) if end is None else min(at + len(data), end)
            if lo < hi:
                self.files[section].write(data[lo - at : hi - at])

    def close(self) -> None:
        for f in self.files:
            f.close()


class _Listing:
    """The listing section read forward a piece at a time, entry by entry."""

    def __init__(self, f: IO[bytes]) -> None:
        f.seek(0)
        self._f = f
        self._decode = codecs.getincrementaldecoder("utf-8")().decode
        self._text = ""
        self._pos = 0
        self._eof = False

    def _fill(self, need: int) -> None:
        while len(self._text) - self._pos < need and not self._eof:
            data = self._f.read(_BUFFER)
            self._eof = not data
            try:
                more = self._decode(data, final=self._eof)
            except UnicodeDecodeError:
                raise UsageError("file_md5s: invalid UTF-8") from None
            self._text = self._text[self._pos :] + more
            self._pos = 0

    def expect(self, text: str) -> bool:
        """Whether ``text`` comes next (then read past it)."""
        self._fill(len(text))
        if not self._text.startswith(text, self._pos):
            return False
        self._pos += len(text)
        return True

    def take(self, count: int) -> str:
        self._fill(count)
        out = self._text[self._pos : self._pos + count]
        self._pos += len(out)
        return out

    def at_end(self) -> bool:
        self._fill(1)
        return self._pos >= len(self._text)


def _lines(f: IO[bytes], limit: int) -> Iterator[tuple[int, bytes]]:
    """Each line of the text (its number, its bytes without the newline); a
    line over ``limit`` bytes is refused before it is read whole."""
    f.seek(0)
    number = 0
    while data := f.readline(limit + 1):
        number += 1
        if not data.endswith(b"\n"):
            if len(data) > limit:
                raise HTTPException(
                    413,
                    f"manifest line {number}: over {limit} bytes (the controller's max "
                    "manifest size, the most of one stream it holds)",
                )
            last = data.rsplit(b" ", 1)[-1].decode("utf-8", "backslashreplace")
            raise ManifestError(number, last, "missing newline at end of manifest")
        yield number, data[:-1]


def record_streamed(
    state: ControllerState, body: Body, user: catalog.User, token: str
) -> catalog.CollectionRecord:
    """Check the spooled ``body`` and record its collection for ``user``
    (UsageError or HTTPException naming what is wrong; nothing recorded)."""
    config = state.config
    check = None if user.admin else _Signatures(state, token)
    listed_none = body.sizes[1] == 0  # a put of manifest text: no listing
    listing = _Listing(body.files[1])
    if not listed_none and not listing.expect("{"):
        raise UsageError(
            "file_md5s: want a JSON object {path: md5} in manifest order, the "
            "listing_size bytes after the manifest's manifest_size (are they its sizes?)"
        )
    writes = body.files[2]
    claims = None if body.received == sum(body.sizes) else _Claims(config.scratch)
    with Spool(config.scratch) as spool, contextlib.ExitStack() as stack:
        if claims is not None:
            stack.callback(claims.close)
        order = NormalOrder()
        ancestors = Ancestors(config.max_manifest)
        cache: dict[str, Locator] = {}
        listed = 0
        # The distinct blocks' bytes, for the quota: a file may name one byte
        # of a whole block (the set is bounded as the manifest text is).
        seen: set[str] = set()
        block_bytes = 0
        for number, data in _lines(body.files[0], config.max_manifest):
            if len(cache) > _CACHE:
                cache.clear()
            line, (name, locators, segments) = parse_raw_line(number, data, cache)
            if check is not None:
                for locator in locators:
                    check.block(number, locator)
            if claims is not None:
                claims.named(locators)
            for locator in locators:
                if locator.key not in seen:
                    seen.add(locator.key)
                    block_bytes += locator.size
            sums = order.line(line, name, locators, segments)
            if sums is None:
                raise ManifestError(
                    number,
                    line[: line.find(" ")],
                    "not in normalized form (send such text to POST /api/v1/collections)",
                )
            names = [] if is_marker(segments[0][2]) else _files(segments)
            try:
                clash = ancestors.enter(number, name, set(names))
            except TooManyNames as e:
                raise HTTPException(
                    413,
                    f"{e} (the controller's max manifest size, the most of them it holds)",
                ) from None
            if clash is not None:
                raise ManifestError(number, line[: line.find(" ")], clash)
            prefix = "" if name == "." else name[2:] + "/"
            entries = []
            for file_name in [] if listed_none else names:
                path = prefix + file_name
                if not listing.expect(("," if listed else "") + _quote(path) + ':"'):
                    raise UsageError(
                        f"file_md5s: the next entry is not {path!r} (a listing names "
                        "the manifest's files, in manifest order, each once, in compact "
                        'JSON: "path":"md5" and commas, no spaces, names escaped only '
                        'where JSON must be: " \\ and control characters)'
                    )
                md5 = listing.take(32)
                if _MD5.fullmatch(md5) is None or not listing.expect('"'):
                    raise UsageError(
                        f"file_md5s: the digest of {path!r} is not 32 lowercase hex digits"
                    )
                entries.append(f'{_quote(path)}:"{md5}"')
                listed += 1
            hinted = any(loc.hints for loc in locators)
            portable = portable_line(line, locators) if hinted else line
            spool.add_line((portable + "\n").encode(), sums[0], sums[1])
            spool.add_entries(",".join(entries))
        if not listed_none and (not listing.expect("}") or not listing.at_end()):
            raise UsageError(
                "file_md5s: more than the manifest's files, or not one JSON object of "
                "listing_size bytes after the manifest's manifest_size (are they its sizes?)"
            )
        if claims is not None:
            # Every line checked, and its block named by the manifest,
            # before anything is recorded.
            claims.check(_writes(writes))
        check_quota(state, user, spool.pdh, max(spool.size, block_bytes))
        record = store_spooled(
            state.keep(), state.engine, spool, user.name, listing=not listed_none
        )
        record_block_bytes(state.engine, record.pdh, block_bytes)
    # The put's accounting only once its collection is recorded (as POST
    # /collections does): a put that fails to store records neither.
    batch: list[tuple[str, int, bool]] = []
    for write in [] if claims is None else _writes(writes):
        batch.append(write)
        if len(batch) == _WRITES_BATCH:
            catalog.record_block_writes(state.engine, user.name, batch)
            batch.clear()
    catalog.record_block_writes(state.engine, user.name, batch)
    return record


def _files(segments: list[tuple[int, int, str]]) -> list[str]:
    """The stream's files' names, in order (a file's segments are adjacent)."""
    names: list[str] = []
    for _, _, name in segments:
        if not names or names[-1] != name:
            names.append(name)
    return names


def _writes(f: IO[bytes]) -> Iterator[tuple[str, int, bool]]:
    """The block writes section: ``md5 size new`` a line (new: 0 or 1)."""
    f.seek(0)
    number = 0
    # A line read at most its longest and a byte more: one never ending is
    # refused by its start, not read whole.
    while line := f.readline(_WRITE_LINE + 1):
        number += 1
        fields = line.split()
        if (
            len(line) > _WRITE_LINE
            or len(fields) != 3
            or _MD5.fullmatch(fields[0].decode("ascii", "replace")) is None
            or not fields[1].isdigit()
            or len(fields[1]) > 9
            or int(fields[1]) > MAX_BLOCK_SIZE
            or fields[2] not in (b"0", b"1")
            or not line.endswith(b"\n")
        ):
            shown = line[:80].decode("utf-8", "backslashreplace")
            raise UsageError(f"block_writes line {number}: want 'md5 size 0|1': {shown!r}")
        yield fields[0].decode(), int(fields[1]), fields[2] == b"1"


class _Claims:
    """The put's block writes held against the blocks its manifest names:
    a write must name a block of the manifest, with its size, and a block
    is written at most as often as the manifest's streams name it (a real
    put writes a block once for each directory whose files it packed into
    it, so two directories alike write their block twice). Both lists go
    to a scratch SQLite database, not memory: a body may list a hundred
    million of either."""

    def __init__(self, directory: Path | None) -> None:
        fd, path = tempfile.mkstemp(dir=directory, prefix="put-claims-")
        try:
            os.close(fd)
            self._db = sqlite3.connect(path, check_same_thread=False)
            # Nothing here outlives the request: no journal, no syncs.
            self._db.executescript(
                "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;"
                "CREATE TABLE named (key TEXT, size INTEGER);"
                "CREATE TABLE written (line INTEGER PRIMARY KEY, key TEXT, size INTEGER);"
            )
        finally:
            os.unlink(path)  # the open database stays (once made); its name goes, whatever failed
        self._named: list[tuple[str, int]] = []

    def named(self, locators: tuple[Locator, ...]) -> None:
        """The blocks one stream of the manifest names (each once)."""
        self._named.extend((loc.md5, loc.size) for loc in locators)
        if len(self._named) >= _WRITES_BATCH:
            self._flush()

    def _flush(self) -> None:
        self._db.executemany("INSERT INTO named VALUES (?, ?)", self._named)
        self._named.clear()

    def check(self, writes: Iterator[tuple[str, int, bool]]) -> None:
        """UsageError naming the first write line that claims a block the
        manifest does not name (with that size), or one more time than its
        streams name it."""
        self._flush()
        batch: list[tuple[int, str, int]] = []
        for number, (md5, size, _) in enumerate(writes, 1):
            batch.append((number, md5, size))
            if len(batch) >= _WRITES_BATCH:
                self._db.executemany("INSERT INTO written VALUES (?, ?, ?)", batch)
                batch.clear()
        self._db.executemany("INSERT INTO written VALUES (?, ?, ?)", batch)
        self._db.execute("CREATE INDEX named_block ON named (key, size)")
        # Each block's count taken once (grouped), not counted again for
        # each of its writes: a tree of a million directories holding the
        # same file names one block a million times, and a count per write
        # took the square of that.
        bad = self._db.execute(
            "SELECT w.line, w.key, w.size, w.nth, coalesce(n.times, 0) AS times"
            " FROM (SELECT line, key, size, row_number() OVER"
            "  (PARTITION BY key, size ORDER BY line) AS nth FROM written) AS w"
            " LEFT JOIN (SELECT key, size, count(*) AS times FROM named"
            "  GROUP BY key, size) AS n ON n.key = w.key AND n.size = w.size"
            " WHERE w.nth > coalesce(n.times, 0) ORDER BY w.line LIMIT 1"
        ).fetchone()
        if bad is None:
            return
        number, md5, size, nth, times = bad
        if not times:
            raise UsageError(
                f"block_writes line {number}: block {md5}+{size} is not in the manifest "
                "with that size (a put writes only blocks its manifest names)"
            )
        raise UsageError(
            f"block_writes line {number}: block {md5}+{size} written {nth} times, more "
            f"than the {times} streams of the manifest that name it"
        )

    def close(self) -> None:
        self._db.close()


class _Signatures:
    """Every block signed for the caller, its size included (DESIGN §3.4)."""

    def __init__(self, state: ControllerState, token: str) -> None:
        self._state = state
        self._token = token
        self._good: set[str] = set()  # locators (as written) already checked

    def block(self, number: int, locator: Locator) -> None:
        if locator.is_empty:
            return
        written = str(locator)
        if written in self._good:
            return
        state = self._state
        verdict = check_signature(
            locator, self._token, state.signing_key, state.config.signature_ttl
        )
        why = block_refusal(verdict)
        if why is not None:
            raise HTTPException(403, f"manifest line {number}: block {locator.key} {why}")
        # An old-format signature does not cover the size: ask the keep
        # servers for a block of exactly that size.
        if verdict is Check.LEGACY and not state.keep().exists(locator.without_hints()):
            raise HTTPException(
                400, f"manifest line {number}: block {locator.key}: no block of that size is stored"
            )
        if len(self._good) > _CACHE:
            self._good.clear()
        self._good.add(written)
