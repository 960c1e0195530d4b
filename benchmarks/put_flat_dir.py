#!/usr/bin/env python3
"""A put of one flat directory of many tiny files, two builds of `wh` (A/B).

Memory: the peak resident size (``wait4``) of ``wh put --no-progress DIR``
of a single directory of each ``--counts`` tiny files (a few bytes each,
every fifth empty, made under ``--work``), each build with a fresh
``WH_HOME``; a put that holds a bounded part of a directory peaks at nearly
the same size for every count.

Speed: the wall time of ``wh put DIR --json`` of a flat directory of
``--speed-count`` files (read into the page cache before each run), a
fresh home each time, the builds alternating round by round; prints each
build's min/median/max, the per-round ratio of B to A and the load average.

    python benchmarks/put_flat_dir.py --a A/wh --b .venv/bin/wh \\
        --work /var/tmp/put-flat --counts 200000,1000000 --rounds 6

Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path


def _flat(root: Path, count: int) -> Path:
    """A directory of ``count`` tiny files (made once, kept for the next run)."""
    done = root.with_name(root.name + ".complete")  # beside it: not one of its files
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for i in range(count):
        # Written in no name order, as a directory's entries come anyway.
        j = i * 7919 % count
        (root / f"f{j:08d}").write_bytes(b"" if j % 5 == 0 else b"%x\n" % j)
    done.write_bytes(b"")
    return root


def _env(home: Path) -> dict[str, str]:
    shutil.rmtree(home, ignore_errors=True)
    env = {**os.environ, "WH_HOME": str(home), "XDG_CACHE_HOME": str(home / "cache")}
    env.pop("WH_URL", None)
    return env


def _peak(wh: str, tree: Path, home: Path) -> int:
    """Peak resident bytes of a put, read from wait4 of the child itself."""
    env = _env(home)
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.execve(wh, [wh, "put", "--no-progress", str(tree)], env)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{wh} put of {tree} failed")
    return usage.ru_maxrss * 1024


def _put(wh: str, tree: Path, home: Path) -> tuple[float, str]:
    env = _env(home)
    subprocess.run([wh, "name", "ls"], env=env, capture_output=True, check=True)  # untimed
    t0 = time.perf_counter()
    done = subprocess.run([wh, "put", str(tree), "--json"], env=env, capture_output=True)
    wall = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"{wh} put failed: {done.stderr.decode()[-500:]}")
    return wall, str(json.loads(done.stdout)["pdh"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="the `wh` of build A (before)")
    ap.add_argument("--b", required=True, help="the `wh` of build B (this branch)")
    ap.add_argument("--work", type=Path, required=True, help="where the trees and homes go")
    ap.add_argument("--counts", default="200000,1000000", help="files of the memory runs")
    ap.add_argument("--speed-count", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-speed", action="store_true")
    opts = ap.parse_args()
    builds = {"A": opts.a, "B": opts.b}
    opts.work.mkdir(parents=True, exist_ok=True)

    if not opts.skip_memory:
        for count in (int(c) for c in opts.counts.split(",")):
            tree = _flat(opts.work / f"flat{count}", count)
            for name, wh in builds.items():
                t0 = time.perf_counter()
                peak = _peak(wh, tree, opts.work / f"home-{name}")
                wall = time.perf_counter() - t0
                print(
                    f"memory {name} {count} files: {peak / 2**20:.1f} MiB ({wall:.1f} s, "
                    f"load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
    if opts.skip_speed:
        return
    tree = _flat(opts.work / f"flat{opts.speed_count}", opts.speed_count)
    walls: dict[str, list[float]] = {n: [] for n in builds}
    loads: list[float] = []
    pdhs: set[str] = set()
    for r in range(opts.rounds):
        for name in builds if r % 2 == 0 else reversed(list(builds)):
            for entry in os.scandir(tree):  # warm, alike for both
                with open(entry.path, "rb") as fh:
                    fh.read()
            loads.append(os.getloadavg()[0])
            wall, pdh = _put(builds[name], tree, opts.work / f"home-{name}")
            walls[name].append(wall)
            pdhs.add(pdh)
            print(f"speed {name} round {r}: {wall:.2f} s {pdh}", flush=True)
    if len(pdhs) != 1:
        raise SystemExit(f"the builds stored different collections: {sorted(pdhs)}")
    for name, ws in walls.items():
        s = sorted(ws)
        print(f"{name}: min/median/max {s[0]:.2f}/{statistics.median(s):.2f}/{s[-1]:.2f} s")
    ratios = sorted(b / a for a, b in zip(walls["A"], walls["B"], strict=True))
    print(
        f"B/A per round: {ratios[0]:.3f}/{statistics.median(ratios):.3f}/{ratios[-1]:.3f}; "
        f"load average {min(loads):.2f}-{max(loads):.2f}"
    )


if __name__ == "__main__":
    main()
