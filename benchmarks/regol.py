"""What Regol adds to running a job at each commit: git, pinning, records.

A repository of N commits (default 40) of a one-line shell function; a job of
it at the first commit is watched, then:

- ``submit``: ``LocalRegol.run`` for all N commits (list the branch, and per
  commit ``git archive`` + store the tree + submit + record the run);
- ``run``: the job manager running those N jobs to their end;
- ``raw``: the same N function versions submitted directly as ``PDH/PATH``
  (no git, no reuse) and run, for comparison;
- ``bisect``: a bisect over the N commits on a fresh watch (every job is
  reused, so this is Regol's own cost per step: git, records, submission).

    .venv/bin/python benchmarks/regol.py [--commits N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from warehouse import jobs
from warehouse.embedded import EmbeddedWarehouse
from warehouse.regol.client import LocalRegol, bisect

SCRIPT = """#!/bin/sh
# revision {n}
exit 0
"""


def git(repo: Path, *args: str) -> str:
    ident = ["-c", "user.name=b", "-c", "user.email=b@example.invalid"]
    done = subprocess.run(
        ["git", "-C", str(repo), *ident, *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def make_repo(repo: Path, n: int) -> list[str]:
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    out = []
    for i in range(n):
        (repo / "fn.sh").write_text(SCRIPT.format(n=i))
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", f"commit {i}")
        out.append(git(repo, "rev-parse", "HEAD"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wh-bench-regol-") as tmp:
        root = Path(tmp)
        commits = make_repo(root / "repo", args.commits)
        (root / "in").mkdir()
        (root / "in" / "x").write_text("x\n")
        with EmbeddedWarehouse(root / "home", user="bench") as wh:
            os.environ["WH_HOME"] = str(wh.home)
            key = wh.put([root / "in"]).pdh
            spec = f"git:{root / 'repo'}@{commits[0]}:fn.sh"
            base = jobs.submit(wh, jobs.JobRequest(spec, key, {}))
            jobs.run_manager(wh, "local", until_job=base.id)
            regol = LocalRegol(wh)
            watch = regol.watch(base.id, "main", None)

            t0 = time.perf_counter()
            made = regol.run([watch.id], None, start=False)
            t1 = time.perf_counter()
            regol.wait(made)
            t2 = time.perf_counter()
            assert all(r.state == "complete" for r in regol.history(watch.id))

            versions = [jobs.get_job(wh.engine, r.job) for r in made]
            t3 = time.perf_counter()
            raw = [
                jobs.submit(
                    wh,
                    jobs.JobRequest(f"{v.function_pdh}/{v.function_path}", key, {}, reuse=False),
                )
                for v in versions
            ]
            t4 = time.perf_counter()
            jobs.run_manager(wh, "local", until_job=raw[-1].id)
            while any(jobs.get_job(wh.engine, j.id).state != "complete" for j in raw):
                time.sleep(0.05)
            t5 = time.perf_counter()

            fresh = regol.watch(base.id, "main", None)
            t6 = time.perf_counter()
            steps: list[object] = []
            bisect(regol, fresh.id, commits[0], commits[-1], steps.append)
            t7 = time.perf_counter()
    n = len(made)
    result = {
        "commits": n,
        "regol_submit_s": t1 - t0,
        "regol_run_s": t2 - t1,
        "raw_submit_s": t4 - t3,
        "raw_run_s": t5 - t4,
        "bisect_s": t7 - t6,
        "bisect_runs": len(steps),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{n} commits of a one-line shell function, embedded warehouse, local executor")
    print(f"  regol submit: {t1 - t0:6.2f} s  ({(t1 - t0) / n * 1000:.0f} ms a commit)")
    print(f"  regol run:    {t2 - t1:6.2f} s  ({(t2 - t1) / n * 1000:.0f} ms a job)")
    print(f"  raw submit:   {t4 - t3:6.2f} s  ({(t4 - t3) / n * 1000:.0f} ms a job)")
    print(f"  raw run:      {t5 - t4:6.2f} s  ({(t5 - t4) / n * 1000:.0f} ms a job)")
    print(f"  bisect:       {t7 - t6:6.2f} s  ({len(steps)} runs, all reused)")


if __name__ == "__main__":
    main()
