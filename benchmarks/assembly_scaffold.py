"""Scaffolds of the assembly workflow against Velvet's with the same read pairs.

    .venv/bin/python benchmarks/assembly_scaffold.py --workdir /tmp/asmscaf [--cases all]

Genomes with one repeat copied N times (longer than k, so it breaks the
contigs), 30x pairs of 100 bp reads, 1% substitutions, gzip FASTQ in one
pair of files. For each: `wh workflow run examples/assembly/assemble.wf.yml`
in a fresh warehouse (k = 31), and Velvet on the same pairs as one library
(`velveth 31 -fastq.gz -shortPaired -separate`, `velvetg -ins_length I
-exp_cov auto -cov_cutoff auto`). NG50 of our contigs, our scaffolds and
Velvet's sequences against the true genome size; the scaffolds' pieces
(between runs of N) aligned to the reference with minimap2 (mappy): how
many do not align whole, and the genome fraction. JSON on standard output.

Needs velvet (`make install-velvet`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "assembly"))
import dbg  # type: ignore[import-not-found]  # noqa: E402
import evaluate  # type: ignore[import-not-found]  # noqa: E402
import simulate  # type: ignore[import-not-found]  # noqa: E402

# (genome size, seed, repeat copies, repeat length, mean fragment length)
CASES = {
    "200k-5x250": (200_000, 7, 5, 250, 400),
    "200k-5x300": (200_000, 7, 5, 300, 400),
    "300k-8x200": (300_000, 9, 8, 200, 300),
    "400k-6x350": (400_000, 11, 6, 350, 500),
}


def pieces_off(reference: str, scaffolds: list[str]) -> int:
    """Pieces of the scaffolds (between runs of N) of 500 bases or more that do not align
    whole (95% of their length) at 99% identity."""
    import mappy  # type: ignore[import-not-found]

    aligner = mappy.Aligner(seq=reference, preset="asm5")
    off = 0
    for s in scaffolds:
        for m in re.finditer(r"[^N]{500,}", s):
            hits = [h for h in aligner.map(m.group()) if h.is_primary]
            h = hits[0] if len(hits) == 1 else None
            if h is None or h.q_en - h.q_st < 0.95 * len(m.group()) or h.mlen < 0.99 * h.blen:
                off += 1
    return off


def ours(work: Path, reads: Path) -> tuple[list[str], list[str], dict[str, Any], float]:
    env = {**os.environ, "WH_HOME": str(work / "home")}
    wh = str(Path(sys.executable).parent / "wh")
    subprocess.run(
        [wh, "put", str(reads), "--name", "reads"], env=env, check=True, capture_output=True
    )
    wf = ROOT / "examples" / "assembly" / "assemble.wf.yml"
    t = time.perf_counter()
    subprocess.run(
        [wh, "workflow", "run", str(wf), "-i", "reads=reads", "--name-outputs", "b", "--wait"],
        env=env,
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - t
    out = work / "out"
    subprocess.run([wh, "get", "b.scaffolds", str(out)], env=env, check=True, capture_output=True)
    contigs = [s for _, s in dbg.read_fasta((out / "contigs.fasta").read_text())]
    scaffolds = [s for _, s in dbg.read_fasta((out / "scaffolds.fasta").read_text())]
    return contigs, scaffolds, json.loads((out / "stats.json").read_text()), wall


def velvet(work: Path, one: Path, two: Path, insert: int) -> tuple[list[str], float]:
    out = work / "velvet"
    t = time.perf_counter()
    subprocess.run(
        ["velveth", str(out), "31", "-fastq.gz", "-shortPaired", "-separate", str(one), str(two)],
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
    wall = time.perf_counter() - t
    return [s for _, s in dbg.read_fasta((out / "contigs.fa").read_text())], wall


def one_case(work: Path, name: str) -> dict[str, Any]:
    size, seed, copies, length, insert = CASES[name]
    shutil.rmtree(work, ignore_errors=True)
    genome = simulate.random_genome(size, seed, copies, length)
    r1, r2, q1, q2 = simulate.simulate_pairs(genome, 30, 100, 0.01, seed, insert, insert / 10)
    files = simulate.write(
        work / "sim", genome, r1, 1, seconds=r2, quals=q1, quals2=q2, compress=True
    )
    reference = genome.decode()
    contigs, scaffolds, stats, wall = ours(work, work / "sim" / "reads")
    theirs, velvet_wall = velvet(work, files[0], files[1], insert)
    return {
        "case": name,
        "genome_size": size,
        "repeat": f"{copies} x {length} bp",
        "fragments": f"{insert} +- {insert // 10}",
        "contigs": len(contigs),
        "contig_ng50": dbg.n50([len(c) for c in contigs], size),
        "scaffolds": len(scaffolds),
        "scaffold_ng50": dbg.n50([len(s) for s in scaffolds], size),
        "velvet_sequences": len(theirs),
        "velvet_ng50": dbg.n50([len(s) for s in theirs], size),
        "scaffold_pieces_off": pieces_off(reference, scaffolds),
        "genome_fraction": evaluate.evaluate(reference, scaffolds)["genome_fraction"],
        "scaffolding": stats["scaffolding"],
        "wall_s": round(wall, 1),
        "velvet_wall_s": round(velvet_wall, 1),
        "load_before": float(Path("/proc/loadavg").read_text().split()[0]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--cases", default="all", help=f"all, or some of {', '.join(CASES)}")
    a = ap.parse_args()
    names = list(CASES) if a.cases == "all" else a.cases.split(",")
    if any(n not in CASES for n in names):
        ap.error(f"--cases: all, or names from {', '.join(CASES)}")
    if shutil.which("velveth") is None:
        raise SystemExit("Error: velveth not found: apt-get install velvet (make install-velvet)")
    rows = [one_case(a.workdir / n, n) for n in names]
    for r in rows:
        r["ratio"] = round(r["scaffold_ng50"] / r["velvet_ng50"], 4) if r["velvet_ng50"] else None
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
