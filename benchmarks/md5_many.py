"""MD5 of a query's worth of blocks: the native multi-buffer kernel against hashlib.

    .venv/bin/python benchmarks/md5_many.py [--blocks 224] [--size 150000] [--runs 9]

Q6 at TPC-H SF 1 in 8 partitions reads about 224 column-chunk blocks of
about 150 KB (34 MB). Times, in one process, medians of ``--runs``: hashlib
one block after another, on two threads (as the steps check whole blocks),
and ``md5_many`` in one call, in calls of eight (the checking filesystem's
batches: one column chunk of each of 8 partitions), and on two threads.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from warehouse.native.md5 import lanes, md5_many


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=224)
    ap.add_argument("--size", type=int, default=150_000)
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    blocks = [os.urandom(args.size + 997 * (i % 13)) for i in range(args.blocks)]
    mb = sum(map(len, blocks)) / 1e6
    pool = ThreadPoolExecutor(2)
    ways: dict[str, Callable[[], object]] = {
        "hashlib, 1 thread": lambda: [hashlib.md5(b).digest() for b in blocks],
        "hashlib, 2 threads": lambda: list(pool.map(lambda b: hashlib.md5(b).digest(), blocks)),
        f"md5_many, one call ({lanes()} lanes)": lambda: md5_many(blocks),
        "md5_many, calls of 8": lambda: [
            md5_many(blocks[i : i + 8]) for i in range(0, len(blocks), 8)
        ],
        "md5_many, 2 threads": lambda: list(pool.map(md5_many, [blocks[::2], blocks[1::2]])),
    }
    want = [hashlib.md5(b).digest() for b in blocks]
    assert md5_many(blocks) == want
    print(f"{len(blocks)} blocks, {mb:.1f} MB; load {os.getloadavg()[0]:.2f}")
    for name, way in ways.items():
        times = []
        for _ in range(args.runs):
            t, c = time.perf_counter(), time.process_time()
            way()
            times.append((time.perf_counter() - t, time.process_time() - c))
        wall = statistics.median(t for t, _ in times)
        cpu = statistics.median(c for _, c in times)
        print(f"{name:32s} {wall * 1e3:6.1f} ms  {cpu * 1e3:6.1f} CPU-ms  {mb / wall:6.0f} MB/s")


if __name__ == "__main__":
    main()
