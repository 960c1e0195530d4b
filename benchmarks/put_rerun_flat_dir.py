#!/usr/bin/env python3
"""A rerun of a put of one flat directory the resume cache answers for, two
builds of `wh` (A/B).

The cache only looks at a directory whose files average 32 KiB or more, so
the directory is ``--counts`` tiny files (as benchmarks/put_flat_dir.py
makes them) and one sparse file of zeros bringing the mean to 32 KiB: the
first put reads it (its blocks are one block stored once), a rerun finds
every file in the cache and reads none. For each count and round, each
build in turn (the order alternating round by round): a fresh ``WH_HOME``
and cache, a first put (untimed), then a rerun whose peak resident size
(``wait4``) is taken, then another timed. Prints the peaks, the rerun wall
times and the load average.

    python benchmarks/put_rerun_flat_dir.py --a A/wh --b .venv/bin/wh \\
        --work /var/tmp/put-rerun --counts 200000 --rounds 2

``--held`` sets ``WH_PUT_HELD_ENTRIES`` (how many of a directory's files a
put holds before it spills them) for both builds. ``--touch N``: after the
first put, N of the tiny files (spread through the directory) are given a
new mtime, so that the reruns read them and take the rest from the cache,
the two merged a file at a time in a directory past the files held.
Standard library only.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from put_bounded import ab_parser, fresh_env, peak_put, timed_put
from put_flat_dir import _flat

MEAN = 32 << 10  # the mean file size from which the resume cache looks at a directory


def _tree(root: Path, count: int) -> Path:
    """``count`` tiny files and a sparse file making their mean ``MEAN``."""
    tree = _flat(root, count)
    sparse = tree / "zz sparse"
    if not sparse.exists():
        with open(sparse, "wb") as f:
            f.truncate((count + 1) * MEAN)
    # Files changed within 2 s of a put are read and not remembered (the
    # cache's racy window): the first put is to remember every one.
    newest = max(tree.stat().st_mtime_ns, sparse.stat().st_ctime_ns)
    while time.time_ns() < newest + 3 * 10**9:
        time.sleep(0.1)
    return tree


def _touch(tree: Path, count: int, touch: int) -> None:
    """A new mtime for ``touch`` of the ``count`` tiny files, spread evenly:
    the cache no longer answers for them (their content is the same)."""
    now = time.time()
    # From 1: every fifth file, from 0, is empty.
    for i in range(1, count, max(1, count // touch) if touch else count + 1):
        os.utime(tree / f"f{i:08d}", (now, now))


def main() -> None:
    ap = ab_parser(__doc__, rounds=2, work="where the trees and homes go")
    ap.add_argument("--counts", default="200000", help="tiny files of the directory")
    ap.add_argument("--held", type=int, help="WH_PUT_HELD_ENTRIES for both builds")
    ap.add_argument("--touch", type=int, default=0, help="files the reruns read again")
    args = ap.parse_args()
    builds = {"A": args.a, "B": args.b}
    for count in (int(c) for c in args.counts.split(",")):
        tree = _tree(args.work / f"rerun{count}", count)
        peaks: dict[str, list[int]] = {"A": [], "B": []}
        walls: dict[str, list[float]] = {"A": [], "B": []}
        loads: list[float] = []
        reruns: set[str] = set()
        for r in range(args.rounds):
            for label in ("A", "B") if r % 2 == 0 else ("B", "A"):
                env = fresh_env(args.work / "home", args.work / "cache")
                if args.held:
                    env["WH_PUT_HELD_ENTRIES"] = str(args.held)
                wh = builds[label]
                _, first = timed_put(wh, tree, env)
                _touch(tree, count, args.touch)
                peaks[label].append(peak_put(wh, tree, env))
                wall, again = timed_put(wh, tree, env)
                # The files read again are stored in blocks of their own: a
                # rerun's PDH is another, but every rerun's the same.
                reruns.add(again)
                if (not args.touch and again != first) or len(reruns) > 1:
                    raise SystemExit(f"{label}: a rerun stored {again}, the first put {first}")
                walls[label].append(wall)
                loads.append(os.getloadavg()[0])
        for label in ("A", "B"):
            mib = ", ".join(f"{p / 2**20:.1f}" for p in peaks[label])
            secs = ", ".join(f"{w:.2f}" for w in walls[label])
            print(f"{count} files, {label}: rerun peak RSS {mib} MiB; rerun wall {secs} s")
        print(f"{count} files: load average (1 min) {min(loads):.2f}-{max(loads):.2f}")


if __name__ == "__main__":
    main()
