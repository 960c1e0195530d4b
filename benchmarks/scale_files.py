#!/usr/bin/env python3
"""Memory against the file count: put, list and get of N tiny files, one build.

For each of ``--counts`` (e.g. 100,000, 1,000,000 and 10,000,000), a tree
of that many tiny files, a thousand to a directory (a few bytes each, every
fifth empty; made under ``--work`` and kept for the next run), goes through:

* ``wh put --json TREE`` (a fresh ``WH_HOME``);
* ``wh ls PDH`` (its lines counted);
* ``wh get --no-write PDH`` (every block read and checked, nothing written);
* ``wh get PDH OUT``, after the tree is deleted when ``--drop-tree`` says so
  (ten million files twice may not fit the file system's inodes); then the
  files written are counted and a sample of them compared byte for byte.

Each command's wall time and peak resident size (``wait4``) are printed;
a command whose memory does not grow with the file count peaks at nearly
the same size for every count.

    python benchmarks/scale_files.py --wh .venv/bin/wh --work /var/tmp/scale \\
        --counts 100000,1000000,10000000 --drop-tree 10000000

Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from put_bounded import fresh_env, tiny_tree


def content(i: int) -> bytes:
    """File ``i``'s bytes, as ``tiny_tree`` writes them."""
    return b"" if i % 5 == 0 else b"%x\n" % i


def rel(i: int) -> str:
    return f"d{i // 1000:04d}/f{i:06d}"


def timed(cmd: list[str], env: dict[str, str], stdout: int | None = None) -> tuple[float, int, int]:
    """Wall seconds, peak resident bytes and the exit code of ``cmd``; its
    standard output goes to ``stdout`` (a descriptor) or nowhere."""
    out = os.open(os.devnull, os.O_WRONLY) if stdout is None else stdout
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.dup2(out, 1)
        os.execve(cmd[0], cmd, env)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    if stdout is None:
        os.close(out)
    return wall, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status)


def check(code: int, what: str) -> None:
    if code:
        raise SystemExit(f"{what} failed (exit {code})")


def run_count(wh: str, work: Path, count: int, drop_tree: bool) -> dict[str, object]:
    tree = tiny_tree(work / f"tree-{count}", count)
    env = fresh_env(work / f"home-{count}", work / f"cache-{count}")
    row: dict[str, object] = {"files": count}
    listing = work / f"put-{count}.json"
    with open(listing, "wb") as f:
        wall, peak, code = timed([wh, "put", "--no-progress", "--json", str(tree)], env, f.fileno())
    check(code, "put")
    pdh = json.loads(listing.read_text())["pdh"]
    row["put"] = (wall, peak)
    lines = work / f"ls-{count}.txt"
    with open(lines, "wb") as f:
        wall, peak, code = timed([wh, "ls", pdh], env, f.fileno())
    check(code, "ls")
    with open(lines, "rb") as f:
        listed = sum(1 for _ in f)
    lines.unlink()
    if listed != count:
        raise SystemExit(f"wh ls listed {listed} lines, not {count}")
    row["ls"] = (wall, peak)
    wall, peak, code = timed([wh, "get", "--no-write", pdh], env)
    check(code, "get --no-write")
    row["get --no-write"] = (wall, peak)
    if drop_tree:
        shutil.rmtree(tree)
    out = work / f"out-{count}"
    shutil.rmtree(out, ignore_errors=True)
    wall, peak, code = timed([wh, "get", pdh, str(out)], env)
    check(code, "get")
    row["get"] = (wall, peak)
    written = sum(len(files) for _, _, files in os.walk(out))
    if written != count:
        raise SystemExit(f"wh get wrote {written} files, not {count}")
    for i in random.Random(count).sample(range(count), min(count, 2000)):
        if (out / rel(i)).read_bytes() != content(i):
            raise SystemExit(f"{rel(i)} differs after the get")
    shutil.rmtree(out)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wh", required=True, help="the `wh` to run")
    ap.add_argument("--work", type=Path, required=True, help="where the trees and homes go")
    ap.add_argument("--counts", default="100000,1000000", help="file counts, comma-separated")
    ap.add_argument(
        "--drop-tree",
        default="",
        help="counts whose tree is deleted before the get (to free the inodes it holds)",
    )
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    drop = {int(c) for c in args.drop_tree.split(",") if c}
    args.work.mkdir(parents=True, exist_ok=True)
    ops = ("put", "ls", "get --no-write", "get")
    print("files      " + "".join(f"{op:>26}" for op in ops))
    for count in counts:
        row = run_count(args.wh, args.work, count, count in drop)
        cells = []
        for op in ops:
            wall, peak = row[op]  # type: ignore[misc]
            cells.append(f"{wall:9.1f} s {peak / 2**20:7.1f} MiB")
        print(f"{count:<11,d}" + "".join(f"{c:>26}" for c in cells), flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
