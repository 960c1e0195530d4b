"""Velvet against the assembly workflow (examples/assembly) on the same simulated reads.

Each case is a seeded random genome, reads of 100 bp from both strands with
substitution errors (examples/assembly/simulate.py). Velvet (`velveth` and
`velvetg -cov_cutoff auto -exp_cov auto`) is run at each k of ``--velvet-k``
and its best NG50 kept (its own best k, as its users pick it); the workflow
(`wh workflow run examples/assembly/assemble.wf.yml`, ``-i k=K``, default
``auto``) once, from a fresh warehouse, with the example as it is at this
checkout's HEAD (copied first, so later commits do not change a run). Contigs of 500 bp or more are
aligned to the reference with minimap2 (mappy): NG50, genome fraction,
misassemblies. Wall time of each (Velvet's at its best k; the workflow's
from `wh workflow run` to its end, the upload of the reads timed apart) and
the peak memory of the largest single process of each.

    .venv/bin/python benchmarks/assembly.py --workdir /tmp/asmbench            # the table
    .venv/bin/python benchmarks/assembly.py --workdir /tmp/asmbench --cases 1mb  # one case

Prints one JSON object a case as it ends, then the table (Markdown). Needs
velvet (Debian: `apt-get install velvet`; `make bench-assembly` installs it).
Debian's velvet is built for k up to 31.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
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


@dataclass
class Case:
    name: str
    size: int
    coverage: float
    error: float
    seed: int
    repeats: int = 0
    repeat_length: int = 0


# 200 kb to 1 Mb, 20x to 40x, 0.5% to 1% errors, one with repeats longer than k.
CASES = [
    Case("300kb-25x-0.8%", 300_000, 25, 0.008, 3),
    Case("200kb-20x-1%", 200_000, 20, 0.01, 21),
    Case("500kb-40x-0.5%", 500_000, 40, 0.005, 22),
    Case("400kb-30x-1%-repeats", 400_000, 30, 0.01, 23, repeats=4, repeat_length=300),
    Case("700kb-30x-0.7%", 700_000, 30, 0.007, 24),
    Case("1mb", 1_000_000, 30, 0.01, 1),
]


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
    out = work / f"velvet-k{k}"
    w1, m1 = measured(["velveth", str(out), str(k), "-fastq", "-short", str(reads)])
    w2, m2 = measured(["velvetg", str(out), "-cov_cutoff", "auto", "-exp_cov", "auto"])
    seqs = [s for _, s in dbg.read_fasta((out / "contigs.fa").read_text())]
    shutil.rmtree(out / "Sequences", ignore_errors=True)  # the reads again, large
    return seqs, {"k": k, "wall_s": w1 + w2, "peak_bytes": max(m1, m2)}


def seconds(value: Any) -> float:
    """A time as the run's JSON gives it (epoch seconds or ISO text)."""
    if isinstance(value, (int, float)):
        return float(value)
    return datetime.fromisoformat(str(value)).timestamp() if value else 0.0


def snapshot(workdir: Path) -> tuple[Path, str]:
    """The example at this checkout's HEAD, in a repository of its own, so a commit made while
    the benchmark runs changes none of its runs; its workflow file and the commit."""
    repo = workdir / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "examples/assembly"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(repo)], input=tar, check=True)
    git = ["git", "-C", str(repo), "-c", "user.name=bench", "-c", "user.email=bench@localhost"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", f"examples/assembly at {commit}"], check=True)
    return repo / "examples" / "assembly" / "assemble.wf.yml", commit


def ours(work: Path, reads_dir: Path, k: str, wf: Path) -> tuple[list[str], dict[str, Any]]:
    home = work / "wh-home"
    env = {**os.environ, "WH_HOME": str(home), "WH_USER": os.environ.get("WH_USER", "bench")}
    wh = str(Path(sys.executable).parent / "wh")
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
    stats = json.loads((out / "stats.json").read_text())
    show = subprocess.run(
        [wh, "workflow", "show", "1", "--json"], env=env, check=True, capture_output=True, text=True
    )
    nodes = json.loads(show.stdout)["nodes"]
    stages = {
        n["node"]: round(seconds(n["finished_at"]) - seconds(n["started_at"]), 1) for n in nodes
    }
    figures = {"k": stats["k"], "wall_s": wall, "peak_bytes": peak, "put_s": put_s}
    figures.update({"stages_s": stages, "gaps": stats["gaps"]})
    return seqs, figures


def run_case(case: Case, workdir: Path, velvet_k: list[int], k: str, wf: Path) -> dict[str, Any]:
    work = workdir / case.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    genome = simulate.random_genome(case.size, case.seed, case.repeats, case.repeat_length)
    reads = simulate.simulate_reads(genome, case.coverage, 100, case.error, case.seed)
    simulate.write(work / "sim", genome, reads, files=1)
    reads_dir = work / "sim" / "reads"
    reference = genome.decode()
    result: dict[str, Any] = {"case": case.name, **case.__dict__, "reads": len(reads)}
    runs = []
    for vk in velvet_k:
        seqs, figures = velvet(work, reads_dir / "reads_1.fastq", vk)
        figures.update(evaluate.evaluate(reference, seqs, min_length=500))
        runs.append(figures)
    best = max(runs, key=lambda r: (r["ng50"], -r["misassemblies"]))
    result["velvet"] = best
    result["velvet_by_k"] = {r["k"]: r["ng50"] for r in runs}
    seqs, figures = ours(work, reads_dir, k, wf)
    figures.update(evaluate.evaluate(reference, seqs, min_length=500))
    result["workflow"] = figures
    v, w = result["velvet"], result["workflow"]
    result["ratios"] = {
        "ng50": w["ng50"] / v["ng50"] if v["ng50"] else None,
        "wall": w["wall_s"] / v["wall_s"],
        "peak_memory": w["peak_bytes"] / v["peak_bytes"],
    }
    return result


def table(results: list[dict[str, Any]]) -> str:
    head = (
        "| genome | our k | our NG50 | Velvet k | Velvet NG50 | ratio | our genome fraction "
        "| our misassemblies | Velvet misassemblies | our wall (s) | Velvet wall (s) |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for r in results:
        v, w = r["velvet"], r["workflow"]
        ratio = r["ratios"]["ng50"]
        rows.append(
            f"| {r['case']} | {w['k']} | {w['ng50']:,} | {v['k']} | {v['ng50']:,} | "
            f"{ratio:.2f} | {100 * w['genome_fraction']:.3f}% | {w['misassemblies']} | "
            f"{v['misassemblies']} | {w['wall_s']:.1f} | {v['wall_s']:.1f} |"
            if ratio is not None
            else f"| {r['case']} | {w['k']} | {w['ng50']:,} | {v['k']} | 0 | - | | | | | |"
        )
    return head + "\n".join(rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--cases", default=",".join(c.name for c in CASES), help="names, commas")
    ap.add_argument("--velvet-k", default="21,25,29,31", help="Velvet's k values, commas")
    ap.add_argument("--k", default="auto", help="the workflow's k")
    a = ap.parse_args()
    if shutil.which("velveth") is None:
        raise SystemExit("Error: velveth not found: apt-get install velvet (make bench-assembly)")
    known = {c.name: c for c in CASES}
    names = [n for n in a.cases.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"Error: unknown case {unknown[0]!r} (known: {', '.join(known)})")
    try:
        velvet_k = [int(x) for x in a.velvet_k.split(",")]
    except ValueError:
        raise SystemExit(f"Error: --velvet-k must be whole numbers, not {a.velvet_k!r}") from None
    a.workdir.mkdir(parents=True, exist_ok=True)
    wf, commit = snapshot(a.workdir)
    results = []
    for name in names:
        load = os.getloadavg()[0]
        result = run_case(known[name], a.workdir, velvet_k, a.k, wf)
        result.update(load_before=load, load_after=os.getloadavg()[0], cpus=os.cpu_count())
        result["commit"] = commit
        print(json.dumps(result), flush=True)
        results.append(result)
    print(table(results))


if __name__ == "__main__":
    main()
