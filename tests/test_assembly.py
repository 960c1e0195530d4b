"""The assembly example (examples/assembly, docs/assembly.md) run as a user runs it: simulated
reads, `wh workflow run`, contigs aligned back to the reference with minimap2 (mappy)."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cluster import KeepPool, controller
from conftest import Runner
from jobs_helpers import dask_cluster  # noqa: F401  (a fixture)
from warehouse.embedded import EmbeddedWarehouse
from warehouse.workflows.workflowsview import LocalWorkflows
from workflow_helpers import git, json_out

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "assembly"
sys.path.insert(0, str(EXAMPLE))
import dbg  # noqa: E402
import evaluate  # noqa: E402
import simulate  # noqa: E402

STAGES = {"preprocess", "prepare", "count", "cutoff", "graph", "unitigs", "simplify", "contigs"}
STAGES |= {"pairs_code", "pairs", "scaffold"}  # scaffolding (tests/test_assembly_scaffold.py)


def checkout(root: Path) -> Path:
    """A repository holding the example at its usual path (so tests see these files, committed)."""
    repo = root / "repo"
    shutil.copytree(
        EXAMPLE, repo / "examples" / "assembly", ignore=shutil.ignore_patterns("__pycache__")
    )
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "assembly")
    return repo / "examples" / "assembly" / "assemble.wf.yml"


def reads(wh: EmbeddedWarehouse, root: Path, size: int) -> str:
    genome = simulate.random_genome(size, 7)
    simulate.write(root / "sim", genome, simulate.simulate_reads(genome, 30, 100, 0.01, 7), files=2)
    wh.put([root / "sim" / "reads"], name="reads")
    return genome.decode()


def assemble(run: Runner, wf: Path, *inputs: str) -> dict[str, Any]:
    args = [a for i in inputs for a in ("-i", i)]
    view = json_out(
        run("workflow", "run", str(wf), "-i", "reads=reads", *args, "--wait", "--json").output
    )
    assert view["state"] == "complete", view
    return view


def output(view: dict[str, Any], node: str) -> str:
    """The output PDH of one job of a run."""
    (pdh,) = [n["output_pdh"] for n in view["nodes"] if n["node"] == node]
    return str(pdh)


def contigs(wh: EmbeddedWarehouse, pdh: str) -> tuple[list[str], dict[str, Any]]:
    reader = wh.reader(pdh)
    assert sorted(reader.files) == ["contigs.fasta", "stats.json"]
    records = dbg.read_fasta(reader.read_file("contigs.fasta").decode())
    for header, seq in records:
        assert f"length={len(seq)} coverage=" in header
    return [s for _, s in records], json.loads(reader.read_file("stats.json"))


@pytest.mark.slow
@pytest.mark.timeout(900)  # three assemblies and a partial one; a loaded machine is slow
def test_200kb_assembles_into_correct_contigs_reuses_everything_and_shows_its_lineage(
    run: Runner,
    wh: EmbeddedWarehouse,
    tmp_path: Path,
    dask_cluster: str,  # noqa: F811
) -> None:
    wf = checkout(tmp_path)
    reference = reads(wh, tmp_path, 200_000)
    first = assemble(run, wf)
    out = output(first, "contigs")
    seqs, stats = contigs(wh, out)
    lengths = [len(s) for s in seqs]
    figures_of = {key: stats[key] for key in ("contigs", "total_length", "n50", "longest")}
    assert figures_of == {
        "contigs": len(seqs),
        "total_length": sum(lengths),
        "n50": dbg.n50(lengths),
        "longest": max(lengths),
    }
    assert stats["min_length"] == 62 and stats["k"] == 31, stats
    # The choices made on the reads and the gaps are in the stats too.
    assert stats["reads"]["reads"] == 60_000 and stats["reads"]["trimmed_reads"] == 0, stats
    assert [f["layout"] for f in stats["reads"]["files"]] == ["single", "single"], stats
    assert stats["gaps"]["dead_ends"] >= stats["gaps"]["bridged_by_reads"] >= 0, stats
    figures = evaluate.evaluate(reference, seqs, min_length=500)
    assert figures["worst_identity"] >= 0.99 and figures["misassemblies"] == 0, figures
    assert figures["unaligned"] == 0 and figures["genome_fraction"] >= 0.98, figures
    assert figures["ng50"] >= 100_000, figures

    again = assemble(run, wf)
    assert output(again, "contigs") == out
    assert all(n["reused"] for n in again["nodes"]), again["nodes"]

    # On a real Dask cluster, from a fresh warehouse: every stage runs, same contigs.
    with EmbeddedWarehouse(tmp_path / "other-home") as other:
        reads(other, tmp_path / "other", 200_000)
        flows = LocalWorkflows(other, f"dask:{dask_cluster}")
        started = flows.start(wf.read_text(), str(wf), {"reads": "reads"}, base_dir=wf.parent)
        view = flows.run(started["id"], wait=True)
        assert view["state"] == "complete", view
        assert {n["node"] for n in view["nodes"] if not n["reused"]} == STAGES
        assert output(view, "contigs") == out

    # Every stage with its function's commit, back to the reads.
    commit = git(wf.parents[2], "rev-parse", "HEAD")
    text = run("lineage", output(first, "scaffold")).output  # its lineage holds every job
    for stage in STAGES - {"count", "pairs"}:  # the two MapReduces
        assert f"examples/assembly/steps/{stage}.py  commit {commit}" in text, stage
    assert "builtin:mapreduce" in text and "node count" in text

    # Tips and bubbles do the work at the default parameters (the coverage cutoff only takes
    # unitigs left on their own and long dead ends): without them the contigs fall apart.
    off = assemble(run, wf, "remove_tips=false", "remove_bubbles=false")
    ran = {n["node"] for n in off["nodes"] if not n["reused"]}
    assert ran == {"simplify", "contigs", "pairs_code", "pairs", "scaffold"}, ran
    ng50_off = dbg.n50([len(s) for s in contigs(wh, output(off, "contigs"))[0]], len(reference))
    assert figures["ng50"] >= 5 * ng50_off, (figures["ng50"], ng50_off)


@pytest.mark.slow
@pytest.mark.timeout(600)  # one assembly through a controller; a loaded machine is slow
def test_runs_through_a_controller_with_every_step_sandboxed(
    run: Runner, tmp_path: Path, keep_servers: KeepPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # start_jobs without unsafe_steps refuses to start unless bubblewrap can sandbox the steps:
    # the stages and the MapReduce functions see only the venv, their function and scratch.
    wf = checkout(tmp_path)
    genome = simulate.random_genome(30_000, 7)
    simulate.write(tmp_path / "sim", genome, simulate.simulate_reads(genome, 30, 100, 0.01, 7))
    with controller(tmp_path / "controller.db", keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=2)
        monkeypatch.setenv("WH_URL", c.url)
        monkeypatch.setenv("WH_TOKEN", c.user("alice"))
        monkeypatch.setenv("WH_HOME", str(tmp_path / "unused-home"))
        run("put", str(tmp_path / "sim" / "reads"), "--name", "reads")
        view = assemble(run, wf, "reducers=2")
        assert {n["node"] for n in view["nodes"] if not n["reused"]} == STAGES
        got = tmp_path / "got"
        run("get", output(view, "contigs"), str(got))
        seqs = [s for _, s in dbg.read_fasta((got / "contigs.fasta").read_text())]
    figures = evaluate.evaluate(genome.decode(), seqs)
    assert figures["genome_fraction"] >= 0.98 and figures["misassemblies"] == 0, figures


def test_dbg_pieces_agree_with_plain_python() -> None:
    seq = simulate.random_genome(500, 3)
    k = 21
    keys, counts = dbg.count_kmers([seq, seq[100:300]], k)
    text = seq.decode()
    expect: dict[str, int] = {}
    for s in (text, text[100:300]):
        for i in range(len(s) - k + 1):
            kmer = min(s[i : i + k], dbg.revcomp(s[i : i + k]))
            expect[kmer] = expect.get(kmer, 0) + 1
    assert {dbg.decode(int(a), k): int(c) for a, c in zip(keys, counts, strict=True)} == expect
    assert dbg.parse_counts(dbg.format_counts(keys, counts))[1].tolist() == counts.tolist()
    unitigs = dbg.kmer_unitigs(keys, counts, k)
    assert [u[0] in (text, dbg.revcomp(text)) for u in unitigs] == [True]
    assert dbg.first_valley({1: 100, 2: 10, 3: 4, 4: 9, 5: 20}) == 3
    assert dbg.first_valley({1: 100, 2: 10}) is None
    assert dbg.n50([5, 4, 1]) == 5 and dbg.n50([5, 4, 1], 30) == 0


def test_bridges_bring_back_a_gap_of_true_kmers_seen_once_but_no_error() -> None:
    k = 21
    seq = simulate.random_genome(400, 5)
    error = seq[:250] + (b"A" if seq[250:251] != b"A" else b"C") + seq[251:]
    keys, counts = dbg.count_kmers([seq] * 9 + [error], k)
    true = dbg.canonical_kmers(seq, k)
    gap = np.isin(keys, true[150:155])
    counts[gap] = 1  # five true k-mers in a row seen once: a gap in the solid graph
    solid = counts >= 2
    assert len(dbg.kmer_unitigs(keys[solid], counts[solid], k)) == 2
    added = dbg.bridges(keys, counts, solid, k, 3 * k)
    assert added.tolist() == gap.tolist()  # the error's k-mers, seen once, stay out
    whole = solid | added
    (unitig,) = dbg.kmer_unitigs(keys[whole], counts[whole], k)
    assert unitig[0] in (seq.decode(), dbg.revcomp(seq.decode()))
    assert not dbg.bridges(keys, counts, solid, k, 4).any()  # longer than allowed


FASTQ = b"@r1\nACGTACGTAC\n+\nIIIIIIIIII\n@r2\nacgtnacgta\n+r2\nIIIIIIIIII\n"


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (FASTQ[:-12], "record 2 (@r2) is truncated: 3 of its 4 lines"),
        (FASTQ.replace(b"IIIIIIIIII\n@r2", b"III\n@r2"), "record 1 (@r1): 10 bases but 3"),
        (FASTQ.replace(b"@r2", b"r2"), "record 2 (r2): its header does not start with '@'"),
        (FASTQ.replace(b"+r2", b"-r2"), "record 2 (@r2): its third line does not start with '+'"),
        (b">chr1\nACGTACGT\nACGT\n", "record 1 (>chr1) is FASTA, not FASTQ"),
        (gzip.compress(FASTQ, mtime=0), "gzip-compressed"),  # the workflow unpacks it first
    ],
)
def test_fastq_reader_refuses_what_is_not_fastq_naming_the_record(data: bytes, says: str) -> None:
    with pytest.raises(dbg.BadReads, match=re.escape(says)):
        dbg.fastq_sequences(data)


def test_fastq_reader_takes_windows_line_ends_lower_case_and_no_final_newline() -> None:
    want = [b"ACGTACGTAC", b"acgtnacgta"]
    assert dbg.fastq_sequences(FASTQ) == want
    assert dbg.fastq_sequences(FASTQ.replace(b"\n", b"\r\n")) == want
    assert dbg.fastq_sequences(FASTQ.rstrip(b"\n") + b"\n\n") == want
    assert dbg.fastq_sequences(b"") == []


def failed_step_log(run: Runner, wf: Path, reads: str, *inputs: str) -> str:
    """Run the workflow on READS, which must fail; the end of the failed job's step log."""
    args = [a for i in inputs for a in ("-i", i)]
    run("workflow", "run", str(wf), "-i", f"reads={reads}", *args, "--wait", code=1)
    view = json_out(run("workflow", "show", "1", "--json").output)
    failed = [n for n in view["nodes"] if n["state"] == "failed"]
    assert len(failed) == 1, view
    return run("job", "show", str(failed[0]["job_id"])).output


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("name", "content", "inputs", "says"),
    [
        ("r.fastq", FASTQ[:-12], (), "Error: r.fastq: record 2 (@r2) is truncated"),
        (
            "r.fq.gz",
            gzip.compress(FASTQ[:-12], mtime=0),
            (),
            "Error: r.fq.gz: record 2 (@r2) is truncated",
        ),
        (
            "r.fq.gz",
            gzip.compress(FASTQ, mtime=0)[:-9],
            (),
            "Error: r.fq.gz: cannot be read to its end",
        ),
        ("r.txt", b"hello\n", (), "Error: r.txt: record 1 (hello) is neither FASTQ"),
        ("r.fastq", FASTQ, ("k=30",), "Error: k must be an odd integer from 3 to 63, not 30"),
        ("r.fastq", FASTQ, (), "Error: the reads hold no k-mer"),  # reads shorter than k
        ("r.fastq", FASTQ, ("k=5", "tip_length=-1"), "Error: tip_length must be a whole number"),
    ],
)
def test_bad_reads_or_parameters_fail_one_job_whose_log_ends_with_one_error_line(
    run: Runner,
    wh: EmbeddedWarehouse,
    tmp_path: Path,
    name: str,
    content: bytes,
    inputs: tuple[str, ...],
    says: str,
) -> None:
    wf = checkout(tmp_path)
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / name).write_bytes(content)
    wh.put([tmp_path / "in"], name="bad")
    shown = failed_step_log(run, wf, "bad", *inputs)
    assert says in shown and "Traceback" not in shown, shown


def test_evaluate_names_a_missing_or_wrong_reference_in_one_line(tmp_path: Path) -> None:
    contigs = tmp_path / "contigs.fasta"
    contigs.write_text(">c\nACGT\n")
    (tmp_path / "reads.fastq").write_bytes(FASTQ)
    for ref, code, says in [
        (tmp_path / "missing.fasta", 4, "missing.fasta: no such file"),
        (tmp_path / "reads.fastq", 2, "reads.fastq: no FASTA record"),
    ]:
        proc = subprocess.run(
            [sys.executable, str(EXAMPLE / "evaluate.py"), str(ref), str(contigs)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == code, proc
        assert proc.stderr.startswith("Error: ") and says in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(300)  # one small assembly; a loaded machine is slow
def test_the_picture_in_docs_assembly_is_drawn_again_from_a_real_run(tmp_path: Path) -> None:
    # docs/assembly.md: `python examples/assembly/picture.py docs/assembly-workflow.svg`.
    out = tmp_path / "workflow.svg"
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE / "picture.py"), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.startswith('<?xml version="1.0"') and text.rstrip().endswith("</svg>")
    labels = set(re.findall(r'<text class="label"[^>]*>([^<]*)</text>', text))
    assert labels == STAGES, labels
    assert text.count(">complete</text>") == len(STAGES)
