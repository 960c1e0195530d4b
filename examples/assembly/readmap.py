"""Reads placed on contigs, and what the two reads of a pair tell: pure functions.

A read is placed by its k-mers (``SEED`` bases) that occur exactly once in
the contigs: the place most of them agree on. The two reads of a pair either
lie on one contig (their distance is a sample of the insert size) or on two
(a *link* between two contig ends, for scaffold_lib). The I/O is in
pairs/pair_map.py and pairs/pair_reduce.py, the MapReduce that runs this.

Coordinates: a contig end is ``2 * contig + side`` (side 0: its first base,
side 1: its last). A placed read has a strand (0: as the contig reads, 1:
reverse complemented) and a start (the contig position of its leftmost base
on the contig). Pairs are Illumina "FR": the two reads of a fragment face
each other, so a read points to the contig's right end when forward and to
its left end when reversed.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

SEED = 31  # bases of the k-mers that place a read (one 64-bit word)

_CODE = np.full(256, 4, dtype=np.uint8)
for _i, _b in enumerate(b"ACGT"):
    _CODE[_b] = _i
    _CODE[_b + 32] = _i
_U = np.uint64
_COMPLEMENT = bytes.maketrans(b"ACGTN", b"TGCAN")


# ---- k-mers with their positions ----


def _kmers(codes: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """2-bit k-mers starting at each position, and whether the window holds only ACGT."""
    n = len(codes) - k + 1
    if n <= 0:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=bool)
    bad = np.concatenate(([0], np.cumsum(codes == 4)))
    valid = (bad[k:] - bad[:-k]) == 0
    values = (codes & 3).astype(np.uint64)
    acc = np.zeros(n, dtype=np.uint64)
    for j in range(k):
        acc <<= _U(2)
        acc |= values[j : j + n]
    return acc, valid


def oriented_kmers(seq: bytes, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Canonical k-mer at each position, its strand (1: the reverse complement is canonical),
    and whether the window is valid."""
    codes = _CODE[np.frombuffer(seq, dtype=np.uint8)]
    fwd, valid = _kmers(codes, k)
    rc_codes = np.where(codes == 4, 4, 3 - codes)[::-1]
    rev = _kmers(np.ascontiguousarray(rc_codes), k)[0][::-1]
    strand = (rev < fwd).astype(np.int8)
    return np.minimum(fwd, rev), strand, valid


@dataclass
class ContigIndex:
    """The k-mers that occur exactly once in the contigs, sorted, with where each lies."""

    keys: np.ndarray  # uint64, sorted
    contig: np.ndarray  # int64
    pos: np.ndarray  # int64: the k-mer's first base on its contig
    strand: np.ndarray  # int8
    lengths: np.ndarray  # int64: each contig's length


def build_index(contigs: Sequence[str], k: int = SEED, skip: Collection[int] = ()) -> ContigIndex:
    """The index of the contigs' k-mers found once, but for those of the contigs ``skip``.

    Repeats are skipped: a read that reaches from a unique contig into a
    repeat is then placed by the k-mers it has on the unique one, however
    few, and so a pair can span the repeat (on the repeat, it would link
    nothing: the links of repeats are left out).
    """
    lengths = np.array([len(c) for c in contigs], dtype=np.int64)
    if not contigs:
        empty = np.zeros(0, dtype=np.int64)
        return ContigIndex(
            np.zeros(0, dtype=np.uint64), empty, empty, empty.astype(np.int8), lengths
        )
    joined = "N".join(contigs).encode()
    keys, strand, valid = oriented_kmers(joined, k)
    starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1]))
    where = np.arange(len(keys))
    contig = np.searchsorted(starts, where, side="right") - 1
    pos = where - starts[contig]
    keys, strand, contig, pos = keys[valid], strand[valid], contig[valid], pos[valid]
    order = np.argsort(keys, kind="stable")
    keys, strand, contig, pos = keys[order], strand[order], contig[order], pos[order]
    # A k-mer found twice (a repeat within the contigs) places no read.
    once = np.ones(len(keys), dtype=bool)
    same = keys[1:] == keys[:-1]
    once[1:] &= ~same
    once[:-1] &= ~same
    if skip:
        once &= ~np.isin(contig, np.fromiter(skip, dtype=np.int64))
    return ContigIndex(keys[once], contig[once], pos[once], strand[once], lengths)


@dataclass
class Placed:
    """Where each read lies (-1: not placed)."""

    contig: np.ndarray
    strand: np.ndarray
    start: np.ndarray
    length: np.ndarray


def place_reads(index: ContigIndex, seqs: Sequence[bytes], k: int = SEED) -> Placed:
    """Each read's place on the contigs: the place most of its unique k-mers agree on."""
    m = len(seqs)
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    out = Placed(
        np.full(m, -1, dtype=np.int64),
        np.zeros(m, dtype=np.int8),
        np.zeros(m, dtype=np.int64),
        lengths,
    )
    if m == 0 or len(index.keys) == 0:
        return out
    keys, strand, valid = oriented_kmers(b"N".join(seqs), k)
    starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1]))
    where = np.flatnonzero(valid)
    idx = np.searchsorted(index.keys, keys[where])
    idx[idx >= len(index.keys)] = 0
    hit = index.keys[idx] == keys[where]
    where, idx = where[hit], idx[hit]
    if len(where) == 0:
        return out
    read = np.searchsorted(starts, where, side="right") - 1
    offset = where - starts[read]
    flip = (strand[where] != index.strand[idx]).astype(np.int8)
    # Forward: the read starts `offset` bases before the k-mer; reversed, its
    # reverse complement holds the k-mer at length - k - offset.
    begin = np.where(
        flip == 0, index.pos[idx] - offset, index.pos[idx] - (lengths[read] - k - offset)
    )
    contig = index.contig[idx]
    # The place most hits of a read agree on (ties: the first in sort order).
    order = np.lexsort((begin, flip, contig, read))
    read, contig, flip, begin = read[order], contig[order], flip[order], begin[order]
    new = np.ones(len(read), dtype=bool)
    new[1:] = (
        (read[1:] != read[:-1])
        | (contig[1:] != contig[:-1])
        | (flip[1:] != flip[:-1])
        | (begin[1:] != begin[:-1])
    )
    first = np.flatnonzero(new)
    runs = np.diff(np.append(first, len(read)))
    best = np.lexsort((-runs, read[first]))
    take = first[best]
    keep = np.ones(len(take), dtype=bool)
    keep[1:] = read[take][1:] != read[take][:-1]
    take = take[keep]
    r = read[take]
    out.contig[r] = contig[take]
    out.strand[r] = flip[take]
    out.start[r] = begin[take]
    return out


def pairs_of(lines: Sequence[bytes]) -> tuple[list[bytes], list[bytes]]:
    """The mates of the pairs among the preprocess stage's lines (a pair's mates on one line,
    split by a tab; a line without a tab is a single read, of no use here)."""
    first: list[bytes] = []
    second: list[bytes] = []
    for line in lines:
        a, tab, b = line.partition(b"\t")
        if tab:
            first.append(a)
            second.append(b.rstrip(b"\r"))
    return first, second


@dataclass
class PairFacts:
    """What pairs tell: insert sizes (pairs within one contig), links (pairs across two:
    rows of end_a, bases_a, end_b, bases_b with end_a < end_b), and how many pairs lie on
    one contig without facing each other (odd)."""

    sizes: np.ndarray
    links: np.ndarray
    odd: int


def pair_facts(one: Placed, two: Placed, lengths: np.ndarray) -> PairFacts:
    """Join the places of the two mates of each pair (FR: facing each other).

    A read points to its contig's right end when forward, to its left end when
    reversed; the bases from its 5' end to that end are the fragment's part on
    that contig. Two reads on one contig facing each other give the insert
    size; on two contigs, a link between the ends they point to.
    """
    both = (one.contig >= 0) & (two.contig >= 0)
    same = both & (one.contig == two.contig)
    facing = same & (one.strand != two.strand)
    fwd_start = np.where(one.strand == 0, one.start, two.start)
    rev_end = np.where(one.strand == 0, two.start + two.length, one.start + one.length)
    size = rev_end - fwd_start
    sizes = size[facing & (size > 0)]
    odd = int(same.sum()) - len(sizes)
    cross = both & ~same
    ends, dists = [], []
    for p in (one, two):
        c = p.contig[cross]
        forward = p.strand[cross] == 0
        ends.append(np.where(forward, 2 * c + 1, 2 * c))
        dists.append(
            np.where(forward, lengths[c] - p.start[cross], p.start[cross] + p.length[cross])
        )
    swap = ends[0] > ends[1]
    ea = np.where(swap, ends[1], ends[0])
    eb = np.where(swap, ends[0], ends[1])
    da = np.where(swap, dists[1], dists[0])
    db = np.where(swap, dists[0], dists[1])
    return PairFacts(sizes, np.stack([ea, da, eb, db], axis=1).astype(np.int64), odd)


def mapper_lines(facts: PairFacts) -> bytes:
    """The pairs' MapReduce keys: ``I<size>`` (count of pairs), ``O`` (odd pairs), and
    ``L<end_a>.<end_b>`` (the bases on each contig, one line a pair)."""
    sizes, counts = np.unique(facts.sizes, return_counts=True)
    out = [b"I%d\t%d\n" % (s, c) for s, c in zip(sizes.tolist(), counts.tolist(), strict=True)]
    if facts.odd:
        out.append(b"O\t%d\n" % facts.odd)
    out.extend(b"L%d.%d\t%d %d\n" % (ea, eb, da, db) for ea, da, eb, db in facts.links.tolist())
    return b"".join(out)


def overhangs(
    placed: Placed, seqs: Sequence[bytes], lengths: np.ndarray
) -> list[tuple[int, bytes]]:
    """The bases of placed reads that reach past a contig's end: (end, bases going outward).

    Going outward from a right end is the contig's strand; from a left end,
    the other one. The scaffold stage extends the ends of scaffolds with them.
    """
    start, length = placed.start, placed.length
    contig = placed.contig
    past = (contig >= 0) & ((start < 0) | (start + length > lengths[np.maximum(contig, 0)]))
    out = []
    for i in np.flatnonzero(past).tolist():
        c = int(contig[i])
        seq = seqs[i] if placed.strand[i] == 0 else seqs[i].translate(_COMPLEMENT)[::-1]
        b = int(start[i])
        if b < 0:
            out.append((2 * c, seq[:-b].translate(_COMPLEMENT)[::-1]))
        beyond = int(lengths[c]) - b
        if beyond < len(seq):
            out.append((2 * c + 1, seq[beyond:]))
    return out


def overhang_lines(found: Sequence[tuple[int, bytes]]) -> bytes:
    """The pairs' MapReduce keys for them: ``X<end>``, the bases as value."""
    return b"".join(b"X%d\t%s\n" % (end, seq) for end, seq in found)
