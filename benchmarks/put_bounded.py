#!/usr/bin/env python3
"""A put's memory and speed, two builds of `wh` alternated (A/B).

Memory: the peak resident size (``wait4``) of ``wh put --no-progress`` of
20,000 and of 200,000 tiny files (a few bytes each, 1,000 to a directory,
made under ``--scratch``, tmpfs where there is one), each build with a fresh
``WH_HOME``; a put whose memory does not grow with the file count peaks at
nearly the same size for both.

Speed: the wall time of ``wh put TREE --json`` (as ``benchmarks/ingest.py``
runs it) of the ``small100k`` tree of ingest.py (100,000 files of 1-8 KB),
read into the page cache before each run, a fresh ``WH_HOME`` and resume
cache each time, the builds alternating round by round; prints each build's
min/median/max, the per-round ratio of B to A and the load average seen.

    python benchmarks/put_bounded.py --a MAIN/.venv/bin/wh --b .venv/bin/wh \\
        --work /var/tmp/put-bounded --scratch /dev/shm/put-bounded --rounds 14

Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ingest  # the trees of the ingest benchmark


def tiny_tree(root: Path, count: int) -> Path:
    """``count`` tiny files, a thousand a directory (kept if already there)."""
    if root.is_dir() and sum(len(f) for _, _, f in os.walk(root)) == count:
        return root
    shutil.rmtree(root, ignore_errors=True)
    for i in range(count):
        d = root / f"d{i // 1000:04d}"
        if i % 1000 == 0:
            d.mkdir(parents=True)
        (d / f"f{i:06d}").write_bytes(b"" if i % 5 == 0 else b"%x\n" % i)
    return root


def fresh_env(home: Path, cache: Path) -> dict[str, str]:
    """The environment of a local `wh` with a fresh ``home`` and resume ``cache``."""
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "WH_HOME": str(home), "XDG_CACHE_HOME": str(cache)}
    env.pop("WH_URL", None)
    return env


def timed_put(wh: str, tree: Path, env: dict[str, str]) -> tuple[float, str]:
    """Wall seconds and PDH of ``wh put TREE --json`` in ``env``."""
    subprocess.run([wh, "name", "ls"], env=env, capture_output=True, check=True)  # untimed
    t0 = time.perf_counter()
    done = subprocess.run([wh, "put", str(tree), "--json"], env=env, capture_output=True)
    wall = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"{wh} put failed: {done.stderr.decode()[-500:]}")
    return wall, str(json.loads(done.stdout)["pdh"])


def peak_put(wh: str, tree: Path, env: dict[str, str]) -> int:
    """Peak resident bytes of ``wh put --no-progress TREE`` in ``env``, read
    from wait4 of the child itself."""
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        os.execve(wh, [wh, "put", "--no-progress", str(tree)], env)
    _, status, usage = os.wait4(pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{wh} put of {tree} failed")
    return usage.ru_maxrss * 1024


def print_walls(walls: dict[str, list[float]], loads: list[float]) -> None:
    """Each build's min/median/max, the per-round ratio of B to A, the load seen."""
    for name, ws in walls.items():
        s = sorted(ws)
        print(f"{name}: min/median/max {s[0]:.2f}/{statistics.median(s):.2f}/{s[-1]:.2f} s")
    ratios = sorted(b / a for a, b in zip(walls["A"], walls["B"], strict=True))
    print(
        f"B/A per round: {ratios[0]:.3f}/{statistics.median(ratios):.3f}/{ratios[-1]:.3f}; "
        f"load average {min(loads):.2f}-{max(loads):.2f}"
    )


def ab_parser(doc: str, *, rounds: int, work: str) -> argparse.ArgumentParser:
    """The options of every put A/B here: the two builds' ``wh``, where the
    trees go (``work``: what of them) and how many rounds by default; each
    script adds its own."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="the `wh` of build A (before, e.g. main)")
    ap.add_argument("--b", required=True, help="the `wh` of build B (this branch)")
    ap.add_argument("--work", type=Path, required=True, help=work)
    ap.add_argument("--rounds", type=int, default=rounds)
    return ap


def main() -> None:
    ap = ab_parser(__doc__, rounds=8, work="where the 100k tree goes")
    ap.add_argument("--scratch", type=Path, required=True, help="tiny trees and homes (tmpfs)")
    ap.add_argument("--skip-speed", action="store_true")
    opts = ap.parse_args()
    builds = {"A": opts.a, "B": opts.b}
    opts.work.mkdir(parents=True, exist_ok=True)
    opts.scratch.mkdir(parents=True, exist_ok=True)

    small = tiny_tree(opts.scratch / "t20k", 20_000)
    large = tiny_tree(opts.scratch / "t200k", 200_000)
    for name, wh in builds.items():
        for tree in (small, large, small, large):
            env = fresh_env(opts.scratch / f"home-{name}", opts.scratch / "cache")
            peak = peak_put(wh, tree, env)
            print(f"memory {name} {tree.name}: {peak / 2**20:.1f} MiB", flush=True)

    if opts.skip_speed:
        return
    spec = ingest.plan("small100k", 1, 1.0)
    tree = ingest.ensure_tree(opts.work, spec, ingest.Log(True), "small100k")
    walls: dict[str, list[float]] = {n: [] for n in builds}
    loads: list[float] = []
    for r in range(opts.rounds):
        for name in builds if r % 2 == 0 else reversed(list(builds)):
            for dirpath, _, files in os.walk(tree):  # warm, alike for both
                for f in files:
                    with open(os.path.join(dirpath, f), "rb") as fh:
                        fh.read()
            loads.append(os.getloadavg()[0])
            env = fresh_env(opts.work / f"home-{name}", opts.work / "cache")
            wall, pdh = timed_put(builds[name], tree, env)
            walls[name].append(wall)
            print(f"speed {name} round {r}: {wall:.2f} s {pdh}", flush=True)
    print_walls(walls, loads)


if __name__ == "__main__":
    main()
