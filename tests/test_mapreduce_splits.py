"""Splits are cut at record boundaries, at most split_size, and lose no byte (pure)."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from warehouse.errors import UsageError
from warehouse.mapreduce.formats import count_records, records
from warehouse.mapreduce.splits import decode_split, encode_split, plan_splits


def fastq(n: int, rng: random.Random) -> bytes:
    out = []
    for i in range(n):
        seq = "".join(rng.choice("ACGT") for _ in range(rng.randint(1, 30)))
        qual = "".join(rng.choice("@+!#I") for _ in seq)  # quality may start with @ or +
        out.append(f"@r{i}\n{seq}\n+\n{qual}\n")
    return "".join(out).encode()


def fasta(n: int, rng: random.Random) -> bytes:
    out = []
    for i in range(n):
        lines = ["".join(rng.choice("ACGT") for _ in range(rng.randint(1, 20)))]
        lines *= rng.randint(1, 3)
        out.append(f">s{i} desc\n" + "\n".join(lines) + "\n")
    return "".join(out).encode()


def lines(n: int, rng: random.Random) -> bytes:
    return b"".join(b"x" * rng.randint(0, 40) + b"\n" for _ in range(n))


MAKERS = {"lines": lines, "fasta": fasta, "fastq": fastq}


@settings(max_examples=60, deadline=None)
@given(
    fmt=st.sampled_from(sorted(MAKERS)),
    counts=st.lists(st.integers(0, 40), min_size=1, max_size=5),
    split_size=st.integers(160, 2000),
    seed=st.integers(0, 1000),
)
def test_splits_hold_whole_records(fmt: str, counts: list[int], split_size: int, seed: int) -> None:
    rng = random.Random(seed)
    files = [MAKERS[fmt](n, rng) for n in counts]
    data = b"".join(files)

    def read(index: int, offset: int, length: int) -> bytes:
        return files[index][offset : offset + length]

    splits = plan_splits("./s", [len(f) for f in files], fmt, split_size, read)
    starts = [0] + [sum(len(f) for f in files[: i + 1]) for i in range(len(files))]
    assert [s[1] for s in splits] == sorted(s[1] for s in splits)
    assert splits[0][1] == 0 if data else not splits
    assert all(a[2] == b[1] for a, b in itertools.pairwise(splits))
    got = []
    for stream, start, end in splits:
        assert stream == "./s" and end - start > 0
        assert end - start <= split_size or any(  # only whole small files exceed nothing
            start <= s < e <= end for s, e in itertools.pairwise(starts)
        )
        for i, (s, e) in enumerate(itertools.pairwise(starts)):
            lo, hi = max(s, start), min(e, end)
            if lo < hi:
                got += list(records(fmt, files[i][lo - s : hi - s]))
    want = [r for f in files for r in records(fmt, f)]
    assert got == want
    assert sum(count_records(fmt, f) for f in files) == len(want)
    assert decode_split(encode_split(splits[0])) == splits[0] if splits else True


def test_a_record_longer_than_a_split_is_refused() -> None:
    data = b"short\n" + b"y" * 500 + b"\n"
    with pytest.raises(UsageError, match="longer than split_size"):
        plan_splits("./s", [len(data)], "lines", 100, lambda i, o, n: data[o : o + n])


def test_whole_files_are_never_cut() -> None:
    files = [b"a" * 300, b"b" * 50, b"c" * 60]
    splits = plan_splits("./s", [300, 50, 60], "whole-file", 100, lambda i, o, n: b"")
    assert splits == [("./s", 0, 300), ("./s", 300, 350), ("./s", 350, 410)]
    assert [len(list(records("whole-file", f))) for f in files] == [1, 1, 1]


def test_a_record_too_long_names_its_file() -> None:
    data = b"short\n" + b"y" * 500 + b"\n"
    read = lambda i, o, n: data[o : o + n]  # noqa: E731
    with pytest.raises(UsageError, match=r"at byte 6 of logs/big\.txt is longer than split_size"):
        plan_splits("./s", [len(data)], "lines", 100, read, ["logs/big.txt"])
