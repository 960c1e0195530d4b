"""`wh put` of an unchanged tree again: with the resume cache and with --no-cache.

A tree of large files and one of many small files are stored once, then put
again alternately with and without the cache (so the machine's load falls on
both alike). The page cache is left alone (the machine may be shared), so
the files read again come from memory: --no-cache's times are a lower bound
of what a tree bigger than memory costs.

    .venv/bin/python benchmarks/put_cache.py [--gib 2] [--small 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

WH = str(Path(sys.executable).with_name("wh"))


def put(tree: Path, env: dict[str, str], *extra: str) -> tuple[float, dict[str, object]]:
    """CPU seconds (user + system) of one `wh put`: on a loaded machine the
    wall time is mostly waiting for a core; the CPU time is the work done."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = [WH, "put", "--json", *extra, str(tree)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--small", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {**os.environ, "WH_HOME": str(root / "home"), "XDG_CACHE_HOME": str(root / "xdg")}
        env.pop("WH_URL", None)
        big = root / "big"
        big.mkdir()
        chunk = os.urandom(1 << 20)
        for i in range(8):
            with open(big / f"f{i}", "wb") as f:
                for _ in range(int(args.gib * 1024 / 8)):
                    f.write(chunk)
        small = root / "small"
        for i in range(args.small):
            d = small / f"d{i // 1000}"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"s{i}").write_bytes(os.urandom(2048))
        for name, tree in (("big", big), ("small", small)):
            first, out = put(tree, env)
            size = f"{out['bytes']} bytes, {out['files']} files"
            print(f"{name}: first put {first:.2f} CPU s, {size}")
            cached: list[float] = []
            uncached: list[float] = []
            for _ in range(args.rounds):
                t, out = put(tree, env)
                assert out["bytes_read"] == 0, out
                cached.append(t)
                t, out = put(tree, env, "--no-cache")
                uncached.append(t)
            print(
                f"{name}: again with the cache {min(cached):.2f}-{max(cached):.2f} CPU s, "
                f"--no-cache {min(uncached):.2f}-{max(uncached):.2f} CPU s ({args.rounds} rounds)"
            )


if __name__ == "__main__":
    main()
