"""Scaffolding from read pairs (examples/assembly/readmap.py, scaffold_lib.py): reads placed on
contigs, pairs joined into insert sizes and links, links bundled, contigs ordered, oriented and
joined; on contigs cut from a known genome, so every join can be checked base for base."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import Runner
from test_assembly import assemble, checkout
from warehouse.embedded import EmbeddedWarehouse
from workflow_helpers import json_out

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "assembly"
sys.path.insert(0, str(EXAMPLE))
import dbg  # noqa: E402
import evaluate  # noqa: E402
import readmap as rm  # noqa: E402
import scaffold_lib as sl  # noqa: E402
import simulate  # noqa: E402

# Debian's spades package: E. coli reads (the first 1,000 bases of its genome), paired, gzip.
SPADES_DATA = Path("/usr/share/spades/test_dataset")

K = 31


def pairs_output(
    contigs: list[str], coverage: list[float], genome: bytes, seed: int = 1
) -> sl.PairOutput:
    """30x FR pairs of 400 bp fragments from the genome placed on the contigs (repeats,
    found by their coverage, skipped), through the pairs' reducer."""
    r1, r2, _, _ = simulate.simulate_pairs(genome, 30, 100, 0.01, seed, 400, 40)
    index = rm.build_index(contigs, skip=sl.repeats(coverage, [len(c) for c in contigs]))
    one, two = rm.place_reads(index, r1), rm.place_reads(index, r2)
    lines = rm.mapper_lines(rm.pair_facts(one, two, index.lengths))
    lines += rm.overhang_lines(rm.overhangs(one, r1, index.lengths))
    lines += rm.overhang_lines(rm.overhangs(two, r2, index.lengths))
    return sl.parse_pair_output(reduce(lines))


def reduce(mapped: bytes) -> str:
    """The pairs' reducer (pairs/pair_reduce.py, a real subprocess) over the sorted lines."""
    lines = b"".join(sorted(mapped.splitlines(keepends=True)))
    done = subprocess.run(
        [sys.executable, str(EXAMPLE / "pairs" / "pair_reduce.py")],
        input=lines,
        capture_output=True,
        check=True,
    )
    return done.stdout.decode()


def run(
    contigs: list[str], coverage: list[float], genome: str, min_links: int = 5, seed: int = 1
) -> tuple[list[sl.Scaffold], dict[str, Any]]:
    pairs = pairs_output(contigs, coverage, genome.encode(), seed)
    return sl.scaffold(contigs, coverage, pairs, min_links)


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
    scaffolds, info = run(contigs, coverage, genome)
    assert [s.seq for s in scaffolds] == [min(genome, sl.revcomp(genome))]
    assert info["repeats"] == 1 and info["joins"] == 3 and info["filled_gaps"] == 3, info
    assert info["gaps"] == 0 and abs(info["insert_size"] - 400) < 10, info
    assert 30 < info["insert_sd"] < 50, info


def test_a_missing_stretch_becomes_ns_of_about_its_length_and_the_ends_grow_by_reads() -> None:
    genome = simulate.random_genome(20_000, 5).decode()
    # 150 bases in no contig, and the genome reaches on past both outer ends.
    contigs = [genome[1000:9000], sl.revcomp(genome[9150:19000])]
    scaffolds, info = run(contigs, [30.0, 30.0], genome, seed=2)
    (one,) = scaffolds
    seq = one.seq if genome[1000:1100] in one.seq else sl.revcomp(one.seq)
    left, _, right = seq.partition("N")
    right = right.lstrip("N")
    n = len(seq) - len(left) - len(right)
    assert 150 - 80 <= n <= 150 + 80, n  # the estimate, from pairs spanning the gap
    assert info["gaps"] == 1 and info["gap_bases"] == n and one.gaps == 1
    # A read is placed by a 31-mer on the contig: up to 69 of its bases reach past its end.
    grown = len(left) - 8000, len(right) - 9850
    assert min(grown) >= 50 and max(grown) <= 69, grown
    assert left == genome[1000 - grown[0] : 9000] and right == genome[9150 : 19000 + grown[1]]
    assert info["extended_bases"] == sum(grown)


def test_an_end_grows_while_the_reads_reaching_past_it_agree() -> None:
    assert sl.extension(["ACGTA", "ACGA", "ACG", "AC"]) == "ACG"  # 1 of 2 says T at the 4th
    assert sl.extension(["ACGTA", "ACGTC", "ACGTA", "ACGTA", "AN"]) == "ACGTA"  # N: no vote
    assert sl.extension(["ACGT"]) == "ACGT" and sl.extension([]) == ""
    assert sl.extension(["TT", "GT", "CT"]) == ""


def test_too_few_pairs_or_no_pairs_leave_each_contig_alone() -> None:
    genome, r, unique = repeat_genome(4)
    contigs = [unique[0], r, unique[1], unique[2], unique[3]]
    scaffolds, info = run(contigs, [30.0, 90.0, 30.0, 30.0, 30.0], genome, min_links=10_000)
    assert info["bundles"] == 0 and info["joins"] == 0 and len(scaffolds) == 5
    for c in contigs:  # each contig alone, its ends grown into the repeat (the genome's bases)
        (s,) = [s.seq for s in scaffolds if c in s.seq or sl.revcomp(c) in s.seq]
        assert s in genome or sl.revcomp(s) in genome
    assert info["extended_bases"] > 0
    scaffolds, info = sl.scaffold(contigs, [30.0] * 5, sl.PairOutput(), 5)
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
    mapped = b"I400\t2\nL1.4\t20 30\nI400\t1\nO\t2\nX5\tACG\nX5\tAC\n"
    got = sl.parse_pair_output(reduce(mapped))
    assert got == sl.PairOutput({400: 3}, [(1, 20, 4, 30)], 2, {5: ["AC", "ACG"]})
    with pytest.raises(ValueError, match="not a line of the pairs' reducers"):
        sl.parse_pair_output("hello\n")


# ---- through the workflow ----


def needed(what: str, found: bool, install: str) -> None:
    """Skip where a tool is missing, except in CI (``CI`` set), where that fails."""
    if found:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what} is missing; CI must run this test ({install})", pytrace=False)
    pytest.skip(f"{what} is missing ({install})")


def outputs(wh: EmbeddedWarehouse, view: dict[str, Any]) -> tuple[list[str], list[str], Any]:
    """The scaffold stage's contigs, scaffolds and stats.json."""
    (node,) = [n for n in view["nodes"] if n["node"] == "scaffold"]
    reader = wh.reader(node["output_pdh"])
    assert sorted(reader.files) == ["contigs.fasta", "scaffolds.fasta", "stats.json"]
    contigs = [s for _, s in dbg.read_fasta(reader.read_file("contigs.fasta").decode())]
    scaffolds = [s for _, s in dbg.read_fasta(reader.read_file("scaffolds.fasta").decode())]
    return contigs, scaffolds, json.loads(reader.read_file("stats.json"))


def misjoins(reference: str, scaffold: str, slack: int) -> list[str]:
    """How the contigs of a scaffold (its pieces between runs of N) disagree with the
    reference: a piece not aligned whole at 99% identity, or two neighbours not on one
    strand, in order, at the distance the N's between them say (within ``slack``)."""
    import mappy

    aligner = mappy.Aligner(seq=reference, preset="asm5")
    placed = []
    problems = []
    for m in re.finditer(r"[^N]+", scaffold):
        hits = [h for h in aligner.map(m.group()) if h.is_primary]
        h = hits[0] if len(hits) == 1 else None
        if h is None or h.q_en - h.q_st < 0.99 * len(m.group()) or h.mlen < 0.99 * h.blen:
            problems.append(f"the piece at {m.start()} does not align whole: {hits}")
        else:
            placed.append((m.start(), m.end(), h))
    for (_, a_end, ha), (b_start, _, hb) in itertools.pairwise(placed):
        # The bases between the two pieces on the reference, on the scaffold's strand.
        between = hb.r_st - ha.r_en if ha.strand == 1 else ha.r_st - hb.r_en
        if ha.strand != hb.strand or abs(between - (b_start - a_end)) > slack:
            problems.append(f"pieces ending at {a_end} and starting at {b_start}: {ha}, {hb}")
    return problems


def velvet_ng50(work: Path, firsts: list[Path], seconds: list[Path], insert: int, size: int) -> int:
    """Velvet's NG50 with the same pairs (one library, its own scaffolding)."""
    one, two = work / "v_1.fastq", work / "v_2.fastq"
    for out, parts in ((one, firsts), (two, seconds)):
        with out.open("wb") as f:
            for p in parts:
                f.write(gzip.decompress(p.read_bytes()))
    out = work / "velvet"
    subprocess.run(
        ["velveth", str(out), "31", "-fastq", "-shortPaired", "-separate", str(one), str(two)],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            "velvetg",
            str(out),
            "-ins_length",
            str(insert),
            "-exp_cov",
            "auto",
            "-cov_cutoff",
            "auto",
        ],
        check=True,
        capture_output=True,
    )
    seqs = [s for _, s in dbg.read_fasta((out / "contigs.fa").read_text())]
    return dbg.n50([len(s) for s in seqs], size)


@pytest.mark.slow
@pytest.mark.timeout(900)  # an assembly and Velvet's; a loaded machine is slow
def test_pairs_scaffold_a_genome_with_repeats_at_least_as_well_as_velvet(
    run: Runner, wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    needed("velvet", shutil.which("velveth") is not None, "make install-velvet")
    wf = checkout(tmp_path)
    # 200 kb with 5 copies of a 250 bp repeat (longer than k, shorter than the fragments),
    # 30x of 100 bp pairs from 400 bp fragments, gzip, two pairs of files.
    genome = simulate.random_genome(200_000, 7, 5, 250)
    r1, r2, q1, q2 = simulate.simulate_pairs(genome, 30, 100, 0.01, 7, 400, 40)
    files = simulate.write(
        tmp_path / "sim", genome, r1, 2, seconds=r2, quals=q1, quals2=q2, compress=True
    )
    wh.put([tmp_path / "sim" / "reads"], name="reads")
    contigs, scaffolds, stats = outputs(wh, assemble(run, wf))
    reference = genome.decode()
    size = len(reference)
    info = stats["scaffolding"]
    assert abs(info["insert_size"] - 400) < 10 and 30 < info["insert_sd"] < 50, info
    assert info["repeats"] >= 1 and info["joins"] >= 5, info
    assert stats["contigs"]["ng50"] == dbg.n50([len(c) for c in contigs], stats["genome_size"])
    assert stats["scaffolds"]["ng50"] == dbg.n50([len(s) for s in scaffolds], stats["genome_size"])
    assert abs(stats["genome_size"] - size) < 0.02 * size, stats["genome_size"]
    # Repeats break the contigs; the pairs span them and the scaffolds hold the genome.
    contig_ng50 = dbg.n50([len(c) for c in contigs], size)
    ng50 = dbg.n50([len(s) for s in scaffolds], size)
    assert contig_ng50 < size / 2 < ng50, (contig_ng50, ng50)
    for s in scaffolds:
        assert not misjoins(reference, s, 3 * 40 + 50), s[:60]
    figures = evaluate.evaluate(reference, scaffolds)
    assert figures["genome_fraction"] >= 0.99, figures
    firsts = sorted(p for p in files if p.name.endswith("_1.fastq.gz"))
    seconds = sorted(p for p in files if p.name.endswith("_2.fastq.gz"))
    velvet = velvet_ng50(tmp_path, firsts, seconds, 400, size)
    assert ng50 >= velvet, (ng50, velvet)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_real_e_coli_reads_from_debian_spades_assemble_through_the_workflow(
    run: Runner, wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    reads = [SPADES_DATA / "ecoli_1K_1.fq.gz", SPADES_DATA / "ecoli_1K_2.fq.gz"]
    reference_gz = SPADES_DATA / "reference_1K.fa.gz"
    needed(
        "Debian's spades test data",
        all(p.exists() for p in [*reads, reference_gz]),
        "make install-spades",
    )
    wf = checkout(tmp_path)
    (tmp_path / "ecoli").mkdir()
    for p in reads:  # the files as the package ships them: gzip FASTQ, unchanged
        shutil.copy(p, tmp_path / "ecoli" / p.name)
    wh.put([tmp_path / "ecoli"], name="reads")
    contigs, scaffolds, stats = outputs(wh, assemble(run, wf))
    reference = "".join(
        s for _, s in dbg.read_fasta(gzip.decompress(reference_gz.read_bytes()).decode())
    )
    figures = evaluate.evaluate(reference, contigs, min_length=100)
    assert figures["worst_identity"] >= 0.99 and figures["misassemblies"] == 0, figures
    assert figures["unaligned"] == 0 and figures["genome_fraction"] >= 0.99, figures
    assert not misjoins(reference, max(scaffolds, key=len), 100)
    # The pairs' insert size, from the reads alone.
    assert 150 < stats["scaffolding"]["insert_size"] < 300, stats["scaffolding"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_single_reads_leave_each_contig_alone_and_a_bad_min_links_fails_one_job_in_one_line(
    run: Runner, wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    wf = checkout(tmp_path)
    genome = simulate.random_genome(20_000, 3, 3, 200)
    simulate.write(tmp_path / "sim", genome, simulate.simulate_reads(genome, 30, 100, 0.01, 3))
    wh.put([tmp_path / "sim" / "reads"], name="reads")
    contigs, scaffolds, stats = outputs(wh, assemble(run, wf))
    assert stats["scaffolding"]["insert_size"] is None and stats["scaffolding"]["joins"] == 0
    assert len(contigs) > 1 and sorted(scaffolds) == sorted(contigs)  # both on their smaller strand
    assert stats["scaffolds"]["ng50"] == stats["contigs"]["ng50"]
    # A bad parameter: the scaffold job fails, the others are reused, its log ends in one line.
    run("workflow", "run", str(wf), "-i", "reads=reads", "-i", "min_links=0", "--wait", code=1)
    view = json_out(run("workflow", "show", "2", "--json").output)
    failed = [n for n in view["nodes"] if n["state"] == "failed"]
    assert [n["node"] for n in failed] == ["scaffold"], view
    assert all(n["reused"] for n in view["nodes"] if n["node"] != "scaffold"), view
    shown = run("job", "show", str(failed[0]["job_id"])).output
    assert "Error: min_links must be at least 1, not 0" in shown and "Traceback" not in shown
