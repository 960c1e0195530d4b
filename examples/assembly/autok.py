"""k chosen from the k-mer count histogram (``k=auto``), before the real count.

The rule (docs/assembly.md, "Choosing k"): count k-mers of one small k (21)
over all the reads, keeping one k-mer in 16 by a hash of its value (every
occurrence of a kept k-mer is counted, so the histogram keeps its shape in
a sixteenth of the memory). Its peak beyond the first valley is the k-mer
coverage at that k; the k-mers above the valley (times 16) are the genome's
G; the share of k-mer occurrences below the valley gives the chance a base
is read right. The k-mer coverage expected at a larger k, c(k), falls with
the read's k-mers (L - k + 1 of a read of L bases) and with that chance to
the power k. A true k-mer is in no read with chance about exp(-c(k)), so
G exp(-c(k)) of them are missed, each a break in the graph. The k chosen
is the largest odd k up to ``max_k`` (and below the mean read length) at
which fewer than ``misses`` (0.5) true k-mers are expected missed: the
longer k, the more repeats it spans, so long as it costs no break. When
even k0 misses more, k0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import dbg
import numpy as np
import words

K0 = 21
MISSES = 0.5
_MIX = np.uint64(0x9E3779B97F4A7C15)


class Sampler:
    """The counts of a hashed sixteenth of the k-mers at K0, fed batch by batch."""

    def __init__(self, k0: int = K0) -> None:
        self.k0 = k0
        self.keys: list[np.ndarray] = []
        self.counts: list[np.ndarray] = []
        self.bases = 0
        self.reads = 0

    def add(self, seqs: Sequence[bytes]) -> None:
        self.reads += len(seqs)
        self.bases += sum(len(s) for s in seqs)
        x = dbg.canonical_kmers(b"N".join(seqs), self.k0)
        with np.errstate(over="ignore"):
            x = x[((words.low_word(x) * _MIX) >> np.uint64(60)) == 0]
        u, c = np.unique(x, return_counts=True)
        self.keys.append(u)
        self.counts.append(c.astype(np.int64))
        if len(self.keys) >= 16:  # merge now and then: memory stays that of the distinct k-mers
            k, c = dbg.merge_counts(self.keys, self.counts)
            self.keys, self.counts = [k], [c]

    def choose(self, max_k: int = words.MAX_K) -> tuple[int, dict[str, Any]]:
        _, counts = dbg.merge_counts(self.keys, self.counts)
        return choose_k(counts, self.bases / max(self.reads, 1), 16, self.k0, max_k)


def choose_k(
    counts: np.ndarray,
    read_length: float,
    sampled: int = 1,
    k0: int = K0,
    max_k: int = words.MAX_K,
    misses: float = MISSES,
) -> tuple[int, dict[str, Any]]:
    """The k (and why) from the counts of k-mers of length ``k0`` (one in ``sampled`` of them)
    and the mean read length."""
    why: dict[str, Any] = {
        "rule": "largest k at which fewer than `misses` true k-mers are expected in no read",
        "misses": misses,
        "k0": k0,
        "read_length": round(read_length, 1),
    }
    hist = dbg.histogram(counts)
    valley = dbg.first_valley(hist)
    if valley is None or not hist:
        why["fallback"] = "no valley in the histogram at k0"
        return max(k0, min(31, max_k)), why
    above = {c: n for c, n in hist.items() if c >= valley}
    peak = max(above, key=lambda c: (above[c], -c))
    genome = sampled * sum(above.values())
    occ = counts.sum()
    right = float(counts[counts >= valley].sum() / occ) if occ else 1.0
    p = right ** (1 / k0)  # the chance a base is read right
    need = math.log(genome / misses)  # exp(-c) * genome < misses
    best = k0
    top = min(max_k, int(read_length) - 1)
    for k in range(k0, top + 1, 2):
        expected = peak * (read_length - k + 1) / (read_length - k0 + 1) * p ** (k - k0)
        if expected >= need:
            best = k
    why.update(
        {
            "valley": valley,
            "peak": peak,
            "genome_kmers": genome,
            "coverage_needed": round(need, 2),
            "base_right": round(p, 5),
            "k": best,
        }
    )
    return best, why
