"""De Bruijn graph assembly: 2-bit k-mers in numpy integers, unitigs, simplification.

Pure functions over arrays and strings; the step scripts (steps/*.py) and the
MapReduce functions (mr/*.py) do the I/O. A k-mer of at most 31 bases is an
unsigned 64-bit integer, two bits a base (A=0, C=1, G=2, T=3), first base
highest. A node of the graph is a canonical k-mer (the smaller of the k-mer
and its reverse complement); k is odd, so no k-mer is its own reverse
complement. An oriented node is ``2 * index + strand``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import words
from seqio import BadReads as BadReads  # re-exported: callers know them as dbg.*
from seqio import fastq_sequences as fastq_sequences
from seqio import read_fasta as read_fasta
from seqio import revcomp as revcomp
from unitig_graph import Simplify as Simplify
from unitig_graph import Unitig as Unitig
from unitig_graph import UnitigGraph as UnitigGraph
from unitig_graph import contigs_and_stats as contigs_and_stats
from unitig_graph import join_overlaps as join_overlaps
from unitig_graph import mean as mean
from unitig_graph import n50 as n50
from unitig_graph import read_unitigs as read_unitigs
from unitig_graph import simplify as simplify
from unitig_graph import write_unitigs as write_unitigs

_CODE = np.full(256, 4, dtype=np.uint8)
for _i, _b in enumerate(b"ACGT"):
    _CODE[_b] = _i
    _CODE[_b + 32] = _i  # lower case
_BASES = np.frombuffer(b"ACGT", dtype=np.uint8)
_U = np.uint64
MAX_K = words.MAX_K


def check_k(k: int) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or not 3 <= k <= MAX_K or k % 2 == 0:
        raise ValueError(f"k must be an odd integer from 3 to {MAX_K}, not {k!r}")
    return k


def revcomp_codes(x: np.ndarray, k: int) -> np.ndarray:
    """The reverse complements of 2-bit k-mer values (words.py: bit tricks over whole arrays)."""
    return words.revcomp(x, k)


def canonical_kmers(seq: bytes, k: int) -> np.ndarray:
    """The sort keys of every canonical k-mer of ``seq`` (windows holding a base other than
    ACGT are skipped)."""
    codes = _CODE[np.frombuffer(seq, dtype=np.uint8)]
    n = len(codes) - k + 1
    if n <= 0:
        return words.key(words.empty(k), k)
    bad = np.concatenate(([0], np.cumsum(codes == 4)))
    valid = (bad[k:] - bad[:-k]) == 0
    values = words.windows(codes & 3, k)[valid]
    return words.key(words.canonical(values, k)[0], k)


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
    if len(keys) == 1:  # already distinct and sorted? (np.unique's output)
        only = keys[0]
        if len(only) < 2 or bool(np.all(only[1:] > only[:-1])):
            return only, np.asarray(counts[0], dtype=np.int64)
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
    values = words.oriented(nodes, k)
    succ = np.full((2 * n, 4), -1, dtype=np.int64)
    for base in range(4):
        canon, strand = words.canonical(words.shift_in(values, base, k), k)
        ckey = words.key(canon, k)
        idx = np.searchsorted(nodes, ckey)
        idx[idx >= n] = 0
        found = nodes[idx] == ckey if n else np.zeros(0, dtype=bool)
        succ[found, base] = 2 * idx[found] + strand[found]
    return succ


def long_sides(succ: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
    """Out- and in-degree of each oriented node, and whether k k-mers run on ahead and behind it.

    Both sides of a gap are long: at least k k-mers without a dead end (or up
    to a branch). An error's k-mers seen twice make a chain shorter than that.
    """
    n2 = len(succ)
    outdeg = (succ >= 0).sum(axis=1)
    indeg = outdeg[np.arange(n2) ^ 1]
    only = succ[np.arange(n2), np.argmax(succ >= 0, axis=1)]
    run = np.where(outdeg == 0, 1, k)
    for _ in range(k):
        run = np.where(outdeg == 1, np.minimum(run[only] + 1, k), run)
    ahead = run >= k  # k k-mers on from this oriented node
    return outdeg, indeg, ahead, ahead[np.arange(n2) ^ 1]


def bridges(
    keys: np.ndarray,
    counts: np.ndarray,
    solid: np.ndarray,
    k: int,
    max_steps: int,
    report: dict[str, int] | None = None,
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
    the k-mers to add; ``report`` gets the dead ends tried and those bridged.
    """
    add = np.zeros(len(keys), dtype=bool)
    nodes = keys[solid]
    n = len(nodes)
    if n == 0 or max_steps <= 0:
        return add
    succ = successors(nodes, k)
    outdeg, indeg, ahead, behind = long_sides(succ, k)
    ends = np.flatnonzero((outdeg == 0) & behind)
    if report is not None:
        report["dead_ends"] = len(ends)
        report["bridged_by_reads"] = 0
    if len(ends) == 0:
        return add
    solid_index = np.cumsum(solid) - 1  # position among the solid k-mers
    # Oriented values of each walk's current k-mer.
    values = words.oriented(nodes[ends >> 1], k)[2 * np.arange(len(ends)) + (ends & 1)]
    walk = np.arange(len(ends))
    steps: list[tuple[np.ndarray, np.ndarray]] = []  # (walk, key index) of each step taken
    for _ in range(max_steps + 1):
        if len(walk) == 0:
            break
        best = np.full(len(walk), -1, dtype=np.int64)
        best_count = np.zeros(len(walk), dtype=np.int64)
        best_value = np.zeros_like(values)
        tie = np.zeros(len(walk), dtype=bool)
        arrived = np.full(len(walk), -1, dtype=np.int64)  # oriented solid node reached
        for base in range(4):
            s = words.shift_in(values, base, k)
            canon, flip = words.canonical(s, k)
            ckey = words.key(canon, k)
            idx = np.searchsorted(keys, ckey)
            idx[idx >= len(keys)] = 0
            found = keys[idx] == ckey
            is_solid = found & solid[idx]
            strand = flip.astype(np.int64)
            hit = np.where(is_solid, 2 * solid_index[idx] + strand, -1)
            arrived = np.where((hit >= 0) & (arrived < 0), hit, np.where(hit >= 0, -2, arrived))
            c = np.where(found & ~solid[idx], counts[idx], 0)
            tie |= (c > 0) & (c == best_count)
            more = c > best_count
            tie &= ~more
            best = np.where(more, idx, best)
            best_value = words.where(more, s, best_value)
            best_count = np.where(more, c, best_count)
        # A walk ends at a solid k-mer (a gap when it is that k-mer's only way in).
        done = arrived != -1
        good = done & (arrived >= 0)
        good[good] &= (indeg[arrived[good]] == 0) & ahead[arrived[good]]
        if report is not None:
            report["bridged_by_reads"] += int(good.sum())
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
    values = words.oriented(nodes, k)
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
        tail = _BASES[words.last_base(values[p[1:]]).astype(np.intp)].tobytes().decode()
        first = decode(words.as_int(values, int(p[0])), k)
        out.append((first + tail, len(path), int(counts[p >> 1].sum())))

    for v in np.flatnonzero(~has_prev).tolist():
        if not seen[v >> 1]:
            walk(v)
    for i in range(n):  # what is left lies on cycles
        if not seen[i]:
            walk(2 * i)
    return out


# ---- k-mer count files: "<16 or 32 hex digits>\t<count>\n" lines ----

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
    width = 32 if data[16:17] != b"\t" else 16  # two words a k-mer beyond k = 31
    if len(data) <= width or data[width : width + 1] != b"\t":
        raise ValueError("not a k-mer count line")
    digits = _HEX[arr[starts[:, None] + np.arange(width)]]
    if (digits == 255).any() or (arr[starts + width] != 9).any():
        raise ValueError("not a k-mer count line")
    values = np.zeros((len(starts), width // 16), dtype=np.uint64)
    for w in range(width // 16):
        for j in range(16 * w, 16 * w + 16):
            values[:, w] = (values[:, w] << _U(4)) | digits[:, j].astype(np.uint64)
    keys = values[:, 0] if width == 16 else words.key(values, words.MAX_K)
    counts = np.zeros(len(starts), dtype=np.int64)
    first = starts + width + 1
    width = ends - first
    for j in range(int(width.max())):
        more = width > j
        counts[more] = counts[more] * 10 + (arr[first[more] + j].astype(np.int64) - 48)
    return keys, counts


def format_counts(keys: np.ndarray, counts: np.ndarray) -> bytes:
    return words.hex_lines(keys, counts)
