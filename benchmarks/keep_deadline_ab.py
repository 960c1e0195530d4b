"""A/B of the block client's HTTP layer (remote/blockhttp.py) of two source
trees: PUT and GET of 64 MiB blocks against one real keep server.

    .venv/bin/python benchmarks/keep_deadline_ab.py --base OLD/src --new NEW/src \
        [--rounds 10] [--blocks 2] [--passes 4]

Each round times, for each version in turn (old, new, then new, old, ...),
``passes`` times a PUT and a GET of each of ``blocks`` random 64 MiB blocks
through that version's ``BlockHttp`` on one connection; the load average is
printed before each round. Both load in this process from their own files;
the keep server is this environment's ``wh keepd`` on 127.0.0.1. A
measurement: exit 0 unless something failed.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

WH = str(Path(sys.executable).with_name("wh"))


def load(src: str, name: str) -> ModuleType:
    """``warehouse/remote/blockhttp.py`` of the tree ``src``, as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, f"{src}/warehouse/remote/blockhttp.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def start_keepd(volume: Path) -> tuple[subprocess.Popen[str], str]:
    volume.mkdir(parents=True)
    proc = subprocess.Popen(
        [WH, "keepd", "--volume", str(volume), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("keepd listening on "):
        proc.kill()
        raise SystemExit(f"keepd did not start: {line!r}")
    return proc, line.removeprefix("keepd listening on ")


def one_pass(module: ModuleType, url: str, blocks: list[bytes], passes: int) -> float:
    http = module.BlockHttp("benchmark-token", 60.0)
    start = time.perf_counter()
    try:
        for _ in range(passes):
            for data in blocks:
                put = http.request("PUT", f"{url}/{hashlib.md5(data).hexdigest()}", data)
                assert put.status == 200, put
                got = http.request("GET", f"{url}/{put.text.strip()}", limit=len(data))
                assert got.status == 200 and len(got.body) == len(data), got.status
    finally:
        http.close()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the old tree's src directory")
    parser.add_argument("--new", required=True, help="the new tree's src directory")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--passes", type=int, default=4)
    args = parser.parse_args()
    versions = {"old": load(args.base, "blockhttp_old"), "new": load(args.new, "blockhttp_new")}
    blocks = [os.urandom(64 << 20) for _ in range(args.blocks)]
    mib = args.blocks * args.passes * 2 * 64
    times: dict[str, list[float]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory(prefix="keep-ab-") as tmp:
        proc, url = start_keepd(Path(tmp) / "volume")
        try:
            for r in range(args.rounds):
                order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
                load_avg = os.getloadavg()[0]
                for name in order:
                    times[name].append(one_pass(versions[name], url, blocks, args.passes))
                shown = ", ".join(f"{n} {times[n][-1]:.2f} s" for n in order)
                print(f"round {r + 1} (load {load_avg:.1f}): {shown}", flush=True)
        finally:
            proc.terminate()
            proc.wait()
    for name in ("old", "new"):
        median = statistics.median(times[name])
        print(f"{name}: median {median:.2f} s for {mib} MiB moved ({mib / median:.0f} MiB/s)")
    ratio = statistics.median(times["new"]) / statistics.median(times["old"])
    print(f"new / old (median time): {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
