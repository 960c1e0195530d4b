"""Steps cycled per second: the job manager against a raw loop of the same subprocesses.

A job of N steps (default 2,000) whose function is a shell script exiting 0
(step 0 queues the N level-1 steps with one ``wh step queue``). The rate is
N over the time from the first level-1 step's start to the last one's end,
as recorded in the catalog. The raw figures run the same script N times:
locally with a loop keeping one process per core running, and on Dask with
``client.map`` over a LocalCluster of one worker process per core.

    .venv/bin/python benchmarks/steps.py [--steps N] [--repeat N] [--skip-dask]
        [--slurm-steps N] [--skip-slurm] [--json]

On Slurm (a running cluster: SLURM_CONF, or root, which starts one with
scripts/slurm.sh) a job of --slurm-steps steps (default 200) runs through the
Slurm executor, timed from the end of step 0 (when the level-1 steps are
queued) to the end of the last step; the raw figure submits the same script
with one ``sbatch`` per run and waits until squeue lists none of them.

Targets: at least 500 steps/s locally, and at least 0.8x the raw figure for
every executor. The Dask executor runs up to MAX_CHUNK steps of a job per
task; the raw map with as many runs per task is printed beside it. Exits 0
even when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from warehouse import jobs
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs.daskexec import MAX_CHUNK

SCRIPT = """#!/bin/sh
if [ "$WH_STEP" = 0 ]; then exec wh step queue --level 1 $(seq 1 "$STEPS"); fi
exit 0
"""


def raw_local(script: Path, n: int, slots: int) -> float:
    env = {**os.environ, "WH_STEP": "1"}
    start = time.perf_counter()
    running: dict[int, subprocess.Popen[bytes]] = {}
    started = 0
    while started < n or running:
        while started < n and len(running) < slots:
            p = subprocess.Popen([str(script)], env=env, stdin=subprocess.DEVNULL)
            running[p.pid] = p
            started += 1
        pid, _ = os.wait()
        proc = running.pop(pid)
        proc.returncode = 0
    return n / (time.perf_counter() - start)


def _run_script(args: tuple[str, int]) -> int:
    return subprocess.run([args[0]], env={**os.environ, "WH_STEP": "1"}, check=False).returncode


def _run_scripts(batch: list[tuple[str, int]]) -> list[int]:
    return [_run_script(args) for args in batch]


def raw_dask(address: str, script: Path, n: int, per_task: int = 1) -> float:
    """``client.map`` of the script, ``per_task`` runs in each task."""
    from distributed import Client

    runs = [(str(script), i) for i in range(n)]
    batches = [runs[i : i + per_task] for i in range(0, n, per_task)]
    with Client(address) as client:
        client.gather(client.map(_run_script, [(str(script), -1)], pure=False))  # warm up
        start = time.perf_counter()
        futures = client.map(_run_scripts, batches, pure=False)
        assert all(code == 0 for codes in client.gather(futures) for code in codes)
        return n / (time.perf_counter() - start)


def slurm_conf() -> str | None:
    """The running Slurm cluster's slurm.conf (started here when root), or None."""
    if os.environ.get("SLURM_CONF"):
        return os.environ["SLURM_CONF"]
    if os.geteuid() != 0:
        return None
    script = Path(__file__).resolve().parent.parent / "scripts" / "slurm.sh"
    done = subprocess.run([script], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def raw_slurm(script: Path, n: int, workdir: Path) -> float:
    """One ``sbatch`` per run of the script, then wait until all have ended."""
    start = time.perf_counter()
    ids = set()
    for _ in range(n):
        out = subprocess.run(
            [
                "sbatch",
                "--parsable",
                "--job-name=raw-bench",
                "--export=ALL,WH_STEP=1",
                "--cpus-per-task=1",
                "--no-requeue",
                f"--chdir={workdir}",
                "--output=/dev/null",
                str(script),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        ids.add(out.strip().split(";")[0])
    while True:
        out = subprocess.run(
            ["squeue", "-h", "--me", "-t", "PD,R,CG,CF", "-o", "%i"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        if not ids & set(out.split()):
            break
        time.sleep(0.05)
    return n / (time.perf_counter() - start)


def managed_from_queue(wh: EmbeddedWarehouse, fn: str, key: str, executor: str) -> float:
    """Steps/s from the end of step 0 (which queues the rest) to the last step's end."""
    request = jobs.JobRequest(fn, key, {}, reuse=False, executor=executor)
    record = jobs.submit(wh, request)
    assert jobs.run_manager(wh, executor, until_job=record.id)
    job = jobs.get_job(wh.engine, record.id)
    assert job.state == "complete", job.error
    (first,) = jobs.list_steps(wh.engine, job.id, level=0)
    steps = jobs.list_steps(wh.engine, job.id, level=1)
    return len(steps) / (max(s.finished_at or 0 for s in steps) - (first.finished_at or 0))


def managed(wh: EmbeddedWarehouse, fn: str, key: str, executor: str) -> float:
    request = jobs.JobRequest(fn, key, {}, reuse=False, executor=executor)
    record = jobs.submit(wh, request)
    assert jobs.run_manager(wh, executor, until_job=record.id)
    job = jobs.get_job(wh.engine, record.id)
    assert job.state == "complete", job.error
    steps = jobs.list_steps(wh.engine, job.id, level=1)
    span = max(s.finished_at or 0 for s in steps) - min(s.started_at or 0 for s in steps)
    return len(steps) / span


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--skip-dask", action="store_true")
    ap.add_argument("--slurm-steps", type=int, default=200)
    ap.add_argument("--skip-slurm", action="store_true")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each, best kept")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    slots = len(os.sched_getaffinity(0))
    os.environ["STEPS"] = str(args.steps)
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="wh-bench-steps-") as tmp:
        script = Path(tmp) / "step.sh"
        script.write_text(SCRIPT)
        script.chmod(0o755)
        (Path(tmp) / "in").mkdir()
        (Path(tmp) / "in" / "x").write_text("x")
        with EmbeddedWarehouse(Path(tmp) / "home") as wh:
            fn_dir = Path(tmp) / "fn"
            fn_dir.mkdir()
            (fn_dir / "step.sh").write_text(SCRIPT)
            fn = f"{wh.put([fn_dir]).pdh}/step.sh"
            key = wh.put([Path(tmp) / "in"]).pdh
            # One managed run first, untimed: a raw loop run before any spawns
            # about 25% faster (2,400 against 1,900/s here) than every raw
            # loop after one, and than the manager can in this process.
            managed(wh, fn, key, "local")
            # Alternate the two, best of --repeat each: the machine's noise
            # otherwise moves the ratio more than the code does.
            raw, ours = [], []
            for _ in range(args.repeat):
                raw.append(raw_local(script, args.steps, slots))
                ours.append(managed(wh, fn, key, "local"))
            figures["raw_local"], figures["local"] = max(raw), max(ours)
            if not args.skip_dask:
                from distributed import LocalCluster

                with LocalCluster(
                    n_workers=slots,
                    threads_per_worker=1,
                    dashboard_address=None,
                    memory_limit=0,
                ) as cluster:
                    addr = cluster.scheduler_address
                    raw, batched, ours = [], [], []
                    for _ in range(args.repeat):
                        raw.append(raw_dask(addr, script, args.steps))
                        batched.append(raw_dask(addr, script, args.steps, MAX_CHUNK))
                        ours.append(managed(wh, fn, key, f"dask:{addr}"))
                    figures["raw_dask"], figures["dask"] = max(raw), max(ours)
                    figures["raw_dask_batched"] = max(batched)
            conf = None if args.skip_slurm else slurm_conf()
            if conf:
                os.environ["SLURM_CONF"] = conf
                os.environ["STEPS"] = str(args.slurm_steps)
                raw, ours = [], []
                for _ in range(args.repeat):
                    raw.append(raw_slurm(script, args.slurm_steps, Path(tmp)))
                    ours.append(managed_from_queue(wh, fn, key, "slurm"))
                figures["raw_slurm"], figures["slurm"] = max(raw), max(ours)
    figures["local_ratio"] = figures["local"] / figures["raw_local"]
    if "dask" in figures:
        figures["dask_ratio"] = figures["dask"] / figures["raw_dask"]
    if "slurm" in figures:
        figures["slurm_ratio"] = figures["slurm"] / figures["raw_slurm"]
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"cpus: {slots}, steps: {args.steps}")
    print(f"raw local loop     {figures['raw_local']:8.0f} steps/s")
    ok = "PASS" if figures["local"] >= 500 and figures["local_ratio"] >= 0.8 else "MISS"
    print(
        f"local executor     {figures['local']:8.0f} steps/s  "
        f"ratio {figures['local_ratio']:.2f}  {ok} (>= 500/s and >= 0.8x)"
    )
    if "dask" in figures:
        ok = "PASS" if figures["dask_ratio"] >= 0.8 else "MISS"
        print(f"raw dask map       {figures['raw_dask']:8.0f} steps/s")
        print(
            f"  ({MAX_CHUNK} per task    {figures['raw_dask_batched']:8.0f} steps/s: "
            "the executor batches a job's steps alike)"
        )
        print(
            f"dask executor      {figures['dask']:8.0f} steps/s  "
            f"ratio {figures['dask_ratio']:.2f}  {ok} (>= 0.8x)"
        )
    if "slurm" in figures:
        ok = "PASS" if figures["slurm_ratio"] >= 0.8 else "MISS"
        print(f"raw sbatch loop    {figures['raw_slurm']:8.1f} steps/s  ({args.slurm_steps} steps)")
        print(
            f"slurm executor     {figures['slurm']:8.1f} steps/s  "
            f"ratio {figures['slurm_ratio']:.2f}  {ok} (>= 0.8x)"
        )


if __name__ == "__main__":
    main()
