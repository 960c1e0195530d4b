"""A generated DAG of one-step jobs: ``warehouse.workflow`` against Snakemake.

The DAG is a chain of BLOCKS fan-in/fan-out blocks: a *gather* job reads
every job of the previous fan-out (as one combined collection; the first
reads a small input), then WIDTH *fan* jobs each read the gather job.
BLOCKS x (1 + WIDTH) jobs, 200 by default (5 x 40). Each step is a trivial
shell command that records one empty file named after its job (the same as
Snakemake's ``touch {output}``). Snakemake runs the same DAG (one rule per
kind of job, wildcards) with as many cores as our local executor has slots.

Measured, each side in a fresh directory:

- first run: wall time of the whole DAG (ours: ``warehouse.workflow`` in
  this process, embedded, with its own job manager; Snakemake: ``snakemake
  --cores N -q``), and jobs per second;
- re-run, everything up to date: ours ``warehouse.workflow`` again (a new
  run in which every job is reused); Snakemake ``snakemake -n`` (its dry
  run: the time to decide that nothing needs to run).

Snakemake is installed (``pip install snakemake``) into a venv of its own
under the work directory unless ``--snakemake`` names an executable.

    .venv/bin/python benchmarks/workflow.py [--blocks 5] [--width 39] [--repeat 3]
        [--workdir DIR] [--snakemake PATH] [--skip-snakemake] [--json]

``--skip-snakemake`` times our side alone (for an A/B of two versions of
the code: ``PYTHONPATH=OTHER/src`` selects the other, and the steps inherit it).

Targets: our wall <= 0.5x Snakemake's; >= 100 jobs/s; re-run < 2 s and <=
Snakemake's dry run. Exits 0 even when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import warehouse
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs.executors import local_capacity

# The node's name is params {"n": NAME}; its output is one empty file NAME.done
# (the empty block is never stored, so no block is written).
STEP = """#!/bin/sh
n=${WH_PARAMS#*\\"n\\":\\"}
n=${n%%\\"*}
empty=d41d8cd98f00b204e9800998ecf8427e+0
printf '{"op":"output","manifest":". %s 0:0:%s.done\\\\n"}\\n' "$empty" "$n" >> "$WH_RESULT"
"""

SNAKEFILE = """\
BLOCKS = {blocks}
WIDTH = {width}

rule all:
    input: expand("out/f{{b}}_{{j}}.done", b=BLOCKS - 1, j=range(WIDTH))

def gather_input(wildcards):
    b = int(wildcards.b)
    if b == 0:
        return ["input.txt"]
    return [f"out/f{{b - 1}}_{{j}}.done" for j in range(WIDTH)]

rule gather:
    input: gather_input
    output: "out/g{{b}}.done"
    shell: "touch {{output}}"

rule fan:
    input: "out/g{{b}}.done"
    output: "out/f{{b}}_{{j}}.done"
    shell: "touch {{output}}"
"""


def definition(blocks: int, width: int, fn: str) -> dict[str, Any]:
    jobs: dict[str, Any] = {}
    for b in range(blocks):
        if b == 0:
            gather_input: Any = "$source"
        else:
            gather_input = {f"f{j}": f"$f{b - 1}_{j}" for j in range(width)}
        jobs[f"g{b}"] = {"function": fn, "input": gather_input, "params": {"n": f"g{b}"}}
        for j in range(width):
            jobs[f"f{b}_{j}"] = {"function": fn, "input": f"$g{b}", "params": {"n": f"f{b}_{j}"}}
    last = {f"f{j}": f"$f{blocks - 1}_{j}" for j in range(width)}
    return {
        "workflow": "bench",
        "inputs": {"source": {"default": "source"}},
        "jobs": jobs,
        "outputs": {"last": f"$f{blocks - 1}_0"} if last else {},
    }


def ours(root: Path, blocks: int, width: int) -> dict[str, float]:
    home = root / "home"
    with EmbeddedWarehouse(home) as wh:
        src = root / "source"
        src.mkdir()
        (src / "input.txt").write_text("input\n")
        wh.put([src], name="source")
        fn_dir = root / "fn"
        fn_dir.mkdir()
        (fn_dir / "step.sh").write_text(STEP)
        fn = f"{wh.put([fn_dir]).pdh}/step.sh"
        dag = definition(blocks, width, fn)
        start = time.perf_counter()
        first = warehouse.workflow(dag, wh=wh)
        wall = time.perf_counter() - start
        assert first["state"] == "complete", first.get("error")
        assert not any(n["reused"] for n in first["nodes"])
        start = time.perf_counter()
        again = warehouse.workflow(dag, wh=wh)
        rerun = time.perf_counter() - start
        assert again["state"] == "complete" and all(n["reused"] for n in again["nodes"])
    return {"wall": wall, "rerun": rerun}


def snakemake_exe(workdir: Path, given: str | None) -> str:
    if given:
        return given
    venv = workdir / "snakemake-venv"
    exe = venv / "bin" / "snakemake"
    if not exe.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "snakemake"], check=True)
    return str(exe)


def snakemake(root: Path, exe: str, blocks: int, width: int, cores: int) -> dict[str, float]:
    root.mkdir(parents=True)
    (root / "Snakefile").write_text(SNAKEFILE.format(blocks=blocks, width=width))
    (root / "input.txt").write_text("input\n")
    env = {**os.environ, "PATH": f"{Path(exe).parent}{os.pathsep}{os.environ['PATH']}"}
    start = time.perf_counter()
    subprocess.run(
        [exe, "--cores", str(cores), "-q"],
        cwd=root,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - start
    done = len(list((root / "out").glob("*.done")))
    assert done == blocks * (width + 1), done
    start = time.perf_counter()
    dry = subprocess.run(
        [exe, "-n", "--cores", str(cores)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rerun = time.perf_counter() - start
    assert "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-500:]
    return {"wall": wall, "rerun": rerun}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--width", type=int, default=39)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--snakemake", help="A snakemake executable (default: install one).")
    parser.add_argument(
        "--skip-snakemake", action="store_true", help="Time our side only (no Snakemake)."
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="wh-bench-workflow-"))
    workdir.mkdir(parents=True, exist_ok=True)
    exe = "" if args.skip_snakemake else snakemake_exe(workdir, args.snakemake)
    cores = local_capacity(None, None).cpus
    n = args.blocks * (args.width + 1)
    best: dict[str, dict[str, float]] = {}
    for i in range(args.repeat):
        sides: list[tuple[str, Callable[[Path], dict[str, float]]]] = [
            ("wh", lambda r: ours(r, args.blocks, args.width)),
            ("snakemake", lambda r: snakemake(r, exe, args.blocks, args.width, cores)),
        ]
        for name, fn in sides[:1] if args.skip_snakemake else sides:
            root = workdir / f"{name}-{i}"
            shutil.rmtree(root, ignore_errors=True)
            if name == "wh":
                root.mkdir(parents=True)
            got = fn(root)
            for k, v in got.items():
                best.setdefault(name, {})[k] = min(best.get(name, {}).get(k, v), v)
            shutil.rmtree(root, ignore_errors=True)
    result: dict[str, Any] = {
        "jobs": n,
        "cores": cores,
        "wh_wall": best["wh"]["wall"],
        "wh_jobs_per_s": n / best["wh"]["wall"],
        "wh_rerun": best["wh"]["rerun"],
    }
    if "snakemake" in best:
        result.update(
            snakemake_wall=best["snakemake"]["wall"],
            snakemake_jobs_per_s=n / best["snakemake"]["wall"],
            snakemake_dry_run=best["snakemake"]["rerun"],
            wall_ratio=best["wh"]["wall"] / best["snakemake"]["wall"],
        )
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{n} one-step jobs, {cores} slots, best of {args.repeat}")
    print(
        f"wh:        {result['wh_wall']:.2f} s ({result['wh_jobs_per_s']:.0f} jobs/s), "
        f"re-run {result['wh_rerun']:.2f} s"
    )
    if "snakemake" in best:
        print(
            f"snakemake: {result['snakemake_wall']:.2f} s "
            f"({result['snakemake_jobs_per_s']:.0f} jobs/s), "
            f"dry run {result['snakemake_dry_run']:.2f} s"
        )
        print(f"wall ratio wh/snakemake: {result['wall_ratio']:.2f} (target <= 0.5)")
    print(f"jobs/s: {result['wh_jobs_per_s']:.0f} (target >= 100)")
    dry = f" and <= {result['snakemake_dry_run']:.2f}" if "snakemake" in best else ""
    print(f"re-run: {result['wh_rerun']:.2f} s (target < 2{dry})")


if __name__ == "__main__":
    main()
