"""The steps of a MapReduce job (DESIGN §5.6), run inside ``warehouse.step``.

- Step 0 plans the splits, queues one level-1 map step per split and R
  level-2 reduce steps.
- A map step reads its split, maps every record, and passes on one stream
  whose file ``part-NNNNN`` holds partition r's ``key<TAB>value`` lines
  sorted by key (combined, if there is a combiner).
- Reduce step r reads ``part-r`` of every map output (only those bytes),
  merges the sorted runs, streams each key's values to the reducer and
  writes ``output_name.format(r)`` into the output's root stream.
"""

from __future__ import annotations

import contextvars
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from warehouse import step
from warehouse.collection.reader import CollectionReader
from warehouse.errors import UsageError
from warehouse.manifest.entries import FileEntry
from warehouse.mapreduce import formats
from warehouse.mapreduce.functions import (
    Executable,
    Function,
    MapReduceError,
    check_pair_line,
    decode,
    encode,
    line_batches,
    load,
    pair_line,
    stream_blocks,
    stream_through,
)
from warehouse.mapreduce.sample import (
    Partitioner,
    decode_points,
    encode_points,
    hash_partitioner,
    range_partitioner,
    sample_windows,
    split_points,
)
from warehouse.mapreduce.shuffle import (
    MapSorter,
    group_by_key,
    key_of,
    merge_within,
)
from warehouse.mapreduce.spec import MapReduceSpec
from warehouse.mapreduce.splits import decode_split, encode_split, plan_splits

__all__ = ["POINTS", "current_file", "run"]

POINTS = "split-points"  # step 0's intermediate file with a range partitioning's split points
_BATCH = 4096  # a Python mapper's pairs handled at once

_current_file: contextvars.ContextVar[str] = contextvars.ContextVar("current_file", default="")


def current_file() -> str:
    """The path (in the input collection) of the file the record being mapped is from."""
    return _current_file.get()


def run(spec: MapReduceSpec) -> None:
    """Do this step's part of the MapReduce ``spec`` (the level says which)."""
    try:
        if step.level() == 0:
            _plan(spec)
        elif step.level() == 1:
            _map(spec, *decode_split(step.step_input()))
        else:
            _reduce(spec, int(step.step_input()))
    except UsageError as e:  # MapReduceError too: a broken contract, named in the log
        print(f"mapreduce: {e}", file=sys.stderr)
        raise SystemExit(1) from None


def _code_dir(spec: MapReduceSpec) -> Path | None:
    if spec.code is None:
        return None
    from warehouse.jobs.functions import materialize

    wh = step.warehouse()
    files = sorted(wh.manifest(spec.code).files())
    if not files:
        raise MapReduceError(f"the code collection {spec.code} is empty")
    # Beside the job's own function versions (unpacked once per machine), or in the
    # step's scratch when that is not writable: a sandboxed step sees only its own
    # function's directory, read-only.
    root = Path(os.environ["WH_FUNCTION_DIR"]).parent
    try:
        return materialize(wh, root, spec.code, files[0])
    except OSError:
        scratch = Path(os.environ.get("WH_SCRATCH") or tempfile.gettempdir())
        return materialize(wh, scratch / "code", spec.code, files[0])


class _Ranges:
    """Byte ranges of the input's files, keeping the last block fetched: the
    plan's reads go forward, so most of them share one fetch."""

    def __init__(self, reader: CollectionReader) -> None:
        self.reader = reader
        self._key: str | None = None
        self._block: bytes | memoryview = b""

    def read(self, entry: FileEntry, offset: int, length: int) -> bytes:
        out = bytearray()
        pos = 0  # file offset where the current piece starts
        for piece in entry.pieces:
            end = pos + piece.length
            if end > offset and pos < offset + length:
                if piece.locator.key != self._key:
                    self._block = self.reader.get_block(piece.locator)
                    self._key = piece.locator.key
                lo, hi = max(offset, pos) - pos, min(offset + length, end) - pos
                out += self._block[piece.offset + lo : piece.offset + hi]
            pos = end
            if pos >= offset + length:
                break
        return bytes(out)


def _plan(spec: MapReduceSpec) -> None:
    manifest = step.input_manifest()
    ranges = _Ranges(step.reader())
    splits = []
    for name in dict.fromkeys(s.name for s in manifest.streams):
        entries = step.stream_files(name)

        def read(index: int, offset: int, length: int, entries: list = entries) -> bytes:  # type: ignore[type-arg]
            return ranges.read(entries[index], offset, length)

        sizes = [e.size for e in entries]
        paths = [e.path for e in entries]
        splits += plan_splits(name, sizes, spec.input_format, spec.split_size, read, paths)
    counters = {"map_splits": len(splits)}
    if spec.partitioner == "range":
        keys = _sample_keys(spec, splits, ranges)
        out = step.StreamWriter(".")
        out.add_file(POINTS, [encode_points(split_points(keys, spec.reducers))])
        step.intermediate(out.finish())
        counters["sample_keys"] = len(keys)
    if splits:
        step.queue(1, *(encode_split(s) for s in splits))
    step.queue(2, *(str(r) for r in range(spec.reducers)))
    step.counters(**counters)


def _sample(
    fmt: str, window: tuple[str, int, int], starts_split: bool, ranges: _Ranges
) -> Iterator[tuple[str, bytes]]:
    """(file path, whole records) of one sample window, file by file."""
    stream, start, end = window
    pos = 0
    for entry in step.stream_files(stream):
        lo, hi = max(start, pos), min(end, pos + entry.size)
        if lo < hi:
            at_end = hi == pos + entry.size
            # One byte more inside a file: a record starting right at `hi` ends the last one.
            data = ranges.read(entry, lo - pos, hi - lo + (not at_end))
            known = lo == pos or (lo == start and starts_split)  # a record starts at lo
            first = 0 if known else formats.first_boundary(fmt, data)
            last = hi - lo if at_end else formats.last_boundary(fmt, data, hi - lo)
            if first is not None and last is not None and last > first:
                yield entry.path, data[first:last]
        pos += entry.size
        if pos >= end:
            return


def _sample_keys(
    spec: MapReduceSpec, splits: list[tuple[str, int, int]], ranges: _Ranges
) -> list[bytes]:
    """The keys the mapper makes from a sample of the input (sample.py)."""
    mapper = load(spec.mapper, _code_dir(spec))
    # Whole records of each file together (at most WINDOWS x WIDTH bytes in all):
    # an executable mapper starts once a file, not once a window.
    by_file: dict[str, list[bytes]] = {}
    for window, starts_split in sample_windows(splits):
        for path, data in _sample(spec.input_format, window, starts_split, ranges):
            by_file.setdefault(path, []).append(data)
    keys: list[bytes] = []
    for path, pieces in by_file.items():
        for batch in _map_batches(mapper, spec.input_format, path, b"".join(pieces)):
            keys += _keys(batch, "the mapper")
    return keys


def _partitioner(spec: MapReduceSpec) -> Partitioner:
    if spec.partitioner == "hash":
        return hash_partitioner(spec.reducers)
    store = step.warehouse().store
    for _, fragment in step.intermediates(0):
        reader = CollectionReader(store, fragment)
        if POINTS in reader.files:
            return range_partitioner(decode_points(reader.read_file(POINTS)))
    raise MapReduceError("the split points step 0 chose are missing")


def _pieces(stream: str, start: int, end: int) -> Iterator[tuple[str, bytes]]:
    """(file path, bytes) of the split, file by file."""
    reader = step.reader()
    pos = 0
    for entry in step.stream_files(stream):
        lo, hi = max(start, pos), min(end, pos + entry.size)
        if lo < hi:
            yield entry.path, reader.read_range(entry.path, lo - pos, hi - lo)
        pos += entry.size
        if pos >= end:
            return


def _map_batches(mapper: Function, fmt: str, path: str, data: bytes) -> Iterator[list[bytes]]:
    """The mapper's ``key<TAB>value`` lines for ``data``, in lists."""
    if isinstance(mapper, Executable):
        yield from line_batches(stream_blocks(mapper, [data], {"WH_MAP_FILE": path}))
        return
    token = _current_file.set(path)
    try:
        batch: list[bytes] = []
        for record in formats.records(fmt, data):
            value = record if fmt == "whole-file" else decode(record)
            batch += [pair_line(key, v) for key, v in mapper(value)]
            if len(batch) >= _BATCH:
                yield batch
                batch = []
        if batch:
            yield batch
    finally:
        _current_file.reset(token)


def _keys(lines: list[bytes], who: str) -> list[bytes]:
    """The key of every line; a line without a tab fails the step, named."""
    tabs = [line.find(b"\t") for line in lines]
    if -1 in tabs:
        check_pair_line(lines[tabs.index(-1)], who)
    return [line[:at] for line, at in zip(lines, tabs, strict=True)]


def _combine(
    combiner: Function, lines: Iterable[bytes], partition: int, partitioner: Partitioner
) -> Iterator[bytes]:
    if isinstance(combiner, Executable):
        out: Iterable[bytes] = (
            check_pair_line(line, "the combiner")
            for line in stream_through(combiner, _chunks(lines))
        )
    else:
        out = (
            pair_line(k, v)
            for key, group in group_by_key(lines)
            for k, v in combiner(decode(key), (decode(line[len(key) + 1 : -1]) for line in group))
        )
    last = b""
    for line in out:
        key = key_of(line)
        if key < last or partitioner(key) != partition:
            raise MapReduceError(
                f"the combiner must keep each key it is given (wrote {decode(key)!r})"
            )
        last = key
        yield line


def _map(spec: MapReduceSpec, stream: str, start: int, end: int) -> None:
    code = _code_dir(spec)
    mapper = load(spec.mapper, code)
    combiner = load(spec.combiner, code) if spec.combiner is not None else None
    r = spec.reducers
    partitioner = _partitioner(spec)
    sorter = MapSorter(r, spec.sort_memory, step.scratch())
    records_in = pairs = 0
    for path, data in _pieces(stream, start, end):
        records_in += formats.count_records(spec.input_format, data)
        for batch in _map_batches(mapper, spec.input_format, path, data):
            keys = _keys(batch, "the mapper")
            parts = [0] * len(keys) if r == 1 else [partitioner(k) for k in keys]
            sorter.add_batch(batch, parts)
            pairs += len(batch)
        del data
    out = step.StreamWriter(".")
    written = nbytes = 0
    for p in range(r):
        lines = sorter.partition(p)
        if combiner is not None:
            lines = _combine(combiner, lines, p, partitioner)

        def counted(lines: Iterable[bytes] = lines) -> Iterator[bytes]:
            nonlocal written, nbytes
            for chunk in _chunks(lines):
                written += chunk.count(b"\n")
                nbytes += len(chunk)
                yield chunk

        out.add_file(f"part-{p:05d}", counted())
    step.intermediate(out.finish())
    step.counters(
        map_records_in=records_in,
        map_records_out=pairs,
        map_output_records=written,
        map_output_bytes=nbytes,
        map_spilled_runs=sorter.spilled_runs,
    )


def _counted_chunks(chunks: Iterable[bytes], counter: list[int]) -> Iterator[bytes]:
    """``chunks`` passed on, their lines added to ``counter[0]``."""
    for chunk in chunks:
        counter[0] += chunk.count(b"\n")
        yield chunk


def _chunks(lines: Iterable[bytes], size: int = 1 << 20) -> Iterator[bytes]:
    """Lines joined into chunks of about ``size`` bytes (a list by slices, in C)."""
    if isinstance(lines, list):
        sample = lines[:64]
        count = max(1, size * len(sample) // max(1, sum(map(len, sample))))
        for i in range(0, len(lines), count):
            yield b"".join(lines[i : i + count])
        return
    buf: list[bytes] = []
    held = 0
    for line in lines:
        buf.append(line)
        held += len(line)
        if held >= size:
            yield b"".join(buf)
            buf, held = [], 0
    if buf:
        yield b"".join(buf)


def _reduce(spec: MapReduceSpec, r: int) -> None:
    code = _code_dir(spec)
    reducer = load(spec.reducer, code)
    store = step.warehouse().store
    sources = []
    name = f"part-{r:05d}"
    for _, fragment in sorted(step.intermediates(1), key=lambda pair: pair[0]):
        reader = CollectionReader(store, fragment, readahead=1)
        entry = reader.files.get(name)
        if entry is not None and entry.size:
            sources.append((entry.size, (c for _, c in reader.iter_chunks([entry]))))
    shuffled = sum(size for size, _ in sources)
    merged, runs, spilled = merge_within(sources, spec.sort_memory, step.scratch())  # type: ignore[arg-type]
    records_in = records_out = 0
    counter = [0]  # lines fed to an executable reducer (by its writer thread)

    def counted_in(lines: Iterable[bytes]) -> Iterator[bytes]:
        nonlocal records_in
        for line in lines:
            records_in += 1
            yield line

    def output() -> Iterator[bytes]:
        nonlocal records_in, records_out
        if isinstance(reducer, Executable):
            last = b"\n"
            for block in stream_blocks(reducer, _counted_chunks(_chunks(merged), counter)):
                records_out += block.count(b"\n")
                last = block[-1:]
                yield block
            if last != b"\n":  # a last line without its newline
                records_out += 1
                yield b"\n"
            records_in = counter[0]
            return
        for key, group in group_by_key(counted_in(merged)):
            values = (decode(line[len(key) + 1 : -1]) for line in group)
            for text in reducer(decode(key), values):
                records_out += 1
                data = encode(text)
                yield data if data.endswith(b"\n") else data + b"\n"

    out = step.StreamWriter(".")
    out.add_file(spec.output_name.format(r), _chunks(output()))
    step.output(out.finish())
    step.counters(
        reduce_records_in=records_in,
        reduce_records_out=records_out,
        shuffle_bytes=shuffled,
        reduce_spilled_runs=runs,
        reduce_spilled_bytes=spilled,
    )
