"""Scaffolding from read pairs (examples/assembly/readmap.py, scaffold_lib.py): reads placed on
contigs, pairs joined into insert sizes and links, links bundled, contigs ordered, oriented and
joined; on contigs cut from a known genome, so every join can be checked base for base."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "assembly"
sys.path.insert(0, str(EXAMPLE))
import readmap as rm  # noqa: E402
import scaffold_lib as sl  # noqa: E402
import simulate  # noqa: E402

K = 31


def pairs_facts(contigs: list[str], genome: bytes, seed: int = 1) -> rm.PairFacts:
    """30x FR pairs of 400 bp fragments from the genome, placed on the contigs."""
    r1, r2, _, _ = simulate.simulate_pairs(genome, 30, 100, 0.01, seed, 400, 40)
    index = rm.build_index(contigs)
    return rm.pair_facts(rm.place_reads(index, r1), rm.place_reads(index, r2), index.lengths)


def run(
    contigs: list[str], coverage: list[float], facts: rm.PairFacts, min_links: int = 5
) -> tuple[list[sl.Scaffold], dict[str, Any]]:
    hist = dict(zip(*(a.tolist() for a in np.unique(facts.sizes, return_counts=True)), strict=True))
    links = [tuple(row) for row in facts.links.tolist()]
    return sl.scaffold(contigs, coverage, hist, links, min_links)


def test_reads_are_placed_where_they_came_from_on_either_strand() -> None:
    genome = simulate.random_genome(3000, 11).decode()
    contigs = [genome[:1000], sl.revcomp(genome[1000:2200]), genome[2200:]]
    index = rm.build_index(contigs)
    reads = [
        genome[100:200].encode(),  # forward on contig 0 at 100
        sl.revcomp(genome[300:400]).encode(),  # reversed on contig 0 at 300
        genome[1500:1600].encode(),  # contig 1 is reversed: reversed there at 2200 - 1600
        (genome[2500:2540] + "N" + genome[2541:2600]).encode(),  # an N: its k-mers left out
        b"ACGT" * 5,  # shorter than a seed
    ]
    placed = rm.place_reads(index, reads)
    assert placed.contig.tolist() == [0, 0, 1, 2, -1]
    assert placed.strand.tolist()[:4] == [0, 1, 1, 0]
    assert placed.start.tolist()[:4] == [100, 300, 600, 300]
    # A repeat within the contigs places nothing: its k-mers occur twice.
    twice = rm.build_index([genome[:500], genome[:500]])
    assert len(twice.keys) == 0


def test_pairs_give_the_insert_size_and_links_between_the_ends_they_point_to() -> None:
    genome = simulate.random_genome(3000, 12).decode()
    contigs = [genome[:1000], sl.revcomp(genome[1100:3000])]
    index = rm.build_index(contigs)
    first = [genome[100:200], genome[700:800], genome[500:600]]
    second = [sl.revcomp(genome[350:450]), sl.revcomp(genome[1200:1300]), genome[520:620]]
    facts = rm.pair_facts(
        rm.place_reads(index, [s.encode() for s in first]),
        rm.place_reads(index, [s.encode() for s in second]),
        index.lengths,
    )
    assert facts.sizes.tolist() == [350]  # 100 .. 450
    assert facts.odd == 1  # both forward on one contig
    # Pair 2: the first read points to contig 0's right end (end 1), 300 bases from it; its
    # mate, genome 1200..1300 reversed, lies forward on contig 1 (genome 3000..1100 as it
    # reads) from position 1700 and points to its right end (end 3), 1900 - 1700 bases on.
    assert facts.links.tolist() == [[1, 300, 3, 200]]
    lines = rm.mapper_lines(facts).decode().splitlines()
    assert lines[:2] == ["I350\t1", "O\t1"] and lines[2].startswith("L1.3\t300 ")


def repeat_genome(seed: int) -> tuple[str, str, list[str]]:
    """A genome U1 R U2 R U3 R U4 (R: 200 bases) and its de Bruijn contigs for k = 31:
    the unique parts with the k - 1 bases of R they reach into, and R once."""
    rng = np.random.default_rng(seed)
    parts = ["".join(rng.choice(list("ACGT"), n)) for n in (6000, 5000, 7000, 4000)]
    r = "".join(rng.choice(list("ACGT"), 200))
    genome = r.join(parts)
    k1 = K - 1
    unique = [
        parts[0] + r[:k1],
        r[-k1:] + parts[1] + r[:k1],
        r[-k1:] + parts[2] + r[:k1],
        r[-k1:] + parts[3],
    ]
    return genome, r, unique


def test_repeat_shorter_than_the_insert_is_spanned_and_closed_with_its_contig() -> None:
    genome, r, unique = repeat_genome(3)
    # Out of order, two on the other strand; the repeat's coverage is three times the rest.
    contigs = [unique[2], sl.revcomp(unique[0]), r, sl.revcomp(unique[3]), unique[1]]
    coverage = [30.0, 30.0, 90.0, 30.0, 30.0]
    scaffolds, info = run(contigs, coverage, pairs_facts(contigs, genome.encode()))
    assert [s.seq for s in scaffolds] == [min(genome, sl.revcomp(genome))]
    assert info["repeats"] == 1 and info["joins"] == 3 and info["filled_gaps"] == 3, info
    assert info["gaps"] == 0 and abs(info["insert_size"] - 400) < 10, info
    assert 30 < info["insert_sd"] < 50, info


def test_a_missing_stretch_becomes_ns_of_about_its_length() -> None:
    genome = simulate.random_genome(20_000, 5).decode()
    contigs = [genome[:9000], sl.revcomp(genome[9150:])]  # 150 bases in no contig
    scaffolds, info = run(contigs, [30.0, 30.0], pairs_facts(contigs, genome.encode(), 2))
    (one,) = scaffolds
    seq = one.seq if one.seq.startswith(genome[:50]) else sl.revcomp(one.seq)
    left, _, right = seq.partition("N")
    assert left == genome[:9000] and right.lstrip("N") == genome[9150:]
    n = len(seq) - len(left) - len(right.lstrip("N"))
    assert 150 - 80 <= n <= 150 + 80, n  # the estimate, from pairs spanning the gap
    assert info["gaps"] == 1 and info["gap_bases"] == n and one.gaps == 1


def test_too_few_pairs_or_no_pairs_leave_each_contig_alone() -> None:
    genome, r, unique = repeat_genome(4)
    contigs = [unique[0], r, unique[1], unique[2], unique[3]]
    facts = pairs_facts(contigs, genome.encode())
    scaffolds, info = run(contigs, [30.0, 90.0, 30.0, 30.0, 30.0], facts, min_links=10_000)
    assert sorted(s.seq for s in scaffolds) == sorted(min(c, sl.revcomp(c)) for c in contigs)
    assert info["bundles"] == 0 and info["joins"] == 0
    scaffolds, info = sl.scaffold(contigs, [30.0] * 5, {}, [], 5)
    assert len(scaffolds) == 5 and info["insert_size"] is None


def test_two_contigs_claiming_one_place_leave_the_end_open() -> None:
    # End 1 (contig 0's right) has bundles to contig 1 (end 2) and contig 2 (end 4) at about
    # the same gap: both cannot follow it.
    lengths = [1000, 1000, 1000]
    layout = sl.order_contigs([sl.Bundle(1, 2, 20, 50.0), sl.Bundle(1, 4, 20, 60.0)], lengths, 40)
    assert layout.ambiguous_ends == 1 and all(len(c) == 1 for c in layout.chains)
    # The farther bundle beyond contig 1 agrees with 0 -> 1 -> 2: one chain, in that order.
    bundles = [sl.Bundle(1, 2, 20, 50.0), sl.Bundle(1, 4, 8, 1090.0), sl.Bundle(3, 4, 9, 40.0)]
    layout = sl.order_contigs(bundles, lengths, 40)
    assert layout.ambiguous_ends == 0
    assert layout.chains == [[(0, False), (1, False), (2, False)]] and layout.gaps == [[50, 40]]
    # Joined the other way round (contig 1 reversed: entered by its right end).
    layout = sl.order_contigs([sl.Bundle(1, 3, 20, 50.0)], lengths, 40)
    assert [(0, False), (1, True)] in layout.chains


def test_insert_estimate_ignores_far_outliers() -> None:
    hist = {380: 20, 390: 40, 400: 60, 410: 40, 420: 20, 5000: 3, 20: 2}
    est = sl.estimate_insert(hist)
    assert est is not None and abs(est.mean - 400) < 1 and est.pairs == 180
    assert sl.estimate_insert({}) is None


def test_pair_lines_and_reducer_lines_round_trip() -> None:
    first, second = rm.pairs_of([b"ACGT\tTTGA", b"GGGG", b"CCA\tTTT\r", b""])
    assert (first, second) == ([b"ACGT", b"CCA"], [b"TTGA", b"TTT"])
    hist, links, odd = sl.parse_pair_output("insert\t400\t3\nlink\t1\t20\t4\t30\nodd\t2\n")
    assert (hist, links, odd) == ({400: 3}, [(1, 20, 4, 30)], 2)
