"""Velvet against the assembly workflow (examples/assembly) on the same simulated reads.

A seeded random genome (default 1 Mb), 30x 100 bp reads from both strands with
1% substitutions; Velvet (`velveth`/`velvetg`, `-cov_cutoff auto -exp_cov
auto`) and `wh workflow run examples/assembly/assemble.wf.yml` with the same k,
each from a fresh start. Wall time, peak memory (the largest single process
of each tool's process tree), and the contigs of 500 bp or more aligned to
the reference with minimap2 (mappy): N50, NG50, genome fraction, misassemblies.

    .venv/bin/python benchmarks/assembly.py --workdir /tmp/asmbench [--genome-size 1000000]

Needs velvet (Debian: `apt-get install velvet`; `make bench-assembly` installs it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "assembly"))
import dbg  # noqa: E402
import evaluate  # noqa: E402
import simulate  # noqa: E402

# Run a command and print its wall time and the peak RSS of its largest descendant (KiB).
MEASURE = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "rc = subprocess.run(sys.argv[1:]).returncode\n"
    "print(f'MEASURED {time.perf_counter() - t} "
    "{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss} {rc}', file=sys.stderr)\n"
)


def measured(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, int]:
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, *cmd], env=env, capture_output=True, text=True, check=False
    )
    line = [x for x in done.stderr.splitlines() if x.startswith("MEASURED ")][-1]
    wall, rss, rc = line.split()[1:]
    if rc != "0":
        raise SystemExit(f"Error: {cmd[0]} failed: {done.stderr[-2000:]}")
    return float(wall), int(rss) * 1024


def velvet(work: Path, reads: Path, k: int) -> tuple[list[str], dict[str, Any]]:
    out = work / "velvet"
    w1, m1 = measured(["velveth", str(out), str(k), "-fastq", "-short", str(reads)])
    w2, m2 = measured(["velvetg", str(out), "-cov_cutoff", "auto", "-exp_cov", "auto"])
    seqs = [s for _, s in dbg.read_fasta((out / "contigs.fa").read_text())]
    return seqs, {"wall_s": w1 + w2, "peak_bytes": max(m1, m2)}


def ours(work: Path, reads_dir: Path, k: int) -> tuple[list[str], dict[str, Any]]:
    home = work / "wh-home"
    env = {**os.environ, "WH_HOME": str(home), "WH_USER": os.environ.get("WH_USER", "bench")}
    wh = str(Path(sys.executable).parent / "wh")
    wf = ROOT / "examples" / "assembly" / "assemble.wf.yml"
    # Putting the reads is the user's upload, timed apart.
    t = time.perf_counter()
    subprocess.run(
        [wh, "put", str(reads_dir), "--name", "reads"], env=env, check=True, capture_output=True
    )
    put_s = time.perf_counter() - t
    cmd = [wh, "workflow", "run", str(wf), "-i", "reads=reads", "-i", f"k={k}"]
    wall, peak = measured([*cmd, "--name-outputs", "bench", "--wait"], env)
    out = work / "ours"
    subprocess.run([wh, "get", "bench.contigs", str(out)], env=env, check=True, capture_output=True)
    seqs = [s for _, s in dbg.read_fasta((out / "contigs.fasta").read_text())]
    show = subprocess.run(
        [wh, "workflow", "show", "1", "--json"], env=env, check=True, capture_output=True, text=True
    )
    nodes = json.loads(show.stdout)["nodes"]
    stages = {n["node"]: round((n["finished_at"] or 0) - (n["started_at"] or 0), 1) for n in nodes}
    return seqs, {"wall_s": wall, "peak_bytes": peak, "put_s": put_s, "stages_s": stages}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--genome-size", type=int, default=1_000_000)
    ap.add_argument("--coverage", type=float, default=30.0)
    ap.add_argument("--k", type=int, default=31)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if shutil.which("velveth") is None:
        raise SystemExit("Error: velveth not found: apt-get install velvet (make bench-assembly)")
    shutil.rmtree(a.workdir, ignore_errors=True)
    a.workdir.mkdir(parents=True)
    genome = simulate.random_genome(a.genome_size, a.seed)
    reads = simulate.simulate_reads(genome, a.coverage, 100, 0.01, a.seed)
    simulate.write(a.workdir / "sim", genome, reads, files=1)
    reads_dir = a.workdir / "sim" / "reads"
    reference = genome.decode()
    result: dict[str, Any] = {
        "genome_size": a.genome_size,
        "coverage": a.coverage,
        "k": a.k,
        "reads": len(reads),
        "cpus": os.cpu_count(),
    }
    for name, fn in (("velvet", velvet), ("workflow", ours)):
        path = reads_dir / "reads_1.fastq" if name == "velvet" else reads_dir
        seqs, figures = fn(a.workdir, path, a.k)
        figures.update(evaluate.evaluate(reference, seqs, min_length=500))
        result[name] = figures
    v, w = result["velvet"], result["workflow"]
    result["ratios"] = {
        "ng50": w["ng50"] / v["ng50"] if v["ng50"] else None,
        "wall": w["wall_s"] / v["wall_s"],
        "peak_memory": w["peak_bytes"] / v["peak_bytes"],
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
