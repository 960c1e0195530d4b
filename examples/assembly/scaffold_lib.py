"""Scaffolding from read pairs: pure functions over the links readmap.py finds.

Links between the same two contig ends are *bundled*; a bundle of at least
``min_links`` pairs agreeing on the gap joins the two ends (as PGA's
Contrail does, at least 5), each end to its nearest bundle. Chains of joined
contigs are the scaffolds: neighbours that overlap exactly are merged, a gap
that one path of left-over contigs fits (a repeat the pairs span) is closed
with them, and any other gap is filled with ``N``s of the estimated length;
a scaffold's outer ends grow by the reads reaching past them. The I/O is in
steps/scaffold.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dbg import n50, revcomp

MIN_GAP = 10  # N's written for a gap estimated shorter than this
MIN_OVERLAP = 15  # shortest exact overlap that merges two neighbours without a gap


@dataclass
class Insert:
    mean: float
    sd: float
    pairs: int


def estimate_insert(hist: dict[int, int]) -> Insert | None:
    """Mean and spread of the insert size from the pairs within one contig.

    The median and the median absolute deviation first (robust against the
    few pairs of chimeric fragments or misplaced reads), then the mean and
    standard deviation of the sizes within five deviations of the median.
    """
    if not hist:
        return None
    sizes = np.array(sorted(hist), dtype=np.float64)
    counts = np.array([hist[int(s)] for s in sizes], dtype=np.float64)

    def wmedian(x: np.ndarray, w: np.ndarray) -> float:
        order = np.argsort(x)
        cum = np.cumsum(w[order])
        return float(x[order][np.searchsorted(cum, cum[-1] / 2)])

    med = wmedian(sizes, counts)
    mad = wmedian(np.abs(sizes - med), counts) * 1.4826
    near = np.abs(sizes - med) <= 5 * max(mad, 1.0)
    w = counts[near]
    mean = float(np.average(sizes[near], weights=w))
    sd = float(np.sqrt(np.average((sizes[near] - mean) ** 2, weights=w)))
    return Insert(mean, max(sd, 1.0), int(w.sum()))


@dataclass
class Bundle:
    end_a: int
    end_b: int
    links: int  # pairs that agree
    gap: float  # bases between the two contigs (negative: they overlap)


def bundle_links(
    links: Iterable[tuple[int, int, int, int]],
    insert: Insert,
    min_links: int,
    skip: set[int] | frozenset[int] = frozenset(),
) -> list[Bundle]:
    """Bundles of at least ``min_links`` pairs agreeing on the gap between two contig ends.

    A pair's gap is the insert size less the bases it spans on each contig;
    a pair spanning more than the longest insert (mean + 3 sd) on either
    contig is misplaced and dropped, as are pairs touching a contig of
    ``skip`` (repeats). Pairs agree when their gaps lie within 3 sd of the
    bundle's median.
    """
    most = insert.mean + 3 * insert.sd
    gaps: dict[tuple[int, int], list[float]] = {}
    for ea, da, eb, db in links:
        if da > most or db > most or (ea >> 1) in skip or (eb >> 1) in skip:
            continue
        gaps.setdefault((ea, eb), []).append(insert.mean - da - db)
    out = []
    for (ea, eb), gs in sorted(gaps.items()):
        if len(gs) < min_links:
            continue
        med = float(np.median(gs))
        agree = [g for g in gs if abs(g - med) <= 3 * insert.sd]
        if len(agree) >= min_links:
            out.append(Bundle(ea, eb, len(agree), math.fsum(agree) / len(agree)))
    return out


def coverage_of(header: str) -> float:
    """A contig's coverage from its FASTA header (``contig7 length=1234 coverage=21.50``)."""
    fields = dict(f.split("=", 1) for f in header.split()[1:] if "=" in f)
    return float(fields["coverage"])


def repeats(coverage: Sequence[float], lengths: Sequence[int], factor: float = 1.5) -> set[int]:
    """Contigs whose coverage is above ``factor`` times the length-weighted median: repeats.

    A repeat's copies are one contig, so its pairs link it to every copy's
    neighbours; as Contrail does, its links are left out.
    """
    if not coverage:
        return set()
    cov = np.asarray(coverage, dtype=np.float64)
    w = np.asarray(lengths, dtype=np.float64)
    order = np.argsort(cov)
    cum = np.cumsum(w[order])
    median = float(cov[order][np.searchsorted(cum, cum[-1] / 2)])
    return {int(i) for i in np.flatnonzero(cov > factor * median)}


@dataclass
class Layout:
    """Chains of oriented contigs: (contig, reversed) each, and the gap after each but the last."""

    chains: list[list[tuple[int, bool]]] = field(default_factory=list)
    gaps: list[list[float]] = field(default_factory=list)
    ambiguous_ends: int = 0


def order_contigs(bundles: Sequence[Bundle], lengths: Sequence[int], sd: float) -> Layout:
    """Join contig ends: each end to its nearest bundle, when that choice is mutual and the
    end's other bundles lie beyond the contig it joins (else the end stays open)."""
    by_end: dict[int, list[Bundle]] = {}
    for b in bundles:
        by_end.setdefault(b.end_a, []).append(b)
        by_end.setdefault(b.end_b, []).append(b)
    nearest: dict[int, int] = {}
    ambiguous = 0
    for end, bs in by_end.items():
        bs = sorted(bs, key=lambda b: (b.gap, -b.links))
        first = bs[0]
        other = first.end_b if first.end_a == end else first.end_a
        beyond = first.gap + lengths[other >> 1] - 3 * sd
        if any(b.gap < beyond for b in bs[1:]):
            ambiguous += 1  # two contigs claim the same place
            continue
        nearest[end] = other
    partner: dict[int, int] = {}
    gap_of: dict[tuple[int, int], float] = {}
    parent = list(range(len(lengths)))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for b in sorted(bundles, key=lambda b: (-b.links, b.end_a, b.end_b)):
        a, c = b.end_a, b.end_b
        if nearest.get(a) != c or nearest.get(c) != a or (a >> 1) == (c >> 1):
            continue
        ra, rc = root(a >> 1), root(c >> 1)
        if ra == rc:
            continue  # would close a cycle (a circular genome): left open there
        parent[ra] = rc
        partner[a], partner[c] = c, a
        gap_of[(a, c)] = gap_of[(c, a)] = b.gap
    layout = Layout(ambiguous_ends=ambiguous)
    seen: set[int] = set()
    for start in range(len(lengths)):
        if start in seen:
            continue
        # Begin at a contig with an open end (each chain has two).
        left, right = 2 * start, 2 * start + 1
        if left in partner and right in partner:
            continue
        entry = left if left not in partner else right
        chain: list[tuple[int, bool]] = []
        gaps: list[float] = []
        end = entry
        while True:
            c = end >> 1
            seen.add(c)
            chain.append((c, end & 1 == 1))  # entered by its last base: reversed
            out_end = end ^ 1
            if out_end not in partner:
                break
            nxt = partner[out_end]
            gaps.append(gap_of[(out_end, nxt)])
            end = nxt
        layout.chains.append(chain)
        layout.gaps.append(gaps)
    return layout


MAX_OVERLAP = 127  # longest overlap looked for: neighbours in the graph share k - 1 bases


def end_overlap(
    left: str, right: str, shortest: int = MIN_OVERLAP, longest: int = MAX_OVERLAP
) -> int:
    """The longest exact overlap of ``left``'s end with ``right``'s start from ``shortest`` to
    ``longest`` bases; 0 when none."""
    for o in range(min(len(left), len(right), longest), shortest - 1, -1):
        if left[-o:] == right[:o]:
            return o
    return 0


def direct_overlap(left: str, right: str, gap: float, sd: float) -> int:
    """An overlap of two neighbours that the estimated ``gap`` allows (within 3 sd)."""
    if gap > 3 * sd:
        return 0
    longest = min(MAX_OVERLAP, int(-gap + 3 * sd) + 1)
    return end_overlap(left, right, max(MIN_OVERLAP, int(-gap - 3 * sd)), longest)


MAX_FILLERS = 3  # contigs a gap may be closed with, one after another


@dataclass
class Fill:
    bases: str  # what goes after the left contig
    trim: int  # bases of the right contig's start already in them
    contigs: list[int]


class Fillers:
    """Contigs that may close a gap, each on both strands, found by their first bases."""

    def __init__(self, contigs: dict[int, str]) -> None:
        self.by_start: dict[str, list[tuple[int, str]]] = {}
        for c, f in contigs.items():
            for seq in (f, revcomp(f)):
                if len(seq) >= MIN_OVERLAP:
                    self.by_start.setdefault(seq[:MIN_OVERLAP], []).append((c, seq))

    def __bool__(self) -> bool:
        return bool(self.by_start)

    def after(self, tail: str) -> list[tuple[int, str, int]]:
        """The fillers whose start overlaps the end of ``tail`` exactly: (contig, oriented
        sequence, the longest such overlap)."""
        found: dict[tuple[int, str], int] = {}
        for o in range(min(len(tail), MAX_OVERLAP), MIN_OVERLAP - 1, -1):
            end = tail[-o:]
            for c, seq in self.by_start.get(end[:MIN_OVERLAP], []):
                if (c, seq) not in found and seq[:o] == end:
                    found[(c, seq)] = o
        return [(c, seq, o) for (c, seq), o in found.items()]


def bridge(left: str, right: str, gap: float, sd: float, fillers: Fillers) -> Fill | None:
    """The one path of filler contigs (each on either strand, up to MAX_FILLERS) from the end
    of ``left`` to the start of ``right``, each overlapping the next exactly, whose bases fit
    the estimated gap (within 3 sd). None when there is none, or more than one."""
    slack = 3 * sd + MIN_GAP
    found: dict[str, Fill] = {}

    def walk(tail: str, path: list[int], bases: list[str], added: int) -> None:
        if len(path) == MAX_FILLERS:
            return
        for c, seq, o in fillers.after(tail):
            if c in path or added + len(seq) - o - MIN_OVERLAP > gap + slack:
                continue
            more = [*bases, seq[o:]]
            o2 = end_overlap(seq, right)
            if o2 and abs(added + len(seq) - o - o2 - gap) <= slack:
                text = "".join(more)
                found.setdefault(text, Fill(text, o2, [*path, c]))
            walk(seq, [*path, c], more, added + len(seq) - o)

    walk(left, [], [], 0)
    return next(iter(found.values())) if len(found) == 1 else None


@dataclass
class Scaffold:
    seq: str
    contigs: int
    gaps: int  # gaps filled with N
    n_bases: int
    filled: int = 0  # gaps closed with a filler contig
    extended: int = 0  # bases added past its outer ends


def build_scaffolds(
    contigs: Sequence[str], layout: Layout, sd: float, fillers: dict[int, str] | None = None
) -> tuple[list[Scaffold], set[int]]:
    """Each chain's contigs on their strands; between neighbours, in this order of preference,
    their exact overlap, filler contigs overlapping both (a repeat the pairs span), or
    N's of the estimated gap (at least MIN_GAP). Returns the scaffolds and the fillers used."""
    out = []
    used: set[int] = set()
    index = Fillers(fillers or {})
    for chain, gaps in zip(layout.chains, layout.gaps, strict=True):
        parts: list[str] = []
        n_gaps = n_bases = n_filled = 0
        prev = ""
        for i, (c, rev) in enumerate(chain):
            seq = revcomp(contigs[c]) if rev else contigs[c]
            trim = 0
            if i:
                gap = gaps[i - 1]
                trim = direct_overlap(prev, seq, gap, sd)
                fill = bridge(prev, seq, gap, sd, index) if not trim and index else None
                if fill is not None:
                    parts.append(fill.bases)
                    trim = fill.trim
                    used.update(fill.contigs)
                    n_filled += 1
                elif not trim:
                    n = max(MIN_GAP, round(gap))
                    parts.append("N" * n)
                    n_gaps += 1
                    n_bases += n
            parts.append(seq[trim:])
            prev = seq
        out.append(Scaffold("".join(parts), len(chain), n_gaps, n_bases, n_filled))
    return out, used


def summary(lengths: Sequence[int], genome_size: int) -> dict[str, int]:
    return {
        "count": len(lengths),
        "total_length": sum(lengths),
        "n50": n50(lengths),
        "ng50": n50(lengths, genome_size),
        "longest": max(lengths, default=0),
    }


def genome_size_from_histogram(hist: dict[int, int], min_count: float) -> int:
    """Distinct k-mers seen at least ``min_count`` times: about the genome's length (less
    the extra copies of repeats)."""
    return sum(n for c, n in hist.items() if c >= min_count)


def fasta(records: Iterable[tuple[str, str]]) -> bytes:
    lines = []
    for header, seq in records:
        lines.append(f">{header}\n")
        lines.extend(seq[j : j + 80] + "\n" for j in range(0, len(seq), 80))
    return "".join(lines).encode()


@dataclass
class PairOutput:
    """What the pairs' reducers wrote: the insert size histogram, the links, the odd pairs,
    and the bases of reads reaching past each contig end (going outward)."""

    hist: dict[int, int] = field(default_factory=dict)
    links: list[tuple[int, int, int, int]] = field(default_factory=list)
    odd: int = 0
    overhangs: dict[int, list[str]] = field(default_factory=dict)


def parse_pair_output(text: str) -> PairOutput:
    out = PairOutput()
    for line in text.splitlines():
        kind, *values = line.split("\t")
        if kind == "insert":
            out.hist[int(values[0])] = out.hist.get(int(values[0]), 0) + int(values[1])
        elif kind == "link":
            ea, da, eb, db = (int(v) for v in values)
            out.links.append((ea, da, eb, db))
        elif kind == "odd":
            out.odd += int(values[0])
        elif kind == "extend":
            out.overhangs.setdefault(int(values[0]), []).append(values[1])
        else:
            raise ValueError(f"not a line of the pairs' reducers: {line[:60]!r}")
    return out


def extension(overhangs: Sequence[str], agree: float = 0.7) -> str:
    """The bases past a scaffold's end that the reads reaching there agree on: position by
    position, while the most common base is at least ``agree`` of the reads covering it.
    As Velvet keeps k-mers seen once at the ends, one read is enough."""
    out = []
    for i in range(max((len(s) for s in overhangs), default=0)):
        column = [s[i] for s in overhangs if len(s) > i and s[i] != "N"]
        if not column:
            break
        base = max("ACGT", key=column.count)
        if column.count(base) < agree * len(column):
            break
        out.append(base)
    return "".join(out)


def scaffold(
    contigs: Sequence[str],
    coverage: Sequence[float],
    pairs: PairOutput,
    min_links: int,
    insert: Insert | None = None,
) -> tuple[list[Scaffold], dict[str, Any]]:
    """Scaffolds of the contigs (every contig in exactly one, longest first) and what was done.

    ``insert`` given is used as it is; else it is estimated from the pairs'
    histogram. Without pairs (no insert size) each contig is a scaffold of its own.
    """
    lengths = [len(c) for c in contigs]
    links, overhangs = pairs.links, pairs.overhangs
    if insert is None:
        insert = estimate_insert(pairs.hist)
    info: dict[str, Any] = {
        "pairs_within_contigs": sum(pairs.hist.values()),
        "pairs_linking_contigs": len(links),
        "odd_pairs": pairs.odd,
        "min_links": min_links,
        "insert_size": None,
        "insert_sd": None,
    }
    if insert is None:
        return _alone(contigs, info)
    rep = repeats(coverage, lengths)
    bundles = bundle_links(links, insert, min_links, rep)
    layout = order_contigs(bundles, lengths, insert.sd)
    info.update(
        insert_size=round(insert.mean, 1),
        insert_sd=round(insert.sd, 1),
        repeats=len(rep),
        bundles=len(bundles),
        joins=sum(len(c) - 1 for c in layout.chains),
        ambiguous_ends=layout.ambiguous_ends,
    )
    # Contigs left on their own and no longer than a fragment may lie in a gap.
    alone = [chain[0][0] for chain in layout.chains if len(chain) == 1]
    fillers = {c: contigs[c] for c in alone if lengths[c] <= insert.mean + 3 * insert.sd}
    built, used = build_scaffolds(contigs, layout, insert.sd, fillers)
    # A scaffold's two outer ends are extended by the reads reaching past them.
    for sc, chain in zip(built, layout.chains, strict=True):
        (first, first_rev), (last, last_rev) = chain[0], chain[-1]
        left = extension(overhangs.get(2 * first + first_rev, []))
        right = extension(overhangs.get(2 * last + 1 - last_rev, []))
        sc.seq = revcomp(left) + sc.seq + right
        sc.extended = len(left) + len(right)
    # A filler placed in a gap is not written again on its own.
    scaffolds = [
        sc
        for sc, chain in zip(built, layout.chains, strict=True)
        if len(chain) > 1 or chain[0][0] not in used
    ]
    return _finish(scaffolds, info)


def _alone(contigs: Sequence[str], info: dict[str, Any]) -> tuple[list[Scaffold], dict[str, Any]]:
    """No pairs: each contig is a scaffold of its own."""
    info.update(repeats=0, bundles=0, joins=0, ambiguous_ends=0)
    return _finish([Scaffold(c, 1, 0, 0) for c in contigs], info)


def _finish(
    scaffolds: list[Scaffold], info: dict[str, Any]
) -> tuple[list[Scaffold], dict[str, Any]]:
    # On the strand that sorts first, longest first: the output does not depend on traversal.
    for s in scaffolds:
        s.seq = min(s.seq, revcomp(s.seq))
    scaffolds.sort(key=lambda s: (-len(s.seq), s.seq))
    info["gaps"] = sum(s.gaps for s in scaffolds)
    info["gap_bases"] = sum(s.n_bases for s in scaffolds)
    info["filled_gaps"] = sum(s.filled for s in scaffolds)
    info["extended_bases"] = sum(s.extended for s in scaffolds)
    info["merged_overlaps"] = sum(s.contigs - 1 - s.gaps - s.filled for s in scaffolds)
    return scaffolds, info
