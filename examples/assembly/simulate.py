"""A seeded random genome and reads from both strands with substitution errors.

    python examples/assembly/simulate.py OUT --genome-size 200000 --coverage 30 \
        --read-length 100 --error-rate 0.01 --seed 1

writes OUT/reference.fasta and OUT/reads/reads_N.fastq (``--files`` of them).

Reads as sequencers deliver them:

- ``--paired``: read pairs from fragments of ``--insert-size`` bases (mean,
  normal with ``--insert-sd``), first read forward from the fragment's start,
  second reverse-complemented from its end (Illumina "FR"); written as
  reads_N_1.fastq and reads_N_2.fastq, or with ``--interleaved`` as one
  reads_N.fastq whose records alternate (names ``rI/1``, ``rI/2``).
- ``--gzip``: every reads file gzip-compressed (``.fastq.gz``).
- ``--fasta``: FASTA records instead of FASTQ (no qualities).
- ``--phred 64``: the older Illumina quality encoding (default 33).
- ``--bad-tails F``: a fraction F of reads end in 10 to 30 low-quality bases
  (Phred 2) with one error in five, for quality trimming.
- ``--repeats N --repeat-length L``: one random segment of L bases copied
  to N places in the genome (repeats longer than k).
"""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path

import numpy as np

_BASES = np.frombuffer(b"ACGT", dtype=np.uint8)
HIGH, LOW = 40, 2  # Phred qualities of good bases and of bad tails


def random_genome(size: int, seed: int, repeats: int = 0, repeat_length: int = 0) -> bytes:
    rng = np.random.default_rng([seed, 0])
    codes = rng.integers(0, 4, size)
    if repeats > 1 and 0 < repeat_length < size // repeats:
        # Copies that never overlap: copy i lies in the i-th of N equal slots.
        unit = codes[:repeat_length].copy()
        slot = size // repeats
        for i in range(repeats):
            at = i * slot + int(rng.integers(0, slot - repeat_length + 1))
            codes[at : at + repeat_length] = unit
    return _BASES[codes].tobytes()


def _errors(rng: np.random.Generator, reads: np.ndarray, rate: float) -> None:
    errors = rng.random(reads.shape) < rate
    reads[errors] = (reads[errors] + rng.integers(1, 4, int(errors.sum()))) % 4


def _tails(rng: np.random.Generator, reads: np.ndarray, fraction: float) -> np.ndarray:
    """Give a fraction of reads a bad tail (errors, low quality); the Phred values of every base."""
    qual = np.full(reads.shape, HIGH, dtype=np.uint8)
    if fraction <= 0 or reads.size == 0:
        return qual
    length = reads.shape[1]
    bad = np.flatnonzero(rng.random(len(reads)) < fraction)
    tail = rng.integers(10, 31, len(bad))
    cols = np.arange(length)
    mask = np.zeros(reads.shape, dtype=bool)
    mask[bad] = cols[None, :] >= (length - tail)[:, None]
    qual[mask] = LOW
    hit = mask & (rng.random(reads.shape) < 0.2)
    reads[hit] = (reads[hit] + rng.integers(1, 4, int(hit.sum()))) % 4
    return qual


def _codes(genome: bytes) -> np.ndarray:
    return np.searchsorted(_BASES, np.frombuffer(genome, dtype=np.uint8))  # A C G T are sorted


def simulate_reads(
    genome: bytes,
    coverage: float,
    read_length: int,
    error_rate: float,
    seed: int,
    bad_tails: float = 0.0,
) -> list[bytes]:
    """Reads drawn uniformly from both strands; each base substituted with ``error_rate``."""
    return simulate_reads_q(genome, coverage, read_length, error_rate, seed, bad_tails)[0]


def simulate_reads_q(
    genome: bytes,
    coverage: float,
    read_length: int,
    error_rate: float,
    seed: int,
    bad_tails: float = 0.0,
) -> tuple[list[bytes], list[np.ndarray]]:
    """Reads and the Phred quality of each base."""
    rng = np.random.default_rng([seed, 1])
    codes = _codes(genome)
    count = round(coverage * len(genome) / read_length)
    starts = rng.integers(0, len(genome) - read_length + 1, count)
    reads = codes[starts[:, None] + np.arange(read_length)]
    reverse = rng.random(count) < 0.5
    reads[reverse] = 3 - reads[reverse, ::-1]
    _errors(rng, reads, error_rate)
    qual = _tails(rng, reads, bad_tails)
    return [row.tobytes() for row in _BASES[reads]], list(qual)


def simulate_pairs(
    genome: bytes,
    coverage: float,
    read_length: int,
    error_rate: float,
    seed: int,
    insert_size: int = 400,
    insert_sd: float = 40.0,
    bad_tails: float = 0.0,
) -> tuple[list[bytes], list[bytes], list[np.ndarray], list[np.ndarray]]:
    """Read pairs (FR): first reads, second reads and their Phred values; both reads count
    toward ``coverage``. Fragments are at least one read long and at most the genome."""
    rng = np.random.default_rng([seed, 2])
    codes = _codes(genome)
    count = round(coverage * len(genome) / (2 * read_length))
    size = np.rint(rng.normal(insert_size, insert_sd, count)).astype(np.int64)
    size = np.clip(size, read_length, len(genome))
    starts = (rng.random(count) * (len(genome) - size + 1)).astype(np.int64)
    cols = np.arange(read_length)
    first = codes[starts[:, None] + cols]
    second = 3 - codes[(starts + size - 1)[:, None] - cols]  # reverse complement of the end
    # A fragment from the reverse strand: its first read is the other one.
    flip = rng.random(count) < 0.5
    first[flip], second[flip] = second[flip].copy(), first[flip].copy()
    _errors(rng, first, error_rate)
    _errors(rng, second, error_rate)
    q1 = _tails(rng, first, bad_tails)
    q2 = _tails(rng, second, bad_tails)
    return (
        [row.tobytes() for row in _BASES[first]],
        [row.tobytes() for row in _BASES[second]],
        list(q1),
        list(q2),
    )


def fastq(
    reads: list[bytes],
    first: int = 0,
    quals: list[np.ndarray] | None = None,
    phred: int = 33,
    suffix: str = "",
) -> bytes:
    out = []
    end = suffix.encode()
    for i, seq in enumerate(reads, first):
        q = (
            bytes(quals[i - first] + phred)
            if quals is not None
            else bytes([HIGH + phred]) * len(seq)
        )
        out.append(b"@r%d%s\n%s\n+\n%s\n" % (i, end, seq, q))
    return b"".join(out)


def fasta(reads: list[bytes], first: int = 0, suffix: str = "") -> bytes:
    end = suffix.encode()
    return b"".join(b">r%d%s\n%s\n" % (i, end, seq) for i, seq in enumerate(reads, first))


def write(
    out: Path,
    genome: bytes,
    reads: list[bytes],
    files: int = 1,
    *,
    seconds: list[bytes] | None = None,
    quals: list[np.ndarray] | None = None,
    quals2: list[np.ndarray] | None = None,
    compress: bool = False,
    as_fasta: bool = False,
    phred: int = 33,
    interleaved: bool = False,
) -> list[Path]:
    """Write the reference and the reads (``seconds``: second reads of pairs); the files written."""
    (out / "reads").mkdir(parents=True, exist_ok=True)
    lines = [genome[i : i + 80] for i in range(0, len(genome), 80)]
    (out / "reference.fasta").write_bytes(b">reference\n" + b"\n".join(lines) + b"\n")
    ext = (".fasta" if as_fasta else ".fastq") + (".gz" if compress else "")

    def text(part: list[bytes], first: int, q: list[np.ndarray] | None, suffix: str = "") -> bytes:
        if as_fasta:
            return fasta(part, first, suffix)
        return fastq(part, first, q, phred, suffix)

    def put(name: str, data: bytes) -> Path:
        path = out / "reads" / name
        path.write_bytes(gzip.compress(data, mtime=0) if compress else data)
        return path

    written = []
    per = -(-len(reads) // files)
    for n in range(files):
        lo, hi = n * per, (n + 1) * per
        q1 = quals[lo:hi] if quals is not None else None
        if seconds is None:
            written.append(put(f"reads_{n + 1}{ext}", text(reads[lo:hi], lo, q1)))
            continue
        q2 = quals2[lo:hi] if quals2 is not None else None
        a = text(reads[lo:hi], lo, q1, "/1")
        b = text(seconds[lo:hi], lo, q2, "/2")
        if interleaved:
            step = 2 if as_fasta else 4
            la, lb = a.split(b"\n"), b.split(b"\n")
            mixed = [
                line
                for i in range(0, len(la) - 1, step)
                for line in (*la[i : i + step], *lb[i : i + step])
            ]
            written.append(put(f"reads_{n + 1}{ext}", b"\n".join(mixed) + b"\n"))
        else:
            written.append(put(f"reads_{n + 1}_1{ext}", a))
            written.append(put(f"reads_{n + 1}_2{ext}", b))
    return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--genome-size", type=int, default=200_000)
    ap.add_argument("--coverage", type=float, default=30.0)
    ap.add_argument("--read-length", type=int, default=100)
    ap.add_argument("--error-rate", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--files", type=int, default=2)
    ap.add_argument("--paired", action="store_true", help="read pairs (FR) from fragments")
    ap.add_argument("--insert-size", type=int, default=400, help="mean fragment length")
    ap.add_argument("--insert-sd", type=float, default=40.0)
    ap.add_argument("--interleaved", action="store_true", help="pairs in one file a part")
    ap.add_argument("--gzip", action="store_true", help="gzip every reads file")
    ap.add_argument("--fasta", action="store_true", help="FASTA reads (no qualities)")
    ap.add_argument("--phred", type=int, choices=(33, 64), default=33)
    ap.add_argument(
        "--bad-tails", type=float, default=0.0, help="fraction of reads with a bad tail"
    )
    ap.add_argument("--repeats", type=int, default=0, help="copies of one repeated segment")
    ap.add_argument("--repeat-length", type=int, default=0)
    a = ap.parse_args()
    # Bad numbers are usage errors (exit 2, one line), not numpy tracebacks.
    if a.read_length < 1 or a.genome_size < a.read_length:
        ap.error("--read-length must be at least 1 and at most --genome-size")
    if a.coverage < 0 or not 0 <= a.error_rate <= 1 or a.files < 1:
        ap.error("--coverage must be >= 0, --error-rate from 0 to 1, --files >= 1")
    if (a.paired and not a.read_length <= a.insert_size <= a.genome_size) or a.insert_sd < 0:
        ap.error("--insert-size must be from --read-length to --genome-size, --insert-sd >= 0")
    if not 0 <= a.bad_tails <= 1 or a.repeats < 0 or a.repeat_length < 0:
        ap.error("--bad-tails must be from 0 to 1, --repeats and --repeat-length >= 0")
    if a.interleaved and not a.paired:
        ap.error("--interleaved needs --paired")
    genome = random_genome(a.genome_size, a.seed, a.repeats, a.repeat_length)
    how = {"compress": a.gzip, "as_fasta": a.fasta, "phred": a.phred}
    if a.paired:
        r1, r2, q1, q2 = simulate_pairs(
            genome, a.coverage, a.read_length, a.error_rate, a.seed,
            a.insert_size, a.insert_sd, a.bad_tails,
        )  # fmt: skip
        write(a.out, genome, r1, a.files, seconds=r2, quals=q1, quals2=q2,
              interleaved=a.interleaved, **how)  # fmt: skip
    else:
        reads, quals = simulate_reads_q(
            genome, a.coverage, a.read_length, a.error_rate, a.seed, a.bad_tails
        )
        write(a.out, genome, reads, a.files, quals=quals, **how)


if __name__ == "__main__":
    main()
