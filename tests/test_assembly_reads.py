"""The assembly example on reads as sequencers deliver them (docs/assembly.md "Your own
reads"): the reading, trimming and pairing functions, k chosen from the histogram, gaps no
read spans, and the workflow on gzip, paired, Phred+64 and interleaved FASTA reads."""

from __future__ import annotations

import gzip
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import Runner
from test_assembly import assemble, checkout, failed_step_log, output
from warehouse.embedded import EmbeddedWarehouse

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "assembly"
sys.path.insert(0, str(EXAMPLE))
import autok  # noqa: E402
import dbg  # noqa: E402
import evaluate  # noqa: E402
import seqio  # noqa: E402
import simulate  # noqa: E402
import words  # noqa: E402


def test_quality_encoding_is_told_by_the_characters_seen() -> None:
    assert seqio.phred_offset([b"IIII#", b"III"]) == 33  # '#' (35) is only Phred+33
    assert seqio.phred_offset([b"hhhhB", b"hh"]) == 64  # nothing below '@', 'h' above 'J'
    assert seqio.phred_offset([b"IIIIIII"]) == 33  # could be either: today's encoding
    assert seqio.phred_offset([]) == 33


def test_trimming_cuts_the_tail_whose_bases_average_below_the_threshold() -> None:
    good, bad = chr(33 + 40), chr(33 + 2)
    quals = [
        (good * 8 + bad * 4).encode(),  # a bad tail of 4
        (good * 8 + bad * 2 + good + bad * 3).encode(),  # one good base inside it: still cut
        (good * 12).encode(),  # nothing to cut
        (bad * 5).encode(),  # all bad
        (good * 6 + bad + good * 5).encode(),  # one bad base inside good ones stays
    ]
    assert seqio.trim_points(quals, 33, 20).tolist() == [8, 8, 12, 0, 12]
    assert seqio.trim_points(quals, 33, 0).tolist() == [12, 14, 12, 5, 12]
    # Phred+64: the same qualities 31 higher.
    shifted = [bytes(c + 31 for c in q) for q in quals]
    assert seqio.trim_points(shifted, 64, 20).tolist() == [8, 8, 12, 0, 12]


def test_files_pair_by_their_names_and_records_by_theirs() -> None:
    paths = [
        "a_1.fastq.gz",
        "a_2.fastq.gz",
        "run/S1_L001_R1_001.fastq.gz",
        "run/S1_L001_R2_001.fastq.gz",
        "lone_1.fq",
        "single.fastq",
        "x.1.fa",
        "x.2.fa",
    ]
    assert seqio.pair_files(paths) == [
        ("a_1.fastq.gz", "a_2.fastq.gz"),
        ("lone_1.fq", None),
        ("run/S1_L001_R1_001.fastq.gz", "run/S1_L001_R2_001.fastq.gz"),
        ("single.fastq", None),
        ("x.1.fa", "x.2.fa"),
    ]
    assert seqio.is_interleaved([b"@r1/1", b"@r1/2", b"@r2/1 x", b"@r2/2 y"])
    assert seqio.is_interleaved([b"@A:1:2 1:N:0", b"@A:1:2 2:N:0"])  # Casava 1.8 comments
    assert not seqio.is_interleaved([b"@r1", b"@r2", b"@r3", b"@r4"])
    assert not seqio.is_interleaved([b"@r1/1", b"@r1/2", b"@r2/1"])


def test_records_read_gzip_and_multi_line_fasta_and_refuse_a_cut_gzip() -> None:
    fasta = b">a desc\nACGT\nacgn\n>b\nTTTT\n"
    batches = list(seqio.records(seqio.open_reads(io.BufferedReader(io.BytesIO(fasta)))[0]))
    assert batches == [("fasta", [(b">a desc", b"ACGTacgn", None), (b">b", b"TTTT", None)])]
    packed = gzip.compress(b"@r1\nACGT\n+\nIIII\n@r2\nGGCC\n+\nIIII\n", mtime=0)
    text, was = seqio.open_reads(io.BufferedReader(io.BytesIO(packed)))
    assert was
    assert list(seqio.records(text)) == [
        ("fastq", [(b"@r1", b"ACGT", b"IIII"), (b"@r2", b"GGCC", b"IIII")])
    ]
    cut, _ = seqio.open_reads(io.BufferedReader(io.BytesIO(packed[:-9])))
    with pytest.raises(seqio.BadReads, match="cannot be read to its end"):
        list(seqio.records(cut))
    tally = seqio.Tally()
    assert seqio.clean([(b"@r", b"acgtRYac", b"IIIIIIII")], 33, 20, tally) == [b"ACGTNNAC"]
    assert (tally.reads_with_n, tally.n_bases, tally.trimmed_bases) == (1, 2, 0)


def test_k_auto_is_the_largest_k_at_which_no_true_kmer_is_expected_in_no_read() -> None:
    genome = simulate.random_genome(50_000, 4)

    def chosen(coverage: float, max_k: int = 63) -> tuple[int, dict[str, object]]:
        sampler = autok.Sampler()
        sampler.add(simulate.simulate_reads(genome, coverage, 100, 0.01, 4))
        k, why = sampler.choose(max_k=max_k)
        return int(k), dict(why)

    deep, why = chosen(60)
    assert deep == 63 and why["valley"] is not None, why  # coverage to spare at any k
    assert 45_000 < why["genome_kmers"] < 55_000, why  # from a sixteenth of the k-mers
    shallow, why = chosen(16)
    # At 16x, 1% errors: about 16 * 0.8 * 0.82 = 10.5 at k = 21, below the ln(2 * 50,000) =
    # 11.5 needed: k0, the smallest tried.
    assert shallow == 21 and why["coverage_needed"] > why["peak"], why
    assert chosen(60, max_k=31)[0] == 31


@pytest.mark.parametrize("k", [31, 33, 45, 63])
def test_kmers_of_two_words_agree_with_plain_python(k: int) -> None:
    seq = simulate.random_genome(500, k)
    keys, counts = dbg.count_kmers([seq, seq[100:300]], k)
    assert keys.dtype == (np.dtype("S16") if k > 31 else np.uint64)
    text = seq.decode()
    expect: dict[str, int] = {}
    for s in (text, text[100:300]):
        for i in range(len(s) - k + 1):
            kmer = min(s[i : i + k], dbg.revcomp(s[i : i + k]))
            expect[kmer] = expect.get(kmer, 0) + 1
    values = words.value(keys, k)
    got = {dbg.decode(words.as_int(values, i), k): int(c) for i, c in enumerate(counts)}
    assert got == expect
    assert sorted(expect) == [dbg.decode(words.as_int(values, i), k) for i in range(len(keys))]
    back, again = dbg.parse_counts(dbg.format_counts(keys, counts))
    assert back.tolist() == keys.tolist() and again.tolist() == counts.tolist()
    (unitig,) = dbg.kmer_unitigs(keys, counts, k)
    assert unitig[0] in (text, dbg.revcomp(text))


@pytest.mark.parametrize("k", [21, 45, 63])
def test_bridges_close_a_gap_of_kmers_seen_once_at_any_k(k: int) -> None:
    seq = simulate.random_genome(600, 5)
    error = seq[:350] + (b"A" if seq[350:351] != b"A" else b"C") + seq[351:]
    keys, counts = dbg.count_kmers([seq] * 9 + [error], k)
    true = dbg.canonical_kmers(seq, k)
    gap = np.isin(keys, true[250:255])
    counts[gap] = 1  # five true k-mers in a row seen once: a gap in the solid graph
    solid = counts >= 2
    assert len(dbg.kmer_unitigs(keys[solid], counts[solid], k)) == 2
    report: dict[str, int] = {}
    added = dbg.bridges(keys, counts, solid, k, 3 * k, report)
    assert added.tolist() == gap.tolist()  # the error's k-mers, seen once, stay out
    assert report["bridged_by_reads"] >= 1, report
    whole = solid | added
    (unitig,) = dbg.kmer_unitigs(keys[whole], counts[whole], k)
    assert unitig[0] in (seq.decode(), dbg.revcomp(seq.decode()))


def test_a_gap_no_read_spans_is_joined_only_where_one_overlap_is_possible() -> None:
    k = 21
    genome = simulate.random_genome(3000, 9).decode()
    # Two unitigs of the genome with the 3 k-mers between them in no read.
    left, right = genome[:1500], genome[1500 - k + 1 + 3 :]
    unitigs = [dbg.Unitig(left, len(left) - k + 1, 10), dbg.Unitig(right, len(right) - k + 1, 10)]
    report: dict[str, int] = {}
    joined = dbg.join_overlaps(dbg.UnitigGraph(unitigs, k), 11, 2 * k, report)
    assert [len(u.seq) for u in joined.unitigs] == [3000], report
    assert joined.unitigs[0].seq in (genome, dbg.revcomp(genome))
    assert report == {"joined": 1, "ambiguous": 0}
    # A second dead start that the same end overlaps: two paths, so the break is kept.
    other = right[:40] + simulate.random_genome(200, 10).decode()
    unitigs.append(dbg.Unitig(other, len(other) - k + 1, 10))
    report = {}
    kept = dbg.join_overlaps(dbg.UnitigGraph(unitigs, k), 11, 2 * k, report)
    assert sorted(len(u.seq) for u in kept.unitigs) == sorted(len(u.seq) for u in unitigs)
    assert report["joined"] == 0 and report["ambiguous"] >= 1, report
    # Without the join (overlap shorter than asked) nothing changes either.
    report = {}
    dbg.join_overlaps(dbg.UnitigGraph(unitigs[:2], k), 18, 2 * k, report)
    assert report["joined"] == 0


@pytest.mark.slow
@pytest.mark.timeout(600)  # three small assemblies; a loaded machine is slow
@pytest.mark.parametrize(
    ("how", "layouts"),
    [
        ({"compress": True, "phred": 64}, ["paired files", "paired files"]),
        ({"as_fasta": True, "interleaved": True}, ["interleaved"]),
    ],
)
def test_gzip_paired_phred64_or_interleaved_fasta_reads_assemble_unchanged(
    run: Runner,
    wh: EmbeddedWarehouse,
    tmp_path: Path,
    how: dict[str, object],
    layouts: list[str],
) -> None:
    wf = checkout(tmp_path)
    genome = simulate.random_genome(30_000, 11)
    r1, r2, q1, q2 = simulate.simulate_pairs(genome, 30, 100, 0.01, 11, 400, 40, bad_tails=0.1)
    written = simulate.write(
        tmp_path / "sim",
        genome,
        r1,
        1,
        seconds=r2,
        quals=q1,
        quals2=q2,
        **how,
    )
    if how.get("compress"):
        assert all(p.read_bytes()[:2] == b"\x1f\x8b" for p in written)
    wh.put([tmp_path / "sim" / "reads"], name="reads")
    view = assemble(run, wf, "k=auto")
    reader = wh.reader(output(view, "contigs"))
    stats = json.loads(reader.read_file("stats.json"))
    seqs = [s for _, s in dbg.read_fasta(reader.read_file("contigs.fasta").decode())]
    figures = evaluate.evaluate(genome.decode(), seqs)
    assert figures["genome_fraction"] >= 0.99 and figures["misassemblies"] == 0, figures
    assert figures["worst_identity"] >= 0.99, figures
    got = stats["reads"]
    assert [f["layout"] for f in got["files"]] == layouts, got
    assert got["pairs"] == len(r1) and got["reads"] == 2 * len(r1), got
    if how.get("as_fasta"):
        assert got["files"][0]["phred"] is None and got["trimmed_reads"] == 0, got
    else:
        assert {f["phred"] for f in got["files"]} == {64}, got
        assert all(f["gzip"] for f in got["files"]), got
        # About one read in ten has a bad tail of 10 to 30 bases: those are cut.
        assert 0.05 * got["reads"] < got["trimmed_reads"] < 0.15 * got["reads"], got
    # k=auto: 30x of 100 bp reads with 1% errors on 30 kb: fewer than 0.5 of its k-mers are
    # expected in no read up to k = 43 (about 11 times seen); two-word k-mers.
    assert stats["k"] == got["k"] and 37 <= got["k"] <= 47, got
    assert 0.985 < got["k_choice"]["base_right"] < 0.995, got


PAIR = b"@p1/1\nACGTACGTAC\n+\nIIIIIIIIII\n@p2/1\nGGGTACGTAC\n+\nIIIIIIIIII\n"


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("second", "says"),
    [
        (PAIR[:30].replace(b"/1", b"/2"), "hold different numbers of reads"),  # one record
        (PAIR.replace(b"@p2/1", b"@q2/2").replace(b"/1", b"/2"), "record 2 names differ"),
    ],
)
def test_paired_files_that_are_not_mates_fail_preprocess_with_one_error_line(
    run: Runner, wh: EmbeddedWarehouse, tmp_path: Path, second: bytes, says: str
) -> None:
    wf = checkout(tmp_path)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x_1.fq.gz").write_bytes(gzip.compress(PAIR, mtime=0))
    (tmp_path / "in" / "x_2.fq.gz").write_bytes(gzip.compress(second, mtime=0))
    wh.put([tmp_path / "in"], name="bad")
    shown = failed_step_log(run, wf, "bad")
    assert "Error: x_1.fq.gz and x_2.fq.gz" in shown and says in shown, shown
    assert "Traceback" not in shown, shown
