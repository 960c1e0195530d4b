"""builtin:mapreduce with ``partitioner: range``: the reducers' outputs laid end to
end are one sorted whole (a TeraSort); and the pure parts it is made of."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs_helpers import run_job
from test_mapreduce_splits import MAKERS
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import UsageError
from warehouse.jobs.counters import totals
from warehouse.jobs.jobstore import list_steps
from warehouse.mapreduce.formats import first_boundary, records
from warehouse.mapreduce.sample import (
    decode_points,
    encode_points,
    range_partitioner,
    sample_windows,
    split_points,
)
from warehouse.mapreduce.spec import MapReduceSpec

SORT_CODE = """
def pair(line):
    key, _, rest = line.partition(" ")
    yield key, rest


def emit(key, values):
    for v in values:
        yield key + " " + v
"""


def make_records(root: Path, files: int, per_file: int, seed: int) -> list[bytes]:
    """100-byte records: a 10-byte random key, a space, a payload (keys unique)."""
    rng = random.Random(seed)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    root.mkdir(parents=True)
    keys = set()
    lines = []
    for n in range(files):
        body = []
        for _ in range(per_file):
            key = "".join(rng.choices(alphabet, k=10))
            while key in keys:
                key = "".join(rng.choices(alphabet, k=10))
            keys.add(key)
            line = f"{key} {''.join(rng.choices(alphabet, k=88))}\n".encode()
            body.append(line)
        (root / f"records-{n}.txt").write_bytes(b"".join(body))
        lines += body
    return lines


@pytest.mark.slow
def test_a_range_partitioned_sort_is_one_sorted_whole(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    lines = make_records(tmp_path / "records", files=3, per_file=1000, seed=5)  # 300 KB
    pdh = wh.put([tmp_path / "records"]).pdh
    code = tmp_path / "code"
    code.mkdir()
    (code / "terasort.py").write_text(SORT_CODE)
    base = {
        "code": wh.put([code]).pdh,
        "mapper": "terasort:pair",
        "reducer": "terasort:emit",
        "reducers": 3,
        "split_size": "40K",
        "partitioner": "range",
    }
    outputs = []
    for params in (base, {**base, "sort_memory": "64K"}):  # the second spills
        job = run_job(wh, "builtin:mapreduce", pdh, params=params)
        assert job.state == "complete", job.error
        reader = wh.reader(job.output_pdh)
        assert sorted(reader.files) == [f"part-{r:05d}" for r in range(3)]
        parts = [reader.read_file(f"part-{r:05d}") for r in range(3)]
        # Every reducer got a share (the sample's split points divide the keys) ...
        assert all(len(p) > len(lines) * 100 // 10 for p in parts), [len(p) for p in parts]
        # ... and the parts laid end to end are the input sorted.
        assert b"".join(parts).splitlines(keepends=True) == sorted(lines)
        _, total = totals(list_steps(wh.engine, job.id))
        assert total["map_splits"] >= 8 and total["sample_keys"] == len(lines)
        outputs.append((job.output_pdh, total["reduce_spilled_runs"]))
    assert outputs[0][0] == outputs[1][0]
    assert outputs[0][1] == 0 < outputs[1][1]


def test_a_shell_range_sort_with_more_reducers_than_keys(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_bytes(b"b\t1\r1\na\t2\nb\t3\nc\t4\n")  # \r: no line end
    pdh = wh.put([tmp_path / "in"]).pdh
    params = {"mapper": "cat", "reducer": "cat", "reducers": 6, "partitioner": "range"}
    job = run_job(wh, "builtin:mapreduce", pdh, params=params)
    assert job.state == "complete", job.error
    reader = wh.reader(job.output_pdh)
    whole = b"".join(reader.read_file(f"part-{r:05d}") for r in range(6))
    assert whole == b"a\t2\nb\t1\r1\nb\t3\nc\t4\n"  # a key's values in the order they came


def test_partitioner_parameter_is_checked() -> None:
    base = {"mapper": "m:f", "reducer": "m:g"}
    assert MapReduceSpec.from_params(base).partitioner == "hash"
    assert MapReduceSpec.from_params({**base, "partitioner": "range"}).partitioner == "range"
    with pytest.raises(UsageError, match="partitioner must be one of hash, range"):
        MapReduceSpec.from_params({**base, "partitioner": "total"})
    with pytest.raises(UsageError, match="cannot sample whole-file"):
        MapReduceSpec.from_params({**base, "partitioner": "range", "input_format": "whole-file"})


def test_split_points_and_range_partitions() -> None:
    keys = [f"k{i:03d}".encode() for i in range(100)]
    random.Random(1).shuffle(keys)
    points = split_points(keys, 4)
    assert points == [b"k025", b"k050", b"k075"]
    assert decode_points(encode_points(points)) == points
    assert decode_points(encode_points([b"", b"x"])) == [b"", b"x"]  # an empty key too
    part = range_partitioner(points)
    assert [part(k) for k in (b"", b"k024", b"k025", b"k074", b"k075", b"z")] == [0, 0, 1, 2, 3, 3]
    assert split_points([], 4) == [] and range_partitioner([])(b"x") == 0


def test_sample_windows_spread_over_the_input() -> None:
    splits = [("s", 0, 1000), ("s", 1000, 1500), ("t", 0, 2500)]
    assert sample_windows(splits, windows=100, width=100) == [(s, True) for s in splits]
    got = sample_windows(splits, windows=8, width=50)
    assert len(got) == 8
    for (stream, lo, hi), starts_split in got:
        i = next(i for i, s in enumerate(splits) if s[0] == stream and s[1] <= lo < s[2])
        assert hi <= splits[i][2] and hi - lo <= 50
        assert starts_split == (lo == splits[i][1])
    # Evenly spread: the j-th window starts at j/8 of the 4000 input bytes.
    assert [lo for (_, lo, _), _ in got] == [0, 500, 1000, 0, 500, 1000, 1500, 2000]


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["lines", "fasta", "fastq"]),
    st.integers(1, 40),
    st.integers(0, 10_000),
    st.integers(0, 2000),
)
def test_first_boundary_is_a_record_start(fmt: str, n: int, seed: int, cut: int) -> None:
    data = MAKERS[fmt](n, random.Random(seed))
    cut = min(cut, len(data))
    found = first_boundary(fmt, data[cut:])
    starts, pos = set(), 0
    for rec in records(fmt, data):
        starts.add(pos)
        pos += len(rec) + (fmt == "lines")
    if found is not None:
        assert 0 < found < len(data) - cut and cut + found in starts
    elif fmt != "fastq":  # (fastq may pass over the first record: it needs 2 lines above)
        assert not [s for s in starts if cut < s < len(data) - 1]
