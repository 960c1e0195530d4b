"""The assembly workflow on 1, 2 and 4 Dask workers, stage by stage, as PGA measures it.

    .venv/bin/python benchmarks/assembly_scaling.py --workdir /tmp/asmscale \
        [--genome-size 1000000] [--coverage 30] [--workers 1,2,4] [--split-size 8M] \
        [--json out.json] [--svg docs/assembly-scaling.svg]
    .venv/bin/python benchmarks/assembly_scaling.py --redraw out.json --svg chart.svg

One set of simulated paired reads (gzip FASTQ, 100 bp, 400 bp fragments, 1%
substitutions, files of pairs as a sequencer writes them), then for each
worker count N: a fresh warehouse (so nothing is reused), a Dask cluster of
N single-thread worker processes on this machine (distributed.LocalCluster),
and examples/assembly/assemble.wf.yml run on it with the executor
``dask:ADDRESS`` (as ``wh workflow drive --executor`` runs it). Per stage
(PGA's: preprocess, count, graph build, compression, tips and bubbles,
scaffolding; each a group of the workflow's jobs, STAGES below): wall time
(from its first job's start to its last job's end), the steps' CPU time,
shuffled bytes (the MapReduce counter ``shuffle_bytes``: map output the
reducers read), bytes the steps wrote, the largest step's peak memory. The
run's wall and the scaffolds' NG50 too. JSON on standard output (and in
``--json``); ``--svg`` draws the chart (stdlib only, no script or web font).

Run it on a quiet machine: the figures are wall times of processes that
share its cores (the load average is recorded before each run).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "assembly"))
import simulate  # type: ignore[import-not-found]  # noqa: E402

# PGA's stages, each the workflow's jobs that do it (a job in none is "other").
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("preprocess", ("preprocess", "prepare")),
    ("count", ("count", "cutoff")),
    ("graph build", ("graph",)),
    ("compression", ("unitigs",)),
    ("tips and bubbles", ("simplify",)),
    ("contigs", ("contigs",)),
    ("scaffolding", ("pairs_code", "pairs", "scaffold")),
]


def stage_of(node: str) -> str:
    return next((name for name, nodes in STAGES if node in nodes), "other")


def simulate_reads(work: Path, size: int, coverage: float, files: int, seed: int) -> Path:
    genome = simulate.random_genome(size, seed)
    r1, r2, q1, q2 = simulate.simulate_pairs(genome, coverage, 100, 0.01, seed, 400, 40)
    simulate.write(work / "sim", genome, r1, files, seconds=r2, quals=q1, quals2=q2, compress=True)
    return work / "sim" / "reads"


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def one_run(work: Path, reads: Path, workers: int, params: dict[str, Any]) -> dict[str, Any]:
    """The workflow on a fresh warehouse and a Dask cluster of ``workers`` processes."""
    from distributed import LocalCluster

    from warehouse.embedded import EmbeddedWarehouse
    from warehouse.jobs.counters import totals
    from warehouse.jobs.jobstore import list_steps
    from warehouse.workflows import list_nodes
    from warehouse.workflows.workflowsview import LocalWorkflows

    home = work / f"home-{workers}"
    shutil.rmtree(home, ignore_errors=True)
    wf = ROOT / "examples" / "assembly" / "assemble.wf.yml"
    before = load()
    with (
        LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address="127.0.0.1:0",
            memory_limit=0,
        ) as cluster,
        EmbeddedWarehouse(home) as wh,
    ):
        wh.put([reads], name="reads")
        flows = LocalWorkflows(wh, f"dask:{cluster.scheduler_address}")
        inputs = {"reads": "reads", **params}
        t = time.perf_counter()
        started = flows.start(wf.read_text(), str(wf), inputs, base_dir=wf.parent)
        view = flows.run(started["id"], wait=True)
        wall = time.perf_counter() - t
        if view["state"] != "complete":
            raise SystemExit(f"Error: the run on {workers} workers ended {view['state']}: {view}")
        stages: dict[str, dict[str, Any]] = {}
        jobs: dict[str, dict[str, Any]] = {}
        for node in list_nodes(wh.engine, started["id"]):
            if node.job_id is None:
                continue
            steps = list_steps(wh.engine, node.job_id)
            counters = totals(steps)[1]
            figures = {
                "wall_s": (node.finished_at or 0) - (node.started_at or 0),
                "cpu_s": sum(s.cpu_seconds or 0 for s in steps),
                "shuffle_bytes": int(counters.get("shuffle_bytes", 0)),
                "written_bytes": sum(s.written_bytes or 0 for s in steps),
                "peak_memory": max((s.peak_memory or 0 for s in steps), default=0),
                "steps": len(steps),
                "start": node.started_at,
                "end": node.finished_at,
            }
            jobs[node.node] = figures
            into = stages.setdefault(stage_of(node.node), {"jobs": []})
            into["jobs"].append(node.node)
        for into in stages.values():
            mine = [jobs[j] for j in into["jobs"]]
            into["wall_s"] = round(max(j["end"] for j in mine) - min(j["start"] for j in mine), 2)
            for key in ("cpu_s", "shuffle_bytes", "written_bytes", "steps"):
                into[key] = sum(j[key] for j in mine)
            into["cpu_s"] = round(into["cpu_s"], 2)
            into["peak_memory"] = max(j["peak_memory"] for j in mine)
        (out_pdh,) = [n["output_pdh"] for n in view["nodes"] if n["node"] == "scaffold"]
        stats = json.loads(wh.reader(out_pdh).read_file("stats.json"))
    for j in jobs.values():
        j["wall_s"] = round(j["wall_s"], 2)
        del j["start"], j["end"]
    return {
        "workers": workers,
        "wall_s": round(wall, 2),
        "load_before": before,
        "stages": {name: stages[name] for name, _ in [*STAGES, ("other", ())] if name in stages},
        "jobs": jobs,
        "scaffold_ng50": stats.get("scaffolds", {}).get("ng50"),
        "contig_ng50": stats.get("contigs", {}).get("ng50"),
    }


# ---- the chart ----

_COLOURS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2"]


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def _nice(x: float) -> float:
    """The smallest of 1, 2, 5 times a power of ten at least ``x``: an axis step."""
    power = 10 ** math.floor(math.log10(x))
    return float(next(m * power for m in (1, 2, 5, 10) if m * power >= x))


def chart(result: dict[str, Any]) -> str:
    """Grouped bars: each stage's wall time on each worker count, its shuffled bytes below."""
    runs = result["runs"]
    names = [n for n, _ in [*STAGES, ("other", ())] if any(n in r["stages"] for r in runs)]
    walls = [r["stages"][n]["wall_s"] for r in runs for n in names if n in r["stages"]]
    highest = max([*walls, 0.1])
    step = _nice(highest / 5)
    ticks = math.ceil(highest / step)
    top = step * ticks
    left, plot_h, bar_w = 60, 240, 18
    group_w = max(len(runs) * bar_w + 26, 96)  # room for the stage's name
    width = max(left + len(names) * group_w + 20, 640)
    height = plot_h + 130
    base = 30 + plot_h
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f"<title>{_esc(result['title'])}</title>",
        f'<text x="{left}" y="16" font-size="13">{_esc(result["title"])}</text>',
        f'<line x1="{left}" y1="{base}" x2="{width - 10}" y2="{base}" stroke="#333"/>',
        f'<line x1="{left}" y1="30" x2="{left}" y2="{base}" stroke="#333"/>',
    ]
    for i in range(ticks + 1):  # the axis: seconds
        v = step * i
        y = base - plot_h * i / ticks
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{v:g} s</text>')
        if i:
            out.append(
                f'<line x1="{left}" y1="{y:.1f}" x2="{width - 10}" y2="{y:.1f}" stroke="#ddd"/>'
            )
    for g, name in enumerate(names):
        x0 = left + 10 + g * group_w + (group_w - len(runs) * bar_w - 10) // 2
        shuffled = 0
        for b, run in enumerate(runs):
            st = run["stages"].get(name)
            if st is None:
                continue
            shuffled = max(shuffled, st["shuffle_bytes"])
            h = plot_h * st["wall_s"] / top
            x = x0 + b * bar_w
            out.append(
                f'<rect x="{x}" y="{base - h:.1f}" width="{bar_w - 2}" height="{h:.1f}" '
                f'fill="{_COLOURS[b % len(_COLOURS)]}"><title>{_esc(name)}, '
                f"{run['workers']} workers: {st['wall_s']} s</title></rect>"
            )
        mid = x0 + len(runs) * bar_w / 2
        out.append(f'<text x="{mid:.0f}" y="{base + 16}" text-anchor="middle">{_esc(name)}</text>')
        if shuffled:
            out.append(
                f'<text x="{mid:.0f}" y="{base + 30}" text-anchor="middle" fill="#555">'
                f"shuffle {_size(shuffled)}</text>"
            )
    y = base + 52
    for b, run in enumerate(runs):
        x = left + b * 170
        out.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{_COLOURS[b]}"/>')
        out.append(
            f'<text x="{x + 16}" y="{y + 10}">{run["workers"]} worker'
            f"{'s' if run['workers'] > 1 else ''}: {run['wall_s']:.0f} s in all</text>"
        )
    out.append(f'<text x="{left}" y="{y + 34}" fill="#555">{_esc(result["note"])}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--genome-size", type=int, default=1_000_000)
    ap.add_argument("--coverage", type=float, default=30.0)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--files", type=int, default=4, help="pairs of read files")
    ap.add_argument("--split-size", default="8M", help="the MapReduces' split_size")
    ap.add_argument("--reducers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--svg", type=Path)
    ap.add_argument("--redraw", type=Path, help="draw --svg from this --json file, run nothing")
    a = ap.parse_args()
    if a.redraw:
        if not a.svg:
            ap.error("--redraw needs --svg")
        write_svg(a.svg, json.loads(a.redraw.read_text()))
        return
    try:
        counts = [int(w) for w in a.workers.split(",")]
    except ValueError:
        ap.error("--workers must be numbers split by commas, as 1,2,4")
    if not counts or min(counts) < 1 or a.genome_size < 1000 or a.files < 1:
        ap.error("--workers must be at least 1, --genome-size at least 1000, --files at least 1")
    a.workdir.mkdir(parents=True, exist_ok=True)
    reads = simulate_reads(a.workdir, a.genome_size, a.coverage, a.files, a.seed)
    params = {"split_size": a.split_size, "reducers": a.reducers}
    runs = [one_run(a.workdir, reads, n, params) for n in counts]
    result = {
        "title": (
            f"The assembly workflow by stage: {a.genome_size / 1e6:g} Mb, {a.coverage:g}x pairs, "
            f"on {', '.join(map(str, counts))} Dask workers"
        ),
        "note": (
            f"{os.cpu_count()} cores; load average before each run: "
            + ", ".join(f"{r['load_before']:.1f}" for r in runs)
        ),
        "genome_size": a.genome_size,
        "coverage": a.coverage,
        "files": a.files,
        "cpus": os.cpu_count(),
        "params": params,
        "runs": runs,
    }
    text = json.dumps(result, indent=1)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")
    if a.svg:
        write_svg(a.svg, result)


def write_svg(path: Path, result: dict[str, Any]) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(chart(result))
    part.replace(path)


if __name__ == "__main__":
    main()
