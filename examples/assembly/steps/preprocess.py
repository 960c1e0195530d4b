"""Stage preprocess: reads as sequencers deliver them, made one clean form; k when auto.

Input: a collection of read files, FASTQ or FASTA, gzip or plain, single or
paired (two files ``x_1``/``x_2`` or ``x_R1``/``x_R2``, or interleaved in
one). Output: ``reads_NNNN.seq`` (one read a line; a pair's mates on one
line split by a tab; bases other than ACGT as N; low-quality tails trimmed)
and ``preprocess.json`` (what was found and done, and k).
"""

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import autok
import seqio
import stage

from warehouse import step

p = stage.params()
threshold = stage.auto(p.get("trim_quality"), 20, "trim_quality")
given_k = p.get("k", 31)
if given_k != "auto":
    stage.k()  # a bad k fails here, before any read is read
reader_files = stage.files()
groups = seqio.pair_files(reader_files)
tally = seqio.Tally()
unpaired: list[str] = []  # files named as pairs whose first records are not mates
files: list[dict[str, Any]] = []
sampler = autok.Sampler() if given_k == "auto" else None


def opened(path: str) -> tuple[IO[bytes], bool]:
    text, packed = seqio.open_reads(step.reader().open(path))
    return text, bool(packed)


def batches(path: str) -> Iterator[tuple[str, list[seqio.Record]]]:
    text, packed = opened(path)
    entry: dict[str, Any] = {"file": path, "gzip": packed, "records": 0}
    files.append(entry)
    try:
        for fmt, batch in seqio.records(text):
            entry["format"] = fmt
            entry["records"] += len(batch)
            yield fmt, batch
    except seqio.BadReads as e:
        stage.fail(f"{path}: {e}")


def offset_of(entry: dict[str, Any], batch: list[seqio.Record]) -> int:
    """The file's quality encoding, told once by its first batch."""
    if "phred" not in entry:
        quals = [q for _, _, q in batch if q is not None]
        entry["phred"] = seqio.phred_offset(quals) if quals else None
    return entry["phred"] or 33


def keep(seqs: list[bytes]) -> None:
    if sampler is not None:
        sampler.add(seqs)


def single(path: str) -> Iterator[bytes]:
    layout = None
    for _, batch in batches(path):
        entry = files[-1]
        if layout is None:
            layout = "interleaved" if seqio.is_interleaved([h for h, _, _ in batch]) else "single"
            entry["layout"] = layout
        seqs = seqio.clean(batch, offset_of(entry, batch), threshold, tally)
        keep(seqs)
        if layout == "interleaved":
            if not seqio.is_interleaved([h for h, _, _ in batch]):
                stage.fail(f"{path}: interleaved pairs at its start, but not after record "
                           f"{entry['records'] - len(batch)}")  # fmt: skip
            tally.pairs += len(seqs) // 2
            yield b"".join(
                a + b"\t" + b + b"\n" for a, b in zip(seqs[0::2], seqs[1::2], strict=True)
            )
        else:
            yield b"".join(s + b"\n" for s in seqs)


def paired(first: str, second: str) -> Iterator[bytes]:
    one, two = batches(first), batches(second)
    for x, y in itertools.zip_longest(one, two):
        if x is None or y is None:  # one file ended before the other
            stage.fail(f"{first} and {second} hold different numbers of reads")
        (_, a), (_, b) = x, y
        left, right = files[-2], files[-1]
        left["layout"] = right["layout"] = "paired files"
        if len(a) != len(b):
            stage.fail(f"{first} and {second} hold different numbers of reads")
        for i, (ra, rb) in enumerate(zip(a, b, strict=True)):
            if seqio.mate_key(ra[0]) != seqio.mate_key(rb[0]):
                at = left["records"] - len(a) + i + 1
                stage.fail(
                    f"{first} and {second}: record {at} names differ "
                    f"({seqio.name_of(ra[0])}, {seqio.name_of(rb[0])}): not mates"
                )
        sa = seqio.clean(a, offset_of(left, a), threshold, tally)
        sb = seqio.clean(b, offset_of(right, b), threshold, tally)
        keep(sa)
        keep(sb)
        tally.pairs += len(sa)
        yield b"".join(ma + b"\t" + mb + b"\n" for ma, mb in zip(sa, sb, strict=True))


def first_header(path: str) -> bytes:
    text, _ = opened(path)
    with text:
        for line in text:
            if line.strip():
                return line.rstrip(b"\r\n")
    return b""


def mates(first: str, second: str) -> bool:
    """Files named as a pair are one when their first records are mates.

    Chunks of single reads are often named ``reads_1``, ``reads_2``: their
    first names differ, so they are read as single files (and said so in the
    stats); a later record that is no mate of its partner still fails.
    """
    return seqio.mate_key(first_header(first)) == seqio.mate_key(first_header(second))


def all_reads() -> Iterator[bytes]:
    for a, b in groups:
        if b is None:
            yield from single(a)
        elif mates(a, b):
            yield from paired(a, b)
        else:
            unpaired.extend((a, b))
            yield from single(a)
            yield from single(b)


# The reads are written as they are read (bounded memory); k and the stats after them.
out = step.StreamWriter(".")
out.add_file("reads.seq", all_reads())
if tally.reads == 0:
    stage.fail("the input holds no reads: it must be FASTQ or FASTA files, gzip or plain")
if sampler is not None:
    k, why = sampler.choose()
else:
    k, why = stage.k(), {"rule": "given"}
stats = {
    "files": files,
    "trim_quality": threshold,
    "k": k,
    "k_choice": why,
    "reads": tally.reads,
    "pairs": tally.pairs,
    "named_as_pairs_read_single": unpaired,
    "bases_in": tally.bases_in,
    "bases_out": tally.bases_out,
    "trimmed_reads": tally.trimmed_reads,
    "trimmed_bases": tally.trimmed_bases,
    "empty_after_trim": tally.empty_after_trim,
    "reads_with_n": tally.reads_with_n,
    "n_bases": tally.n_bases,
    "n_handling": "bases other than ACGT read as N; no k-mer spans an N",
}
out.add_file("preprocess.json", [stage.dumps(stats)])
step.output(out.finish())
step.counters(reads=tally.reads, pairs=tally.pairs, k=k)
