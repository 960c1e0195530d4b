#!/usr/bin/env python3
"""`wh get` of one stored tree by several builds of wh (and restic restore), alternated.

Generates a tree of ``benchmarks/ingest.py`` (``--tree``, default
``small100k``: 100,000 files of 1-8 KB), stores it once with ``wh put``
(untimed; every build reads the same warehouse) and, if restic is installed
and ``--restic`` is given, backs it up once with restic. Then, round after
round, each variant gets the tree into a fresh directory under the work
directory: every build of wh (``--src NAME=DIR`` runs this wh with
``PYTHONPATH=DIR``, so DIR's ``warehouse`` package is the one imported;
the name ``this`` is always there and runs this checkout) and restic
restore, in the same order each round. Before each timed command the
script syncs and drops every file of the warehouse and of the restic
repository from the page cache (``posix_fadvise(DONTNEED)``); after it, the
output is checked (every file's size, a sample's MD5) and deleted, untimed.

Prints each round's seconds and peak resident MB (``wait4``), the load
average before each round, the medians and each variant's median over
the first one's.

    .venv/bin/python benchmarks/get_ab.py --workdir /tmp/get-ab --rounds 3 \\
        --src main=../main/src --restic
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

import ingest  # the tree generator, the timed runner and the checks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--workdir", type=Path, default=Path("/tmp/get-ab"))
    p.add_argument("--tree", choices=ingest.TREES, default="small100k")
    p.add_argument("--seed", type=int, default=20240601)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--src", action="append", default=[], help="NAME=DIR: a build to compare")
    p.add_argument("--restic", action="store_true", help="restic restore in each round too")
    p.add_argument("--wh", default=str(Path(sys.executable).with_name("wh")))
    args = p.parse_args(argv)

    log = ingest.Log(False)
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    spec = ingest.plan(args.tree, args.seed, 1.0)
    tree = ingest.ensure_tree(work, spec, log, args.tree)
    original = ingest.listing(tree)
    sample = ingest.sample_files(spec)
    digests = {rel: ingest.md5_file(tree / rel) for rel in sample}

    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("WH_", "RESTIC_"))}
    base_env.pop("PYTHONPATH", None)
    home = work / f"wh-home-{args.tree}"
    wh_env = {**base_env, "WH_HOME": str(home)}
    marker = work / f"pdh-{args.tree}"
    if not marker.is_file():
        shutil.rmtree(home, ignore_errors=True)
        _, out = ingest.run([args.wh, "put", "--no-progress", str(tree)], wh_env)
        marker.write_text(out.strip())
    pdh = marker.read_text().strip()

    variants: list[tuple[str, list[str], dict[str, str]]] = [
        ("this", [args.wh, "get", pdh], wh_env)
    ]
    for item in args.src:
        name, _, src = item.partition("=")
        env = {**wh_env, "PYTHONPATH": str(Path(src).resolve())}
        variants.append((name, [args.wh, "get", pdh], env))
    caches = [home]
    restic = shutil.which("restic")
    if args.restic and restic is not None:
        repo = work / f"restic-repo-{args.tree}"
        r_env = {
            **base_env,
            "RESTIC_REPOSITORY": str(repo),
            "RESTIC_PASSWORD": "benchmark",
            "RESTIC_CACHE_DIR": str(work / "restic-cache"),
        }
        if not (repo / "config").is_file():
            shutil.rmtree(repo, ignore_errors=True)
            ingest.run([restic, "init"], r_env)
            ingest.run([restic, "backup", "--quiet", tree.name], r_env, cwd=tree.parent)
        variants.append(("restic", [restic, "restore", "latest", "--quiet", "--target"], r_env))
        caches.append(repo)
    ingest.CACHE_MODE = "drop"
    ingest.CACHE_PATHS = caches

    times: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    peaks: dict[str, list[int]] = {name: [] for name, _, _ in variants}
    for number in range(1, args.rounds + 1):
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        cells = []
        for name, command, env in variants:
            out = work / f"out-{name}"
            shutil.rmtree(out, ignore_errors=True)
            seconds, _ = ingest.run([*command, str(out)], env)
            times[name].append(seconds)
            peaks[name].append(ingest.LAST_PEAK[0])
            ingest.verify_restore(out, original, digests, name)
            shutil.rmtree(out)
            cells.append(f"{name} {seconds:6.2f} s {ingest.LAST_PEAK[0] / 1e6:5.0f} MB")
        print(f"round {number} (load {load}): " + " | ".join(cells), flush=True)
    print(f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    first = variants[0][0]
    median_first = statistics.median(times[first])
    for name, _, _ in variants:
        median = statistics.median(times[name])
        print(
            f"{name:>8}: median {median:6.2f} s (min {min(times[name]):.2f}, "
            f"max {max(times[name]):.2f}), peak {max(peaks[name]) / 1e6:.0f} MB; "
            f"{first} / {name} = {median_first / median:.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
