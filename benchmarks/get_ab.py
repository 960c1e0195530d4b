#!/usr/bin/env python3
"""`wh get` of one stored tree by several builds of wh (and restic restore), alternated.

Generates a tree of ``benchmarks/ingest.py`` (``--tree``, default
``small100k``: 100,000 files of 1-8 KB), stores it once with ``wh put``
(untimed; every build reads the same warehouse) and, with ``--restic`` and
``--borg`` (when installed), backs it up once with each (restic's
repository encrypted, borg's not, neither compressed). Then, round after
round, each variant gets the tree into a fresh directory under the work
directory, each round starting with the next variant: every build of wh
(``--src NAME=DIR`` runs this wh with ``PYTHONPATH=DIR``, so DIR's
``warehouse`` package is the one imported; the name ``this`` is always
there and runs this checkout), restic restore and borg extract. Before each timed command the
script syncs and drops every file of the warehouse and of the other
repositories from the page cache (``posix_fadvise(DONTNEED)``); after it, the
output is checked (every file's size, a sample's MD5), untimed. Outputs are
deleted only at the end: on ext4 without a journal, creating files just
after many were deleted is several times slower (the inode allocator skips,
one by one, inodes freed in the last minute), which made whichever variant
came after a deletion the slow one.

Prints each round's seconds, CPU seconds (user, system) and peak resident
MB (``wait4``), the load
average before each round, the medians and each variant's median over
the first one's.

    .venv/bin/python benchmarks/get_ab.py --workdir /tmp/get-ab --rounds 3 \\
        --src main=../main/src --restic --borg
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
from pathlib import Path

import ingest  # the tree generator, the timed runner and the checks

INSIDE = "<run inside the output directory>"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--workdir", type=Path, default=Path("/tmp/get-ab"))
    p.add_argument("--tree", choices=ingest.TREES, default="small100k")
    p.add_argument("--seed", type=int, default=20240601)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--src", action="append", default=[], help="NAME=DIR: a build to compare")
    p.add_argument("--restic", action="store_true", help="restic restore in each round too")
    p.add_argument("--borg", action="store_true", help="borg extract in each round too")
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

    # name, the command (the output directory is added at its end; None: the
    # command runs inside it), its environment
    variants: list[tuple[str, list[str], dict[str, str]]] = [
        ("this", [args.wh, "get", pdh], wh_env)
    ]
    for item in args.src:
        name, _, src = item.partition("=")
        env = {**wh_env, "PYTHONPATH": str(Path(src).resolve())}
        variants.append((name, [args.wh, "get", pdh], env))
    caches = [home]
    borg = shutil.which("borg")
    if args.borg and borg is not None:
        b_repo = work / f"borg-repo-{args.tree}"
        b_env = {
            **base_env,
            "BORG_BASE_DIR": str(work / "borg-base"),
            "BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK": "yes",
            "BORG_RELOCATED_REPO_ACCESS_IS_OK": "yes",
        }
        if not (b_repo / "config").is_file():
            shutil.rmtree(b_repo, ignore_errors=True)
            ingest.run([borg, "init", "--encryption=none", str(b_repo)], b_env)
            create = [borg, "create", "--compression", "none", f"{b_repo}::a", tree.name]
            ingest.run(create, b_env, cwd=tree.parent)
        variants.append(("borg", [borg, "extract", f"{b_repo}::a", INSIDE], b_env))
        caches.append(b_repo)
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
            # As benchmarks/ingest.py: repository v2, compression off.
            ingest.run([restic, "init", "--repository-version", "2"], r_env)
            backup = [restic, "backup", "--compression", "off", "--quiet", tree.name]
            ingest.run(backup, r_env, cwd=tree.parent)
        variants.append(("restic", [restic, "restore", "latest", "--quiet", "--target"], r_env))
        caches.append(repo)
    ingest.CACHE_MODE = "drop"
    ingest.CACHE_PATHS = caches

    outputs = work / "outputs"
    shutil.rmtree(outputs, ignore_errors=True)
    outputs.mkdir()
    times: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    peaks: dict[str, list[int]] = {name: [] for name, _, _ in variants}
    for number in range(1, args.rounds + 1):
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        cells = []
        # Each round starts with the next variant: none always follows the same one.
        shift = (number - 1) % len(variants)
        for name, command, env in variants[shift:] + variants[:shift]:
            out = outputs / f"{name}-{number}"
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            if command[-1] == INSIDE:
                out.mkdir()
                seconds, _ = ingest.run(command[:-1], env, cwd=out)
            else:
                seconds, _ = ingest.run([*command, str(out)], env)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
            times[name].append(seconds)
            peaks[name].append(ingest.LAST_PEAK[0])
            ingest.verify_restore(out, original, digests, name)
            cells.append(
                f"{name} {seconds:6.2f} s (user {user:.1f}, sys {system:.1f}) "
                f"{ingest.LAST_PEAK[0] / 1e6:4.0f} MB"
            )
        print(f"round {number} (load {load}): " + " | ".join(cells), flush=True)
    print(f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    shutil.rmtree(outputs)
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
