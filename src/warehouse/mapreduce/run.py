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
from warehouse.mapreduce import formats
from warehouse.mapreduce.functions import (
    Executable,
    Function,
    MapReduceError,
    check_pair_line,
    decode,
    load,
    pair_line,
    stream_through,
)
from warehouse.mapreduce.shuffle import (
    MapSorter,
    group_by_key,
    key_of,
    merge_within,
    partition_of,
)
from warehouse.mapreduce.spec import MapReduceSpec
from warehouse.mapreduce.splits import decode_split, encode_split, plan_splits

__all__ = ["current_file", "run"]

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


def _plan(spec: MapReduceSpec) -> None:
    manifest = step.input_manifest()
    reader = step.reader()
    splits = []
    for name in dict.fromkeys(s.name for s in manifest.streams):
        entries = step.stream_files(name)

        def read(index: int, offset: int, length: int, entries: list = entries) -> bytes:  # type: ignore[type-arg]
            return reader.read_range(entries[index].path, offset, length)

        sizes = [e.size for e in entries]
        splits += plan_splits(name, sizes, spec.input_format, spec.split_size, read)
    if splits:
        step.queue(1, *(encode_split(s) for s in splits))
    step.queue(2, *(str(r) for r in range(spec.reducers)))
    step.counters(map_splits=len(splits))


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


def _map_lines(mapper: Function, fmt: str, path: str, data: bytes) -> Iterator[bytes]:
    if isinstance(mapper, Executable):
        for line in stream_through(mapper, [data], {"WH_MAP_FILE": path}):
            yield check_pair_line(line, "the mapper")
        return
    token = _current_file.set(path)
    try:
        for record in formats.records(fmt, data):
            value = record if fmt == "whole-file" else decode(record)
            for key, v in mapper(value):
                yield pair_line(key, v)
    finally:
        _current_file.reset(token)


def _combine(combiner: Function, lines: Iterator[bytes], partition: int, r: int) -> Iterator[bytes]:
    if isinstance(combiner, Executable):
        out: Iterable[bytes] = (
            check_pair_line(line, "the combiner") for line in stream_through(combiner, lines)
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
        if key < last or partition_of(key, r) != partition:
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
    sorter = MapSorter(r, spec.sort_memory, step.scratch())
    records_in = pairs = 0
    for path, data in _pieces(stream, start, end):
        records_in += formats.count_records(spec.input_format, data)
        for line in _map_lines(mapper, spec.input_format, path, data):
            sorter.add(partition_of(key_of(line), r), line)
            pairs += 1
    out = step.StreamWriter(".")
    written = nbytes = 0
    for p in range(r):
        lines = sorter.partition(p)
        if combiner is not None:
            lines = _combine(combiner, lines, p, r)

        def counted(lines: Iterator[bytes] = lines) -> Iterator[bytes]:
            nonlocal written, nbytes
            for line in lines:
                written += 1
                nbytes += len(line)
                yield line

        out.add_file(f"part-{p:05d}", _chunks(counted()))
    step.intermediate(out.finish())
    step.counters(
        map_records_in=records_in,
        map_records_out=pairs,
        map_output_records=written,
        map_output_bytes=nbytes,
        map_spilled_runs=sorter.spilled_runs,
    )


def _chunks(lines: Iterable[bytes], size: int = 1 << 20) -> Iterator[bytes]:
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

    def counted_in(lines: Iterator[bytes]) -> Iterator[bytes]:
        nonlocal records_in
        for line in lines:
            records_in += 1
            yield line

    def output() -> Iterator[bytes]:
        nonlocal records_out
        if isinstance(reducer, Executable):
            for line in stream_through(reducer, counted_in(merged)):
                records_out += 1
                yield line if line.endswith(b"\n") else line + b"\n"
            return
        for key, group in group_by_key(counted_in(merged)):
            values = (decode(line[len(key) + 1 : -1]) for line in group)
            for text in reducer(decode(key), values):
                records_out += 1
                data = (
                    text
                    if isinstance(text, bytes)
                    else str(text).encode("utf-8", "surrogateescape")
                )
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
