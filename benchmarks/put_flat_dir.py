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

import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from put_bounded import ab_parser, fresh_env, peak_put, print_walls, timed_put


def _env(home: Path) -> dict[str, str]:
    """A fresh home, its resume cache inside it."""
    return fresh_env(home, home / "cache")


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


def main() -> None:
    ap = ab_parser(__doc__, rounds=6, work="where the trees and homes go")
    ap.add_argument("--counts", default="200000,1000000", help="files of the memory runs")
    ap.add_argument("--speed-count", type=int, default=100_000)
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
                peak = peak_put(wh, tree, _env(opts.work / f"home-{name}"))
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
            wall, pdh = timed_put(builds[name], tree, _env(opts.work / f"home-{name}"))
            walls[name].append(wall)
            pdhs.add(pdh)
            print(f"speed {name} round {r}: {wall:.2f} s {pdh}", flush=True)
    if len(pdhs) != 1:
        raise SystemExit(f"the builds stored different collections: {sorted(pdhs)}")
    print_walls(walls, loads)


if __name__ == "__main__":
    main()
