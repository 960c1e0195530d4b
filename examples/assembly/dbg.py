"""De Bruijn graph assembly: 2-bit k-mers in numpy integers, unitigs, simplification.

Pure functions over arrays and strings; the step scripts (steps/*.py) and the
MapReduce functions (mr/*.py) do the I/O. A k-mer of at most 31 bases is an
unsigned 64-bit integer, two bits a base (A=0, C=1, G=2, T=3), first base
highest. A node of the graph is a canonical k-mer (the smaller of the k-mer
and its reverse complement); k is odd, so no k-mer is its own reverse
complement. An oriented node is ``2 * index + strand``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

_CODE = np.full(256, 4, dtype=np.uint8)
for _i, _b in enumerate(b"ACGT"):
    _CODE[_b] = _i
    _CODE[_b + 32] = _i  # lower case
_BASES = np.frombuffer(b"ACGT", dtype=np.uint8)
_COMPLEMENT = bytes.maketrans(b"ACGTacgtN", b"TGCAtgcaN")
_U = np.uint64


def check_k(k: int) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or not 3 <= k <= 31 or k % 2 == 0:
        raise ValueError(f"k must be an odd integer from 3 to 31, not {k!r}")
    return k


def revcomp(seq: str) -> str:
    return seq.encode().translate(_COMPLEMENT)[::-1].decode()


def revcomp_codes(x: np.ndarray, k: int) -> np.ndarray:
    """The reverse complements of 2-bit k-mers (bit tricks: reverse the 2-bit groups)."""
    x = x ^ _U((1 << (2 * k)) - 1)
    x = ((x >> _U(2)) & _U(0x3333333333333333)) | ((x & _U(0x3333333333333333)) << _U(2))
    x = ((x >> _U(4)) & _U(0x0F0F0F0F0F0F0F0F)) | ((x & _U(0x0F0F0F0F0F0F0F0F)) << _U(4))
    x = ((x >> _U(8)) & _U(0x00FF00FF00FF00FF)) | ((x & _U(0x00FF00FF00FF00FF)) << _U(8))
    x = ((x >> _U(16)) & _U(0x0000FFFF0000FFFF)) | ((x & _U(0x0000FFFF0000FFFF)) << _U(16))
    x = (x >> _U(32)) | (x << _U(32))
    return x >> _U(64 - 2 * k)


def canonical_kmers(seq: bytes, k: int) -> np.ndarray:
    """Every canonical k-mer of ``seq`` (windows holding a base other than ACGT are skipped)."""
    codes = _CODE[np.frombuffer(seq, dtype=np.uint8)]
    n = len(codes) - k + 1
    if n <= 0:
        return np.zeros(0, dtype=np.uint64)
    bad = np.concatenate(([0], np.cumsum(codes == 4)))
    valid = (bad[k:] - bad[:-k]) == 0
    values = (codes & 3).astype(np.uint64)
    acc = np.zeros(n, dtype=np.uint64)
    for j in range(k):
        acc <<= _U(2)
        acc |= values[j : j + n]
    acc = acc[valid]
    return np.minimum(acc, revcomp_codes(acc, k))


def count_kmers(
    sequences: Iterable[bytes], k: int, chunk: int = 4 << 20
) -> tuple[np.ndarray, np.ndarray]:
    """Distinct canonical k-mers of the sequences and how often each was seen (sorted)."""
    keys: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    buf: list[bytes] = []
    size = 0

    def flush() -> None:
        nonlocal size
        if buf:
            u, c = np.unique(canonical_kmers(b"N".join(buf), k), return_counts=True)
            keys.append(u)
            counts.append(c.astype(np.int64))
            buf.clear()
            size = 0

    for seq in sequences:
        buf.append(seq)
        size += len(seq) + 1
        if size >= chunk:
            flush()
    flush()
    return merge_counts(keys, counts)


def merge_counts(
    keys: Sequence[np.ndarray], counts: Sequence[np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    if not keys:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    allk = np.concatenate(keys)
    allc = np.concatenate(counts)
    u, inverse = np.unique(allk, return_inverse=True)
    return u, np.bincount(inverse.ravel(), weights=allc, minlength=len(u)).astype(np.int64)


def decode(value: int, k: int) -> str:
    return "".join("ACGT"[(value >> (2 * (k - 1 - j))) & 3] for j in range(k))


# ---- count histogram and the automatic cutoff ----


def histogram(counts: np.ndarray) -> dict[int, int]:
    values, freq = np.unique(counts, return_counts=True)
    return {int(v): int(f) for v, f in zip(values, freq, strict=True)}


def first_valley(hist: dict[int, int]) -> int | None:
    """The first count c > 1 whose frequency is below that of c + 1 (None: no valley)."""
    top = max(hist, default=0)
    for c in range(2, top):
        if hist.get(c, 0) < hist.get(c + 1, 0):
            return c
    return None


# ---- the k-mer graph and its unitigs ----


def successors(nodes: np.ndarray, k: int) -> np.ndarray:
    """(2n, 4): for each oriented node, its successor by appended base, or -1."""
    n = len(nodes)
    values = np.empty(2 * n, dtype=np.uint64)
    values[0::2] = nodes
    values[1::2] = revcomp_codes(nodes, k)
    succ = np.full((2 * n, 4), -1, dtype=np.int64)
    mask = _U((1 << (2 * k)) - 1)
    for base in range(4):
        s = ((values << _U(2)) & mask) | _U(base)
        canon = np.minimum(s, revcomp_codes(s, k))
        idx = np.searchsorted(nodes, canon)
        idx[idx >= n] = 0
        found = nodes[idx] == canon if n else np.zeros(0, dtype=bool)
        strand = (s != canon).astype(np.int64)
        succ[found, base] = 2 * idx[found] + strand[found]
    return succ


def bridges(
    keys: np.ndarray, counts: np.ndarray, solid: np.ndarray, k: int, max_steps: int
) -> np.ndarray:
    """Rarely seen k-mers that close a gap between a dead end and a dead start of the solid graph.

    A true k-mer seen fewer times than the graph's cutoff is a gap in it: the
    solid k-mer before it has no successor and the one after it no
    predecessor. From every such dead end this walks through the k-mers left
    out, while each step has a single continuation (or one seen strictly most
    often), for at most ``max_steps`` k-mers; a walk that reaches a solid
    k-mer with no solid predecessor has found a gap, and its k-mers are kept.
    A walk from an error's dead end rejoins the true path where it already
    has a predecessor, so errors are not brought back; both sides of a gap
    must go on for k solid k-mers (or to a branch), so the short chain of an
    error seen twice is not joined either. Returns a mask over ``keys`` of
    the k-mers to add.
    """
    add = np.zeros(len(keys), dtype=bool)
    nodes = keys[solid]
    n = len(nodes)
    if n == 0 or max_steps <= 0:
        return add
    succ = successors(nodes, k)
    outdeg = (succ >= 0).sum(axis=1)
    indeg = outdeg[np.arange(2 * n) ^ 1]
    # Both sides of a gap are long: at least k k-mers without a dead end (or up
    # to a branch). An error's k-mers seen twice make a chain shorter than that.
    only = succ[np.arange(2 * n), np.argmax(succ >= 0, axis=1)]
    run = np.where(outdeg == 0, 1, k)
    for _ in range(k):
        run = np.where(outdeg == 1, np.minimum(run[only] + 1, k), run)
    ahead = run >= k  # k k-mers on from this oriented node
    behind = ahead[np.arange(2 * n) ^ 1]
    ends = np.flatnonzero((outdeg == 0) & behind)
    if len(ends) == 0:
        return add
    mask = _U((1 << (2 * k)) - 1)
    solid_index = np.cumsum(solid) - 1  # position among the solid k-mers
    # Oriented values of each walk's current k-mer.
    values = np.where(ends % 2 == 0, nodes[ends >> 1], revcomp_codes(nodes[ends >> 1], k))
    walk = np.arange(len(ends))
    steps: list[tuple[np.ndarray, np.ndarray]] = []  # (walk, key index) of each step taken
    for _ in range(max_steps + 1):
        if len(walk) == 0:
            break
        best = np.full(len(walk), -1, dtype=np.int64)
        best_count = np.zeros(len(walk), dtype=np.int64)
        best_value = np.zeros(len(walk), dtype=np.uint64)
        tie = np.zeros(len(walk), dtype=bool)
        arrived = np.full(len(walk), -1, dtype=np.int64)  # oriented solid node reached
        for base in range(4):
            s = ((values << _U(2)) & mask) | _U(base)
            canon = np.minimum(s, revcomp_codes(s, k))
            idx = np.searchsorted(keys, canon)
            idx[idx >= len(keys)] = 0
            found = keys[idx] == canon
            is_solid = found & solid[idx]
            strand = (s != canon).astype(np.int64)
            hit = np.where(is_solid, 2 * solid_index[idx] + strand, -1)
            arrived = np.where((hit >= 0) & (arrived < 0), hit, np.where(hit >= 0, -2, arrived))
            c = np.where(found & ~solid[idx], counts[idx], 0)
            tie |= (c > 0) & (c == best_count)
            more = c > best_count
            tie &= ~more
            best = np.where(more, idx, best)
            best_value = np.where(more, s, best_value)
            best_count = np.where(more, c, best_count)
        # A walk ends at a solid k-mer (a gap when it is that k-mer's only way in).
        done = arrived != -1
        good = done & (arrived >= 0)
        good[good] &= (indeg[arrived[good]] == 0) & ahead[arrived[good]]
        for w in walk[good].tolist():
            for ws, ks in steps:
                add[ks[ws == w]] = True
        go = ~done & (best >= 0) & ~tie
        walk, best = walk[go], best[go]
        if len(walk) == 0:
            break
        steps.append((walk, best))
        values = best_value[go]
    return add


def kmer_unitigs(
    nodes: np.ndarray, counts: np.ndarray, k: int, succ: np.ndarray | None = None
) -> list[tuple[str, int, int]]:
    """Compress linear chains of the k-mer graph: (sequence, k-mers, count sum) each."""
    n = len(nodes)
    if n == 0:
        return []
    if succ is None:
        succ = successors(nodes, k)
    outdeg = (succ >= 0).sum(axis=1)
    ids = np.arange(2 * n)
    indeg = outdeg[ids ^ 1]
    only = succ[ids, np.argmax(succ >= 0, axis=1)]
    ok = (outdeg == 1) & (only >= 0)
    ok[ok] &= (indeg[only[ok]] == 1) & ((only[ok] >> 1) != (ids[ok] >> 1))
    nxt = np.where(ok, only, -1)
    has_prev = np.zeros(2 * n, dtype=bool)
    has_prev[nxt[nxt >= 0]] = True
    nxt_l = nxt.tolist()
    seen = bytearray(n)
    values = np.empty(2 * n, dtype=np.uint64)
    values[0::2] = nodes
    values[1::2] = revcomp_codes(nodes, k)
    out: list[tuple[str, int, int]] = []

    def walk(start: int) -> None:
        path = [start]
        seen[start >> 1] = 1
        v = nxt_l[start]
        while v >= 0 and not seen[v >> 1]:
            seen[v >> 1] = 1
            path.append(v)
            v = nxt_l[v]
        p = np.array(path, dtype=np.int64)
        tail = _BASES[(values[p[1:]] & _U(3)).astype(np.intp)].tobytes().decode()
        out.append((decode(int(values[p[0]]), k) + tail, len(path), int(counts[p >> 1].sum())))

    for v in np.flatnonzero(~has_prev).tolist():
        if not seen[v >> 1]:
            walk(v)
    for i in range(n):  # what is left lies on cycles
        if not seen[i]:
            walk(2 * i)
    return out


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


# ---- FASTQ reads ----


class BadReads(ValueError):
    """Input that is not FASTQ as the assembler reads it; the message names the record."""


def fastq_sequences(data: bytes) -> list[bytes]:
    """The sequences of FASTQ records (four lines each; Windows line ends allowed).

    Raises BadReads naming the first record that is not one: compressed or
    FASTA input, a truncated record, a header without ``@``, a third line
    without ``+``, or a quality line not as long as its sequence. A mapper
    that skipped such records would count k-mers of the wrong lines.
    """
    if data[:2] == b"\x1f\x8b":
        raise BadReads("gzip-compressed: the assembler reads plain FASTQ; decompress it first")
    lines = data.split(b"\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if any(line.endswith(b"\r") for line in lines[:4]):
        lines = [line.rstrip(b"\r") for line in lines]
    if lines and lines[0][:1] == b">":
        name = _name(lines[0])
        raise BadReads(f"record 1 ({name}) is FASTA, not FASTQ: the assembler reads FASTQ")
    heads, seqs, plus, quals = lines[0::4], lines[1::4], lines[2::4], lines[3::4]
    for i, (h, s, p, q) in enumerate(zip(heads, seqs, plus, quals, strict=False)):
        if h[:1] != b"@" or p[:1] != b"+" or len(s) != len(q):
            name = _name(h)
            if h[:1] != b"@":
                raise BadReads(f"record {i + 1} ({name}): its header does not start with '@'")
            if p[:1] != b"+":
                raise BadReads(f"record {i + 1} ({name}): its third line does not start with '+'")
            raise BadReads(f"record {i + 1} ({name}): {len(s)} bases but {len(q)} quality values")
    if len(lines) % 4:
        i = len(lines) // 4
        raise BadReads(
            f"record {i + 1} ({_name(lines[4 * i])}) is truncated: {len(lines) % 4} of its 4 lines"
        )
    return seqs


def _name(header: bytes) -> str:
    """A record's header, short and printable, for a message."""
    text = header[:60].decode("ascii", "replace")
    return "".join(c if c.isprintable() else "?" for c in text) or "an empty line"


# ---- FASTA and figures ----


def read_fasta(text: str) -> list[tuple[str, str]]:
    records: list[tuple[str, str]] = []
    header, parts = None, []  # type: ignore[var-annotated]
    for line in text.splitlines():
        if line.startswith(">"):
            if header is not None:
                records.append((header, "".join(parts)))
            header, parts = line[1:], []
        elif line:
            parts.append(line.strip())
    if header is not None:
        records.append((header, "".join(parts)))
    return records


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


# ---- k-mer count files: "<16 hex digits>\t<count>\n" lines ----

_HEX = np.full(256, 255, dtype=np.uint8)
for _i, _b in enumerate(b"0123456789abcdef"):
    _HEX[_b] = _i


def parse_counts(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The k-mers and counts of count lines, parsed without a Python loop."""
    arr = np.frombuffer(data, dtype=np.uint8)
    ends = np.flatnonzero(arr == 10)
    if len(ends) == 0:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    starts = np.concatenate(([0], ends[:-1] + 1))
    digits = _HEX[arr[starts[:, None] + np.arange(16)]]
    if (digits == 255).any() or (arr[starts + 16] != 9).any():
        raise ValueError("not a k-mer count line")
    keys = np.zeros(len(starts), dtype=np.uint64)
    for j in range(16):
        keys = (keys << _U(4)) | digits[:, j].astype(np.uint64)
    counts = np.zeros(len(starts), dtype=np.int64)
    first = starts + 17
    width = ends - first
    for j in range(int(width.max())):
        more = width > j
        counts[more] = counts[more] * 10 + (arr[first[more] + j].astype(np.int64) - 48)
    return keys, counts


def format_counts(keys: np.ndarray, counts: np.ndarray) -> bytes:
    return "".join(
        f"{a:016x}\t{c}\n" for a, c in zip(keys.tolist(), counts.tolist(), strict=True)
    ).encode()
