"""A seeded random genome and reads from both strands with substitution errors.

    python examples/assembly/simulate.py OUT --genome-size 200000 --coverage 30 \
        --read-length 100 --error-rate 0.01 --seed 1

writes OUT/reference.fasta and OUT/reads/reads_N.fastq (``--files`` of them).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

_BASES = np.frombuffer(b"ACGT", dtype=np.uint8)


def random_genome(size: int, seed: int) -> bytes:
    rng = np.random.default_rng([seed, 0])
    return _BASES[rng.integers(0, 4, size)].tobytes()


def simulate_reads(
    genome: bytes, coverage: float, read_length: int, error_rate: float, seed: int
) -> list[bytes]:
    """Reads drawn uniformly from both strands; each base substituted with ``error_rate``."""
    rng = np.random.default_rng([seed, 1])
    g = np.frombuffer(genome, dtype=np.uint8)
    codes = np.searchsorted(_BASES, g)  # A C G T are sorted
    count = round(coverage * len(genome) / read_length)
    starts = rng.integers(0, len(genome) - read_length + 1, count)
    reads = codes[starts[:, None] + np.arange(read_length)]
    reverse = rng.random(count) < 0.5
    reads[reverse] = 3 - reads[reverse, ::-1]
    errors = rng.random(reads.shape) < error_rate
    reads[errors] = (reads[errors] + rng.integers(1, 4, int(errors.sum()))) % 4
    letters = _BASES[reads]
    return [row.tobytes() for row in letters]


def fastq(reads: list[bytes], first: int = 0) -> bytes:
    out = []
    for i, seq in enumerate(reads, first):
        out.append(b"@r%d\n%s\n+\n%s\n" % (i, seq, b"I" * len(seq)))
    return b"".join(out)


def write(out: Path, genome: bytes, reads: list[bytes], files: int = 1) -> None:
    (out / "reads").mkdir(parents=True, exist_ok=True)
    lines = [genome[i : i + 80] for i in range(0, len(genome), 80)]
    (out / "reference.fasta").write_bytes(b">reference\n" + b"\n".join(lines) + b"\n")
    per = -(-len(reads) // files)
    for n in range(files):
        part = reads[n * per : (n + 1) * per]
        (out / "reads" / f"reads_{n + 1}.fastq").write_bytes(fastq(part, n * per))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--genome-size", type=int, default=200_000)
    ap.add_argument("--coverage", type=float, default=30.0)
    ap.add_argument("--read-length", type=int, default=100)
    ap.add_argument("--error-rate", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--files", type=int, default=2)
    a = ap.parse_args()
    # Bad numbers are usage errors (exit 2, one line), not numpy tracebacks.
    if a.read_length < 1 or a.genome_size < a.read_length:
        ap.error("--read-length must be at least 1 and at most --genome-size")
    if a.coverage < 0 or not 0 <= a.error_rate <= 1 or a.files < 1:
        ap.error("--coverage must be >= 0, --error-rate from 0 to 1, --files >= 1")
    genome = random_genome(a.genome_size, a.seed)
    reads = simulate_reads(genome, a.coverage, a.read_length, a.error_rate, a.seed)
    write(a.out, genome, reads, a.files)


if __name__ == "__main__":
    main()
