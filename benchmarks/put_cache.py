"""`wh put` and its resume cache: first puts and puts again, with and without it.

Two parts, each optionally A/B against another checkout's code (``--other
SRC``: its ``src`` folder, put first on ``PYTHONPATH`` of the same ``wh``),
the two codes alternating so that the machine's load falls on both alike:

* ``--gib`` / ``--small``: a tree of 8 random files and one of many small
  files are stored once, then put again alternately with the cache and with
  ``--no-cache``;
* ``--first N[,N...]``: a first put of N files of 1-8 KB (100 folders),
  into a fresh warehouse each time, with the cache (empty) and with
  ``--no-cache``: what the cache costs a first put.

Each figure is the wall time and the CPU time (user + system) of the `wh`
process; the load average is printed before each part. The page cache is
left alone (the machine may be shared): files read again come from memory,
so --no-cache's times are a lower bound of what a tree bigger than memory
costs; ``--drop`` drops the tree from it before each put instead
(``posix_fadvise(DONTNEED)`` on every file). Trees are made under ``--dir``
(default: a temporary folder in /tmp).

    .venv/bin/python benchmarks/put_cache.py [--gib 1] [--small 10000] [--rounds 3]
    .venv/bin/python benchmarks/put_cache.py --gib 0 --small 0 --first 100000 \\
        --other ../main/src --dir /dev/shm
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WH = str(Path(sys.executable).with_name("wh"))


DROP = [False]  # --drop: the tree leaves the page cache before each put


def drop(tree: Path) -> None:
    """posix_fadvise(DONTNEED) on every file of ``tree`` (after a sync)."""
    os.sync()
    for dirpath, _, names in os.walk(tree):
        for name in names:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def put(tree: Path, env: dict[str, str], *extra: str) -> tuple[float, float, dict[str, object]]:
    """Wall and CPU seconds (user + system) of one `wh put`, and its JSON."""
    if DROP[0]:
        drop(tree)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = [WH, "put", "--json", "--no-progress", *extra, str(tree)]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"wh put failed: {done.stderr}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(done.stdout)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def span(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{min(values):.2f}-{statistics.median(values):.2f}-{max(values):.2f}"


def small_tree(root: Path, count: int, sizes: tuple[int, int], seed: int) -> Path:
    rng = random.Random(seed)
    data = rng.randbytes(sizes[1] * 4)
    for i in range(count):
        d = root / f"d{i % 100:02d}"
        if i < 100:
            d.mkdir(parents=True)
        n = rng.randint(*sizes)
        off = rng.randrange(len(data) - n)
        (d / f"f{i:07d}").write_bytes(i.to_bytes(4, "big") + data[off : off + n - 4])
    return root


class Codes:
    """The environments of the codes compared: this checkout's, and another's."""

    def __init__(self, base: Path, other: str | None) -> None:
        self.base = base
        self.names = ["this"] + (["other"] if other else [])
        self.other = other

    def env(self, code: str, tag: str) -> dict[str, str]:
        where = self.base / code / tag
        env = {**os.environ, "WH_HOME": str(where / "home"), "XDG_CACHE_HOME": str(where / "xdg")}
        env.pop("WH_URL", None)
        env.pop("PYTHONPATH", None)
        if code == "other":
            assert self.other is not None
            env["PYTHONPATH"] = self.other
        return env

    def clear(self, code: str, tag: str) -> None:
        shutil.rmtree(self.base / code / tag, ignore_errors=True)


def again(codes: Codes, name: str, tree: Path, rounds: int) -> None:
    print(f"{name}: {load()}")
    # A file changed less than RACY_NS before a put is not remembered by it:
    # the tree just made is left to age past that first.
    time.sleep(2.1)  # warehouse.putcache.RACY_NS is 2 s
    for code in codes.names:
        wall, cpu, out = put(tree, codes.env(code, name))
        print(f"  {code}: first put {wall:.2f} s ({cpu:.2f} CPU s), {out['files']} files")
    cached: dict[str, list[tuple[float, float]]] = {c: [] for c in codes.names}
    uncached: dict[str, list[tuple[float, float]]] = {c: [] for c in codes.names}
    for _ in range(rounds):
        for code in codes.names:
            wall, cpu, out = put(tree, codes.env(code, name))
            cached[code].append((wall, cpu))
            wall, cpu, out2 = put(tree, codes.env(code, name), "--no-cache")
            uncached[code].append((wall, cpu))
            assert out["pdh"] == out2["pdh"], (out, out2)
    for code in codes.names:
        c, u = cached[code], uncached[code]
        print(
            f"  {code}: again with the cache {span([w for w, _ in c])} s "
            f"({span([t for _, t in c])} CPU s), --no-cache {span([w for w, _ in u])} s "
            f"({span([t for _, t in u])} CPU s), {rounds} rounds"
        )
    print(f"  {load()}")


def first(codes: Codes, tree: Path, count: int, rounds: int) -> None:
    print(f"first put of {count} files of 1-8 KB: {load()}")
    times: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for code in codes.names:
            for use_cache in (True, False):
                tag = f"first{count}"
                codes.clear(code, tag)
                extra = () if use_cache else ("--no-cache",)
                wall, cpu, _ = put(tree, codes.env(code, tag), *extra)
                times.setdefault((code, use_cache), []).append((wall, cpu))
                codes.clear(code, tag)
    for (code, use_cache), t in times.items():
        how = "cache" if use_cache else "--no-cache"
        walls, cpus = [w for w, _ in t], [c for _, c in t]
        print(f"  {code}, {how}: {span(walls)} s ({span(cpus)} CPU s), {rounds} rounds")
    print(f"  {load()}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0, help="the tree of 8 big files (0: none)")
    ap.add_argument("--small", type=int, default=10_000, help="files of the small tree (0: none)")
    ap.add_argument("--small-size", type=int, default=2048, help="bytes of each small file")
    ap.add_argument("--first", default="", help="first puts of these many files of 1-8 KB")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--other", help="the src folder of the code to compare with")
    ap.add_argument("--dir", type=Path, help="where the trees are made")
    ap.add_argument(
        "--drop", action="store_true", help="drop the tree from the page cache before each put"
    )
    args = ap.parse_args()
    DROP[0] = args.drop
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        codes = Codes(root / "runs", args.other)
        if args.gib:
            big = root / "big"
            big.mkdir()
            chunk = os.urandom(1 << 20)
            for i in range(8):
                with open(big / f"f{i}", "wb") as f:
                    for _ in range(int(args.gib * 1024 / 8)):
                        f.write(chunk)
            again(codes, "big", big, args.rounds)
            shutil.rmtree(big)
        if args.small:
            small = root / "small"
            for i in range(args.small):
                d = small / f"d{i // 1000}"
                d.mkdir(parents=True, exist_ok=True)
                (d / f"s{i}").write_bytes(os.urandom(args.small_size))
            again(
                codes, f"small ({args.small} files of {args.small_size} bytes)", small, args.rounds
            )
            shutil.rmtree(small)
        for count in (int(n) for n in args.first.split(",") if n):
            tree = small_tree(root / f"first{count}", count, (1024, 8192), seed=count)
            first(codes, tree, count, args.rounds)
            shutil.rmtree(tree)


if __name__ == "__main__":
    main()
