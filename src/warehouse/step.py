"""What a Python step imports: its input, its parameters, and how to report back.

A step is started by the job manager with the protocol's environment
variables (docs/jobs.md). A typical level-1 step::

    from warehouse import step

    out = step.StreamWriter(step.step_input())
    for entry in step.stream_files(step.step_input()):
        out.add_file(entry.path.rsplit("/", 1)[-1], [process(step.reader().read_file(entry.path))])
    step.output(out.finish())

The warehouse is ``$WH_HOME`` (embedded) or ``$WH_URL`` with ``$WH_TOKEN``
(a controller: blocks go to its keep servers, signed for the job's token).
Everything written goes into the same warehouse as blocks; what is reported
(the output fragment, the steps to queue) is appended to ``$WH_RESULT`` and
taken by the manager only if the step exits 0.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from warehouse.blocks import EMPTY_LOCATOR, MAX_BLOCK_SIZE, Locator
from warehouse.blocks.sources import totals as block_totals
from warehouse.collection.reader import CollectionReader, file_bytes_read
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import UsageError
from warehouse.jobs.protocol import append_record, check_queue
from warehouse.jobs.stepside import StepWarehouse  # reads the catalog without SQLAlchemy
from warehouse.manifest import FileEntry, Manifest, Segment, Stream

if TYPE_CHECKING:
    from warehouse.remote.warehouse import RemoteWarehouse

__all__ = [
    "StreamWriter",
    "counters",
    "done",
    "input_manifest",
    "intermediate",
    "intermediates",
    "job",
    "job_input",
    "level",
    "number",
    "output",
    "params",
    "queue",
    "reader",
    "scratch",
    "step_input",
    "stream_files",
    "warehouse",
]


def _env(name: str) -> str:
    value = os.environ.get(name)
    if value is None:
        raise UsageError(f"{name} is not set: this is not running as a step of a job")
    return value


def job() -> int:
    return int(_env("WH_JOB"))


def number() -> int:
    return int(_env("WH_STEP"))


def level() -> int:
    return int(_env("WH_LEVEL"))


def step_input() -> str:
    return _env("WH_STEP_INPUT")


def job_input() -> str:
    return _env("WH_JOB_INPUT")


def params() -> dict[str, Any]:
    value = json.loads(_env("WH_PARAMS"))
    assert isinstance(value, dict)
    return value


def scratch() -> Path:
    return Path(_env("WH_SCRATCH"))


@cache
def warehouse() -> StepWarehouse | RemoteWarehouse:
    """The job's warehouse: ``$WH_URL`` (with ``$WH_TOKEN``) if set, else ``$WH_HOME``."""
    _report_reads_at_exit()
    url = os.environ.get("WH_URL")
    if url:
        from warehouse.remote.warehouse import RemoteWarehouse  # only then: httpx is slow to load

        return RemoteWarehouse(url, _env("WH_TOKEN"))
    wh = StepWarehouse(Path(_env("WH_HOME")))
    # What the step asked of the volume goes to the catalog as it ends
    # (volume_usage: docs/usage.md); nothing if it asked nothing.
    _exit_reports.append(wh.record_volume_usage)
    atexit.register(wh.record_volume_usage)
    return wh


@cache
def input_manifest() -> Manifest:
    return warehouse().manifest(job_input())


@cache
def reader() -> CollectionReader:
    return warehouse().reader(job_input())


def stream_files(stream_name: str, manifest: Manifest | None = None) -> list[FileEntry]:
    """The files of the input stream(s) named ``stream_name``, in manifest order."""
    manifest = manifest or input_manifest()
    prefix = "" if stream_name == "." else stream_name[2:] + "/"
    files = manifest.files()
    seen: dict[str, FileEntry] = {}
    for stream in manifest.streams:
        if stream.name == stream_name:
            for seg in stream.segments:
                if not seg.is_directory_marker and prefix + seg.name not in seen:
                    seen[prefix + seg.name] = files[prefix + seg.name]
    return list(seen.values())


def queue(level: int, *inputs: str) -> None:
    """Queue one step at ``level`` for each input string (one with "" if none)."""
    for text in inputs or ("",):
        check_queue(level, text)
        append_record(_env("WH_RESULT"), {"op": "queue", "level": level, "input": text})


def output(fragment: Manifest | str) -> None:
    """Add to this step's part of the job output (manifest text over stored blocks)."""
    text = fragment.format() if isinstance(fragment, Manifest) else fragment
    append_record(_env("WH_RESULT"), {"op": "output", "manifest": text})


def intermediate(fragment: Manifest | str) -> None:
    """Pass data to later steps of this job without putting it in the output."""
    text = fragment.format() if isinstance(fragment, Manifest) else fragment
    append_record(_env("WH_RESULT"), {"op": "intermediate", "manifest": text})


def counters(**values: int) -> None:
    """Report counters (``records_in=…``); ``wh job show`` adds them up per level and job."""
    append_record(_env("WH_RESULT"), {"op": "counters", "counters": values})


@cache
def _report_reads_at_exit() -> None:
    """Once a step touches its warehouse: report at its end the bytes of
    warehouse files it read (``input_bytes``) and the blocks it was given by
    where they came from (``blocks``, ``block_bytes``; docs/usage.md).
    Counted from here, so what a fork server read before the step began is
    not the step's."""
    start = file_bytes_read()
    blocks_before, bytes_before = block_totals()

    def report() -> None:
        read = file_bytes_read() - start
        blocks_now, bytes_now = block_totals()
        blocks = {k: n - blocks_before[k] for k, n in blocks_now.items() if n > blocks_before[k]}
        sizes = {k: n - bytes_before[k] for k, n in bytes_now.items() if n > bytes_before[k]}
        if (read or blocks) and os.environ.get("WH_RESULT"):
            record: dict[str, object] = {"op": "reads", "input_bytes": read}
            if blocks:
                record.update(blocks=blocks, block_bytes=sizes)
            append_record(os.environ["WH_RESULT"], record)

    _exit_reports.append(report)
    atexit.register(report)


_exit_reports: list[Callable[[], None]] = []


def done() -> NoReturn:
    """End the step now with exit status 0, without tearing the interpreter down.

    Only for a step whose reports are all made (each is written at once) and
    whose output blocks are durable (``StreamWriter.finish`` waits for
    that): what is left at a normal exit is joining idle threads and freeing
    memory, which for a step forked from the fork server means copying the
    pages it shares with the server first (about 20 ms with DuckDB loaded).
    Exit handlers do not run and threads still running are not waited for.
    """
    for report in _exit_reports:  # exit handlers do not run below
        report()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def intermediates(at_level: int) -> list[tuple[int, Manifest]]:
    """(step number, fragment) passed by the finished steps at ``at_level`` of this job."""
    wh = warehouse()
    if not isinstance(wh, StepWarehouse):  # signed for this token by the controller
        found = wh.api.get(f"/jobs/{job()}/steps", level=at_level)
        pairs = [(int(r["number"]), r["intermediate"]) for r in found]
    else:
        pairs = list(wh.intermediates(job(), at_level))
    return [(n, Manifest.parse(text)) for n, text in pairs if text]


class StreamWriter:
    """Write files into one output stream, cutting 64 MiB blocks; ``finish`` gives its line."""

    def __init__(
        self, stream_name: str, wh: EmbeddedWarehouse | RemoteWarehouse | None = None
    ) -> None:
        self.name = stream_name
        self.store = (wh or warehouse()).store
        self._buf = bytearray()
        self._locators: list[Locator] = []
        self._segments: list[Segment] = []
        self._pos = 0

    def add_file(self, name: str, chunks: Iterable[bytes | memoryview]) -> None:
        start = self._pos
        for chunk in chunks:
            self._buf += chunk
            self._pos += len(chunk)
            while len(self._buf) >= MAX_BLOCK_SIZE:
                self._locators.append(self.store.put(self._buf[:MAX_BLOCK_SIZE]).locator)
                del self._buf[:MAX_BLOCK_SIZE]
        self._segments.append(Segment(start, self._pos - start, name))

    def finish(self) -> str:
        """Store what is buffered, wait until durable, and return the stream's manifest line."""
        if self._buf:
            self._locators.append(self.store.put(self._buf).locator)
            self._buf = bytearray()
        self.store.flush()
        stream = Stream(self.name, tuple(self._locators) or (EMPTY_LOCATOR,), tuple(self._segments))
        return stream.format() if self._segments else ""
