"""Write each packed directory's stream and digests to the sink, in walk order,
once its blocks are stored.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import (
    Callable,
    Iterable,
    Iterator,
    Sequence,
)
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import repeat, tee
from typing import TYPE_CHECKING, Any, Protocol

from warehouse.blocks import EMPTY_LOCATOR, Locator
from warehouse.blocks.store import StoredBlock
from warehouse.collection.digests import Digests, FileDigests, digest_table
from warehouse.collection.filecache import FileCache
from warehouse.collection.readahead import Todo
from warehouse.collection.scratch import (
    BlockLog,
    ScratchFile,
    SpilledDigests,
    SpilledHits,
    hex_digests,
)
from warehouse.collection.segmenttext import SegmentText
from warehouse.manifest import Segment, Stream
from warehouse.manifest.entries import FileEntry
from warehouse.manifest.escape import escape_name
from warehouse.manifest.layout import file_entries
from warehouse.manifest.normalize import StreamLayout, normalized_streams

if TYPE_CHECKING:
    from warehouse.collection.spool import Spool


def _laid_out_normalized(stream: Stream) -> bool:
    """Whether a stream of ``write_tree`` is in the normalized form already.

    The writer lays a tree out as that form does: directories depth first in
    name order (the scan's), one stream each, its files in name order, each
    in one segment at its place in the stream, an empty one 0:0, an empty
    directory a marker stream. What it can do otherwise: name a block twice
    (two stretches of the same bytes), or end a stream with an empty block
    (empty files after a file of a block or more); normalizing then lists a
    block once and drops the empty one.
    """
    locators = stream.locators
    if len(locators) == 1:
        return True
    return len({loc.key for loc in locators}) == len(locators) and not any(
        loc.is_empty for loc in locators
    )


def _normalized_text(
    first: Iterable[FileEntry], entries: Callable[[], Iterable[FileEntry]], cut: int
) -> tuple[tuple[Locator, ...], Iterator[bytes]]:
    """The normalized form of one stream too long to hold, from its files'
    entries in name order (``first``, then ``entries()`` gives them again;
    ``cut``: the length of their directory's prefix): its block list, read
    through once, and its segments' text (" position:length:name" each) in
    pieces, made as they are written, a file at a time."""
    layout = StreamLayout()
    for entry in first:
        layout.place(entry.path[cut:], entry)
    locators = layout.locators

    def pieces() -> Iterator[bytes]:
        layout = StreamLayout()
        batch: list[str] = []
        for entry in entries():
            name = entry.path[cut:]
            # A directory's entry: no "/" and never ".", escaped as format_stream does.
            escaped = escape_name(name)
            batch.extend(f" {s.position}:{s.length}:{escaped}" for s in layout.place(name, entry))
            if len(batch) >= _TEXT_BATCH:
                yield "".join(batch).encode()
                batch = []
        if batch:
            yield "".join(batch).encode()
        if layout.locators != locators:
            raise RuntimeError("a stream's files read back differently the second time")

    return locators, pieces()


# Segments formatted at most before they are written out together.
_TEXT_BATCH = 8192


class Sink(Protocol):
    def add(
        self, stream: Stream, rel: str, names: Sequence[str], md5s: bytes | bytearray
    ) -> None: ...


def _parts_sink(sink: Sink) -> Spool | None:
    """The sink as a spool (which takes a stream in parts), if it is one."""
    from warehouse.collection.spool import Spool

    return sink if isinstance(sink, Spool) else None


class Kept:
    """The streams and digests of a put kept in memory (no spool)."""

    def __init__(self) -> None:
        self.streams: list[Stream] = []
        self.digests = FileDigests()
        self.file_count = 0

    def add(self, stream: Stream, rel: str, names: Sequence[str], md5s: bytes | bytearray) -> None:
        self.streams.append(stream)
        if names:
            self.digests.add_directory(rel, names, md5s)
            self.file_count += len(names)


@dataclass
class Packed:
    """A directory read into blocks, waiting for them to be stored."""

    todo: Todo
    blocks: list[Future[StoredBlock]]
    segments: list[Segment] | SegmentText
    md5s: Digests
    tasks: list[Future[Any]]
    changed: list[str]

    def done(self) -> bool:
        return all(t.done() for t in self.tasks)

    def close(self) -> None:
        """Close its scratch files (an error ended the put, its tasks are over)."""
        for made in (self.segments, self.md5s):
            if isinstance(made, ScratchFile):
                made.close()
        self.todo.close()


class SeenKeys:
    """The last ``limit`` keys added, oldest first out: what a put of many
    directories holds of their blocks' keys does not grow with them."""

    def __init__(self, limit: int) -> None:
        self._keys: OrderedDict[str, None] = OrderedDict()
        self._limit = limit

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def add(self, key: str) -> None:
        if key in self._keys:
            self._keys.move_to_end(key)  # seen again: the latest now
            return
        self._keys[key] = None
        if len(self._keys) > self._limit:
            self._keys.popitem(last=False)


# Block keys a put with a resume cache remembers at most (about 10 MB).
_SEEN_KEYS = 1 << 16


# Directories packed and not yet written out at most: their blocks are in
# flight (the buffers bound those), so this is rarely reached.
_PENDING = 64


class Emitter:
    """Writes each packed directory's stream and digests to the sink, in
    walk order, once its blocks are stored."""

    def __init__(self, sink: Sink, cache: FileCache | None, blocks: BlockLog) -> None:
        self.sink = sink
        self.cache = cache
        # Every block, in order (for accounting: one row each), and with a
        # cache the keys seen lately, so a block the cache names is counted
        # once (while among the last _SEEN_KEYS seen: one row more for a
        # block named again after that many others, never a row less).
        self.blocks = blocks
        self._keys = SeenKeys(_SEEN_KEYS)
        self.pending: deque[Packed] = deque()
        self._emitting: Packed | None = None

    def add(self, packed: Packed) -> None:
        self.pending.append(packed)
        while self.pending and (self.pending[0].done() or len(self.pending) > _PENDING):
            self._emit_next()

    def finish(self) -> None:
        while self.pending:
            self._emit_next()

    def _emit_next(self) -> None:
        self._emitting = self.pending.popleft()
        self._emit(self._emitting)
        self._emitting = None

    def close(self) -> None:
        """Close the scratch files of the directories not written out and
        the block log (an error ended the put; its tasks are over)."""
        if self._emitting is not None:
            self._emitting.close()
            self._emitting = None
        while self.pending:
            self.pending.popleft().close()
        self.blocks.close()

    def _emit(self, packed: Packed) -> None:
        stored = [f.result() for f in packed.blocks]
        for task in packed.tasks:
            task.result()  # a file's hash failed: raised here
        # Every task is done: nothing writes to the digests' scratch file any
        # more (on an error the tasks still running hold it open).
        try:
            self._write(packed, stored)
        finally:
            if isinstance(packed.md5s, SpilledDigests):
                packed.md5s.close()

    def _write(self, packed: Packed, stored: list[StoredBlock]) -> None:
        node, files, hits = packed.todo.node, packed.todo.files, packed.todo.hits
        rel = node.rel
        name = f"./{rel}" if rel else "."
        for b in stored:
            if not b.locator.is_empty:
                self.blocks.append(b)
                if self.cache is not None:
                    self._keys.add(b.locator.key)
        if not node.files:
            self.sink.add(Stream(name, (EMPTY_LOCATOR,), (MARKER,)), rel, (), b"")
            return
        locators = tuple(b.locator for b in stored) or (EMPTY_LOCATOR,)
        if isinstance(hits, SpilledHits):
            spool = _parts_sink(self.sink)
            if spool is not None:
                self._write_merged(packed, locators, hits, spool)
                return
            # Kept in memory (no spool): held whole, as a smaller directory's.
            spilled_hits = hits
            try:
                hits = dict(spilled_hits)
            finally:
                spilled_hits.close()
        if isinstance(packed.segments, SegmentText):
            # A directory of more files than are held: into a spool in parts,
            # its locators, then its segments copied from scratch, then its
            # listing entries, as the files are read back.
            text = packed.segments
            try:
                spool = _parts_sink(self.sink)
                # An empty block (empty files after a file of a block or
                # more end a stream with one) holds no piece of any file and
                # shifts no position: normalizing drops it and changes no
                # segment, so the segments' text stands without it.
                if len(locators) > 1 and any(loc.is_empty for loc in locators):
                    locators = tuple(loc for loc in locators if not loc.is_empty) or locators
                if not hits and spool is not None:
                    head: Sequence[Locator] = locators
                    segments: Iterable[bytes]
                    if _laid_out_normalized(Stream(name, locators, ())):
                        segments = text.pieces()
                    else:
                        # A block named twice: the normalized form, its files'
                        # entries read back twice (block list, then segments).
                        def read_back() -> Iterator[FileEntry]:
                            return text.entries(rel, node.files.iter_names(), locators)

                        cut = len(rel) + 1 if rel else 0
                        head, segments = _normalized_text(read_back(), read_back, cut)
                    spool.add_parts(
                        name,
                        head,
                        segments,
                        rel,
                        node.files.iter_names(),
                        packed.md5s,
                        len(node.files),
                        text.data_size,
                    )
                    if hits is not None:
                        # The cache was asked and answered nothing: it learns
                        # every file, read back a file at a time.
                        assert self.cache is not None
                        self.cache.learn_read(
                            node,
                            text.entries(rel, node.files.iter_names(), locators),
                            hex_digests(packed.md5s),
                            set(packed.changed),
                        )
                    return
                # Files the resume cache answers for, or kept in memory:
                # held whole, as a directory of fewer files is.
                stream = text.stream(name, locators)
            finally:
                text.close()
            names: Sequence[str] = list(node.files.iter_names())
            md5s = packed.md5s.read() if isinstance(packed.md5s, SpilledDigests) else packed.md5s
        else:
            # (Spilled files all read through the resume cache are held here.)
            spilled = node.files.spilled
            names = list(node.files.iter_names()) if spilled else node.files.names
            stream = Stream(name, locators, tuple(packed.segments))
            assert not isinstance(packed.md5s, SpilledDigests)  # they go with SegmentText
            md5s = packed.md5s
        if hits is None:
            if not _laid_out_normalized(stream):
                (stream,) = normalized_streams(file_entries([stream]).values())
            self.sink.add(stream, rel, names, md5s)
            return
        written = file_entries([stream]) if files else {}
        entries: list[FileEntry] = []
        read_md5s, md5s = md5s, digest_table(0)
        read: dict[str, str] = {}
        prefix = rel + "/" if rel else ""
        j = 0
        for n in names:
            hit = hits.get(n)
            if hit is not None:
                entries.append(hit.entry)
                md5s += bytes.fromhex(hit.md5)
                for piece in hit.entry.pieces:
                    loc = piece.locator
                    if loc.key not in self._keys and not loc.is_empty:
                        self._keys.add(loc.key)
                        self.blocks.append(StoredBlock(loc, False))
                continue
            digest = read_md5s[16 * j : 16 * j + 16]
            j += 1
            entries.append(written[prefix + n])
            md5s += digest
            read[prefix + n] = digest.hex()
        (stream,) = normalized_streams(entries)
        self.sink.add(stream, rel, names, md5s)
        assert self.cache is not None
        self.cache.learn(node, written, read, set(packed.changed))

    def _write_merged(
        self,
        packed: Packed,
        locators: tuple[Locator, ...],
        hits: SpilledHits,
        spool: Spool,
    ) -> None:
        """A directory of more files than are held, some of which the resume
        cache answers for, into the spool in parts: the files read and the
        hits (each in a scratch file, in name order) merged a file at a time,
        normalized as ``normalized_streams`` would the two held whole."""
        node = packed.todo.node
        rel = node.rel
        text = packed.segments if isinstance(packed.segments, SegmentText) else None
        assert self.cache is not None
        try:
            size = text.data_size if text is not None else 0

            def merged() -> Iterator[tuple[FileEntry, str, bool]]:
                """Each file's entry, MD5 and whether it was read, in name order."""
                reads: Iterator[FileEntry] = iter(())
                if text is not None:
                    reads = text.entries(rel, packed.todo.files.iter_names(), locators)
                digests = hex_digests(packed.md5s)
                cached = iter(hits)
                hit = next(cached, None)
                for file in node.files.iter_names():
                    if hit is not None and hit[0] == file:
                        yield hit[1].entry, hit[1].md5, False
                        hit = next(cached, None)
                    else:
                        yield next(reads), next(digests), True
                if hit is not None or next(reads, None) is not None:
                    raise RuntimeError("a directory's files and hits read back out of step")

            def first() -> Iterator[FileEntry]:
                """``merged`` the first time: the blocks the hits name are
                counted once each, in the order held whole counts them."""
                nonlocal size
                for entry, _, read in merged():
                    if not read:
                        size += entry.size
                        for piece in entry.pieces:
                            loc = piece.locator
                            if loc.key not in self._keys and not loc.is_empty:
                                self._keys.add(loc.key)
                                self.blocks.append(StoredBlock(loc, False))
                    yield entry

            head, segments = _normalized_text(
                first(), lambda: (entry for entry, _, _ in merged()), len(rel) + 1 if rel else 0
            )
            spool.add_parts(
                f"./{rel}" if rel else ".",
                head,
                segments,
                rel,
                node.files.iter_names(),
                (md5 for _, md5, _ in merged()),
                len(node.files),
                size,
            )
            # The files read, learned a file at a time (hits: None): one pass
            # of the merge, which learn_read takes in step (tee holds one).
            entries: Iterable[FileEntry | None] = repeat(None, len(node.files))
            md5s: Iterable[str | None] = repeat(None, len(node.files))
            if text is not None:
                learned = ((e, m) if read else (None, None) for e, m, read in merged())
                by_entry, by_md5 = tee(learned)
                entries = (entry for entry, _ in by_entry)
                md5s = (md5 for _, md5 in by_md5)
            self.cache.learn_read(node, entries, md5s, set(packed.changed))
        finally:
            if text is not None:
                text.close()
            hits.close()


MARKER = Segment(0, 0, ".")
