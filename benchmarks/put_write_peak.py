#!/usr/bin/env python3
"""The peak memory of a put's write stage alone, two source trees alternated (A/B).

``wh put`` peaks either while it reads and packs the files or while it
records the collection (the manifest text, stored a block at a time, and
the listing); for one flat directory of a million tiny files the two are
close, so the peak of the whole put hides a change to either. This runs
``write_tree`` into a spool (what ``wh put`` does before recording) in a
child process with ``PYTHONPATH`` set to each build's ``src``, a fresh
warehouse home each time, and reports the child's peak resident size
(``wait4``), its wall time and the spool's PDH (which must agree).

    python benchmarks/put_write_peak.py --tree /var/tmp/put-flat/flat1000000 \\
        --src A=MAIN_EXPORT/src --src B=src --work /var/tmp/write-peak --rounds 2

Standard library only (the child imports the build's ``warehouse``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

_CHILD = """
import sys
from pathlib import Path
from warehouse.collection.scan import LazyTree
from warehouse.collection.scratch import scratch_dir
from warehouse.collection.spool import Spool
from warehouse.collection.writer import write_tree
from warehouse.embedded import EmbeddedWarehouse
home = Path(sys.argv[1])
with EmbeddedWarehouse(home) as wh, Spool(scratch_dir(home)) as spool:
    write_tree(wh.store, LazyTree([sys.argv[2]]), spool=spool, workers=wh.writers)
    print(spool.pdh, spool.file_count)
"""


def run(src: str, tree: Path, home: Path) -> tuple[int, float, str]:
    """Peak resident bytes, wall seconds and output of one write stage."""
    shutil.rmtree(home, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": src, "WH_HOME": str(home)}
    env.pop("WH_URL", None)
    read, write = os.pipe()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.dup2(write, 1)
        os.execve(sys.executable, [sys.executable, "-c", _CHILD, str(home), str(tree)], env)
    os.close(write)
    with os.fdopen(read) as out:
        said = out.read().strip()
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"the write stage of {src} failed")
    return usage.ru_maxrss * 1024, wall, said


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", type=Path, required=True, help="the directory to put")
    ap.add_argument("--src", action="append", required=True, help="NAME=SRC_DIR, repeatable")
    ap.add_argument("--work", type=Path, required=True, help="where the homes go")
    ap.add_argument("--rounds", type=int, default=2)
    opts = ap.parse_args()
    builds = [tuple(s.split("=", 1)) for s in opts.src]
    outputs: set[str] = set()
    for r in range(opts.rounds):
        for name, src in builds if r % 2 == 0 else reversed(builds):
            load = os.getloadavg()[0]
            peak, wall, said = run(str(Path(src).resolve()), opts.tree, opts.work / f"home-{name}")
            outputs.add(said)
            print(
                f"round {r} {name}: {peak / 2**20:.1f} MiB, {wall:.1f} s, "
                f"load {load:.2f}-{os.getloadavg()[0]:.2f}  {said}",
                flush=True,
            )
    if len(outputs) != 1:
        raise SystemExit(f"the builds wrote different collections: {sorted(outputs)}")


if __name__ == "__main__":
    main()
