"""The unitig graph and its simplification (tips, bubbles, coverage), and contigs from it.

Pure functions over strings; dbg.py builds the unitigs from k-mers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from seqio import read_fasta, revcomp

# ---- the unitig graph and its simplification ----


@dataclass
class Unitig:
    seq: str
    kmers: int
    total: int  # the sum of its k-mers' counts

    @property
    def coverage(self) -> float:
        return self.total / self.kmers


@dataclass
class Simplify:
    k: int
    min_count: float = 0.0
    tip_length: int = 0
    bubble_size: int = 0
    remove_tips: bool = True
    remove_bubbles: bool = True
    max_rounds: int = 100
    log: list[dict[str, int]] = field(default_factory=list)


class UnitigGraph:
    """Unitigs joined where one ends in the (k-1)-mer another starts with."""

    def __init__(self, unitigs: list[Unitig], k: int) -> None:
        self.k = k
        self.unitigs = unitigs
        self._index()

    def _index(self) -> None:
        k1 = self.k - 1
        self.oseq: list[str] = []
        for u in self.unitigs:
            self.oseq.append(u.seq)
            self.oseq.append(revcomp(u.seq))
        starts: dict[str, list[int]] = {}
        for v, s in enumerate(self.oseq):
            starts.setdefault(s[:k1], []).append(v)
        self.succ = [starts.get(s[-k1:], []) for s in self.oseq]

    def pred(self, v: int) -> list[int]:
        return [w ^ 1 for w in self.succ[v ^ 1]]

    def cov(self, v: int) -> float:
        return self.unitigs[v >> 1].coverage

    def low_coverage(self, cutoff: float, min_length: int) -> set[int]:
        """Unitigs below the cutoff: on their own, or dead ends of ``min_length`` bases or more.

        A unitig joined at both ends is never cut for its coverage (a thinly
        covered stretch of the genome would become a gap); shorter dead ends
        and bubble arms are judged against their alternative, by tips and bubbles.
        """
        found = set()
        for i, u in enumerate(self.unitigs):
            if u.coverage >= cutoff:
                continue
            ends = (not self.succ[2 * i]) + (not self.succ[2 * i + 1])
            if ends == 2 or (ends == 1 and len(u.seq) >= min_length):
                found.add(i)
        return found

    def tips(self, max_length: int) -> set[int]:
        """Dead ends shorter than ``max_length`` bases hanging off a branch with a better path."""
        found: set[int] = set()
        for v in range(len(self.oseq)):
            if len(self.oseq[v]) >= max_length or self.succ[v]:
                continue
            preds = self.pred(v)
            if not preds:
                continue  # isolated: left for the length filter
            for p in preds:
                others = [w for w in self.succ[p] if w != v]
                if any(
                    (self.cov(w), len(self.oseq[w]), -w) > (self.cov(v), len(self.oseq[v]), -v)
                    for w in others
                ):
                    found.add(v >> 1)
                    break
        return found

    def bubbles(self, max_size: int) -> set[int]:
        """Bubble arms: a unitig from one node to another beside a better-covered path between them.

        An arm is a unitig of at most ``max_size`` bases with one way in and
        one way out. The other path is searched from the arm's start along
        the other successors, through paths of at most ``max_size`` bases
        and a few unitigs (errors close together split the true path). The
        arm goes when that path's coverage (mean k-mer count) is higher, or
        equal with the greater sequence. Arms are taken lowest coverage first,
        and a path that removed one is kept this round, so a round never cuts
        both sides of a bubble.
        """
        k1 = self.k - 1
        candidates = []
        for a in range(len(self.oseq)):
            if len(self.oseq[a]) > max_size or len(self.succ[a]) != 1:
                continue
            preds = self.pred(a)
            e = self.succ[a][0]
            if len(preds) != 1 or {preds[0] >> 1, e >> 1} & {a >> 1}:
                continue
            if len(self.succ[preds[0]]) < 2:
                continue
            candidates.append((self.cov(a), self.oseq[a], a, preds[0], e))
        candidates.sort()
        found: set[int] = set()
        kept: set[int] = set()
        for cov, seq, a, v, e in candidates:
            if (a >> 1) in kept or (a >> 1) in found:
                continue
            best: tuple[float, str, list[int]] | None = None
            stack = [(w, [w]) for w in self.succ[v] if w != a]
            while stack:
                w, path = stack.pop()
                if (w >> 1) in found or (w >> 1) == (a >> 1):
                    continue
                if w == e:
                    inner = path[:-1]
                    kmers = sum(self.unitigs[x >> 1].kmers for x in inner)
                    total = sum(self.unitigs[x >> 1].total for x in inner)
                    pcov = total / kmers if kmers else math.inf
                    key = (pcov, self.oseq[inner[0]] if inner else "", inner)
                    if best is None or key[:2] > best[:2]:
                        best = key
                    continue
                size = sum(len(self.oseq[x]) - k1 for x in path) + k1
                if size > max_size or len(path) > 4:
                    continue
                stack.extend((x, [*path, x]) for x in self.succ[w])
            if best is not None and best[:2] > (cov, seq):
                found.add(a >> 1)
                kept.update(x >> 1 for x in best[2])
        return found

    def without(self, drop: set[int]) -> UnitigGraph:
        return UnitigGraph([u for i, u in enumerate(self.unitigs) if i not in drop], self.k)

    def merged(self) -> UnitigGraph:
        """Join every chain of unitigs that has no branch."""
        k1 = self.k - 1
        m = len(self.oseq)
        nxt = [-1] * m
        for v in range(m):
            if len(self.succ[v]) == 1:
                w = self.succ[v][0]
                if (w >> 1) != (v >> 1) and len(self.succ[w ^ 1]) == 1:
                    nxt[v] = w
        has_prev = [False] * m
        for w in nxt:
            if w >= 0:
                has_prev[w] = True
        seen = [False] * len(self.unitigs)
        out: list[Unitig] = []

        def walk(start: int) -> None:
            parts = [self.oseq[start]]
            kmers, total = self.unitigs[start >> 1].kmers, self.unitigs[start >> 1].total
            seen[start >> 1] = True
            v = nxt[start]
            while v >= 0 and not seen[v >> 1]:
                seen[v >> 1] = True
                parts.append(self.oseq[v][k1:])
                kmers += self.unitigs[v >> 1].kmers
                total += self.unitigs[v >> 1].total
                v = nxt[v]
            out.append(Unitig("".join(parts), kmers, total))

        for v in range(m):
            if not has_prev[v] and not seen[v >> 1]:
                walk(v)
        for i in range(len(self.unitigs)):
            if not seen[i]:
                walk(2 * i)
        return UnitigGraph(out, self.k)


def simplify(graph: UnitigGraph, how: Simplify) -> UnitigGraph:
    """Drop tips and bubble arms, else low-coverage unitigs, then merge chains; until no change.

    Low coverage waits until no tip or bubble is left: a short true unitig
    between two errors may be thinly covered, and once the errors are gone
    it is part of a long unitig whose mean coverage keeps it.
    """
    graph = graph.merged()
    for round_ in range(1, how.max_rounds + 1):
        tips = graph.tips(how.tip_length) if how.remove_tips else set()
        bubbles = graph.bubbles(how.bubble_size) if how.remove_bubbles else set()
        low: set[int] = set()
        if not tips and not bubbles and how.min_count > 0:
            low = graph.low_coverage(how.min_count, how.tip_length)
        drop = low | tips | bubbles
        how.log.append(
            {
                "round": round_,
                "unitigs": len(graph.unitigs),
                "low_coverage": len(low),
                "tips": len(tips),
                "bubble_arms": len(bubbles),
            }
        )
        if not drop:
            break
        graph = graph.without(drop).merged()
    return graph


def join_overlaps(
    graph: UnitigGraph, min_overlap: int, min_length: int, report: dict[str, int] | None = None
) -> UnitigGraph:
    """Join a dead end to the one dead start its end overlaps: a gap no read spans.

    Where every read over a few bases holds an error there, the true k-mers
    over them are in no read: the graph breaks although the bases on both
    sides are known. After tips and bubbles are gone, a unitig of at least
    ``min_length`` bases that ends in nothing, whose last ``min_overlap`` to
    k - 2 bases are the first bases of one such unitig that starts from
    nothing, is joined to it over that overlap (the k - 1 - overlap k-mers
    between them are the ones no read held). A join is made only where it is
    the single one both sides could make; any other break is kept. ``report``
    gets ``joined`` and ``ambiguous`` (the ends that had more than one).
    """
    k = graph.k
    oseq = graph.oseq
    ends = [v for v in range(len(oseq)) if not graph.succ[v] and len(oseq[v]) >= max(min_length, k)]
    starts = [v ^ 1 for v in ends]  # a dead start is a dead end read on the other strand
    found: dict[int, list[tuple[int, int]]] = {}
    into: dict[int, int] = {}
    for o in range(min_overlap, k - 1):
        by_prefix: dict[str, list[int]] = {}
        for w in starts:
            by_prefix.setdefault(oseq[w][:o], []).append(w)
        for v in ends:
            for w in by_prefix.get(oseq[v][-o:], []):
                if (w >> 1) != (v >> 1):
                    found.setdefault(v, []).append((w, o))
                    into[w] = into.get(w, 0) + 1
    nxt: dict[int, tuple[int, int]] = {}
    ambiguous = 0
    for v, cands in found.items():
        if len(cands) == 1 and into[cands[0][0]] == 1:
            nxt[v] = cands[0]
        else:
            ambiguous += 1
    if report is not None:
        report["joined"] = len(nxt) // 2  # each join is found on both strands
        report["ambiguous"] = ambiguous
    if not nxt:
        return graph
    seen: set[int] = set()
    out: list[Unitig] = []
    has_prev = {w for w, _ in nxt.values()}

    def walk(v: int) -> None:
        u = graph.unitigs[v >> 1]
        parts, kmers, total = [oseq[v]], u.kmers, u.total
        seen.add(v >> 1)
        while v in nxt and (nxt[v][0] >> 1) not in seen:
            w, o = nxt[v]
            seen.add(w >> 1)
            parts.append(oseq[w][o:])
            kmers += graph.unitigs[w >> 1].kmers + (k - 1 - o)  # the k-mers no read held
            total += graph.unitigs[w >> 1].total
            v = w
        out.append(Unitig("".join(parts), kmers, total))

    for v in sorted(nxt):
        if v not in has_prev and (v >> 1) not in seen:
            walk(v)
    for i in range(len(graph.unitigs)):
        if i not in seen:
            walk(2 * i)
    return UnitigGraph(out, k)


def write_unitigs(unitigs: Iterable[Unitig]) -> bytes:
    lines = [f">u{i} kmers={u.kmers} count={u.total}\n{u.seq}\n" for i, u in enumerate(unitigs, 1)]
    return "".join(lines).encode()


def read_unitigs(text: str) -> list[Unitig]:
    out = []
    for header, seq in read_fasta(text):
        fields = dict(f.split("=", 1) for f in header.split()[1:])
        out.append(Unitig(seq, int(fields["kmers"]), int(fields["count"])))
    return out


def n50(lengths: Sequence[int], genome_size: int | None = None) -> int:
    """N50 (half the total length) or, given a genome size, NG50 (0 when not reached)."""
    target = (genome_size if genome_size is not None else sum(lengths)) / 2
    run = 0
    for n in sorted(lengths, reverse=True):
        run += n
        if run >= target:
            return n
    return 0


def contigs_and_stats(unitigs: list[Unitig], min_length: int) -> tuple[bytes, dict[str, int]]:
    """Contigs of ``min_length`` bases or more, longest first, each on its smaller strand."""
    kept = []
    for u in unitigs:
        if len(u.seq) >= min_length:
            kept.append((min(u.seq, revcomp(u.seq)), u.coverage))
    kept.sort(key=lambda c: (-len(c[0]), c[0]))
    lines = []
    for i, (seq, cov) in enumerate(kept, 1):
        lines.append(f">contig{i} length={len(seq)} coverage={cov:.2f}\n")
        lines.extend(seq[j : j + 80] + "\n" for j in range(0, len(seq), 80))
    lengths = [len(s) for s, _ in kept]
    stats = {
        "contigs": len(kept),
        "total_length": sum(lengths),
        "n50": n50(lengths),
        "longest": max(lengths, default=0),
        "min_length": min_length,
    }
    return "".join(lines).encode(), stats


def mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if values else 0.0
