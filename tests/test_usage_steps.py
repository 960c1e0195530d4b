"""Usage per step, measured by each executor (docs/usage.md).

Each step does a known amount of work and reports what it measured of it
itself (counters); what the executor recorded must bound it. No bound on
our speed: only on what a step that did that work was seen to use.
"""

from __future__ import annotations

from pathlib import Path

from jobs_helpers import make_text, put_function, run_job
from warehouse import jobs
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs.counters import step_counters

MB = 1024 * 1024

# Step 0 queues two steps; every step burns CPU until it has used 0.4 s of
# its own, holds 96 MB touched, and writes and reads back 4 MB of scratch.
_WORK = """
import os, time
import warehouse.step as step

start = time.process_time()
while time.process_time() - start < 0.4:
    sum(i * i for i in range(1000))
burnt = time.process_time() - start
held = bytearray(96 * 1024 * 1024)
for i in range(0, len(held), 4096):
    held[i] = 1
with open("scratch.bin", "wb") as f:
    f.write(b"x" * (4 * 1024 * 1024))
with open("scratch.bin", "rb") as f:
    assert len(f.read()) == 4 * 1024 * 1024
if step.number() == 0:
    step.queue(1, "a", "b")
step.counters(burnt_ms=int(burnt * 1000))
"""


def _check(wh: EmbeddedWarehouse, job_id: int, steps: int) -> None:
    found = jobs.list_steps(wh.engine, job_id)
    assert len(found) == steps
    for s in found:
        assert s.state == "done", s
        burnt = step_counters(s)["burnt_ms"] / 1000
        assert s.cpu_seconds is not None and s.wall_seconds is not None
        assert s.cpu_seconds >= 0.5 * burnt, s
        assert s.wall_seconds >= 0.5 * burnt, s
        assert s.peak_memory is not None and s.peak_memory >= 64 * MB, s
        assert s.written_bytes is not None and s.written_bytes >= 4 * MB, s
        assert s.read_bytes is not None and s.read_bytes >= 4 * MB, s


def test_a_python_step_reports_its_cpu_memory_and_bytes(
    wh: EmbeddedWarehouse, tmp_path: Path, executor: str
) -> None:
    fn = put_function(wh, tmp_path, "work.py", _WORK)
    job = run_job(wh, fn, wh.put([make_text(tmp_path / "in")]).pdh, executor=executor)
    assert job.state == "complete", job.error
    _check(wh, job.id, 3)


# A shell step whose work is done by a child it waits for: a Python that
# burns at least 0.4 s of CPU by its own clock and holds 96 MB. The shell
# itself does next to nothing: what is recorded is the child's.
_SHELL = """#!/bin/sh
# PATH starts with the directory holding wh, and its Python (docs/jobs.md).
"$(dirname "$(command -v wh)")/python" - <<'END'
import time
start = time.process_time()
while time.process_time() - start < 0.4:
    sum(i * i for i in range(1000))
held = bytearray(96 * 1024 * 1024)
for i in range(0, len(held), 4096):
    held[i] = 1
END
"""


def test_a_steps_children_are_counted(wh: EmbeddedWarehouse, tmp_path: Path, executor: str) -> None:
    fn = put_function(wh, tmp_path, "work.sh", _SHELL)
    job = run_job(wh, fn, wh.put([make_text(tmp_path / "in")]).pdh, executor=executor)
    assert job.state == "complete", job.error
    (found,) = jobs.list_steps(wh.engine, job.id)
    assert found.cpu_seconds is not None and found.cpu_seconds >= 0.5 * 0.4, found
    assert found.peak_memory is not None and found.peak_memory >= 64 * MB, found


# Step 0 reads half its input's files whole and queues one step per other
# file, which reads that file in two ranges through ``open``; one step ends
# with ``step.done()`` (its quick exit runs no exit handler: the report is
# written before it).
_READS = """
from warehouse import step

reader = step.reader()
files = sorted(reader.files)
if step.number() == 0:
    for path in files[: len(files) // 2]:
        reader.read_file(path)
    step.queue(1, *files[len(files) // 2 :])
else:
    with reader.open(step.step_input()) as f:
        f.read(7)
        f.read()
    if step.step_input() == files[-1]:
        step.done()
"""


def test_a_step_reports_the_bytes_of_warehouse_files_it_read(
    wh: EmbeddedWarehouse, tmp_path: Path, executor: str
) -> None:
    data = make_text(tmp_path / "in")
    sizes = {
        str(p.relative_to(data)): p.stat().st_size for p in sorted(data.rglob("*")) if p.is_file()
    }
    fn = put_function(wh, tmp_path, "reads.py", _READS)
    job = run_job(wh, fn, wh.put([data]).pdh, executor=executor)
    assert job.state == "complete", job.error
    found = jobs.list_steps(wh.engine, job.id)
    names = sorted(sizes)
    first = sum(sizes[n] for n in names[: len(names) // 2])
    assert [s.input_bytes for s in found if s.level == 0] == [first]
    later = {s.input: s.input_bytes for s in found if s.level == 1}
    assert later == {n: sizes[n] for n in names[len(names) // 2 :]}
