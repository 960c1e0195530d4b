#!/usr/bin/env python3
"""Peak memory of gets and listings of 20,000 and 200,000 tiny files, builds alternated.

The tree of ``put_bounded.py`` (tiny files, 1,000 to a directory, under
``--scratch``, tmpfs where there is one) is stored twice in one fresh
``WH_HOME`` by the first build: its first tenth (by the directories'
names) and the whole. Then, round by round, each build runs
``get --no-write PDH``, ``get PDH DEST`` (DEST under ``--scratch``),
``ls PDH``, ``ls --json PDH`` and ``ls PDH/d0000`` of both collections
and ``put --dry-run`` of the tree and of its tenth, under
``MALLOC_ARENA_MAX=2`` as the tests run it; the peak resident size is
``wait4``'s. A build is ``PATH/TO/wh`` or ``PATH/TO/wh=SRC_DIR`` (run with
``PYTHONPATH=SRC_DIR``).

    python benchmarks/get_peaks.py --wh .venv/bin/wh --wh .venv/bin/wh=MAIN/src \\
        --scratch /dev/shm/get-peaks --rounds 2

Standard library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from put_bounded import tiny_tree


def _child_peak(argv: list[str], env: dict[str, str]) -> int:
    """Peak resident bytes of one command (it must succeed), its output dropped;
    a launcher waits for it, so that the peak is the command's own."""
    launch = (
        "import os, sys; pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)\n"
        "    os.execv(sys.argv[1], sys.argv[1:])\n"
        "_, st, ru = os.wait4(pid, 0)\n"
        "print(ru.ru_maxrss * 1024)\n"
        "sys.exit(os.waitstatus_to_exitcode(st))\n"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", launch, *argv], env=env, capture_output=True, check=True
    )
    return int(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--wh", action="append", required=True, help="WH or WH=SRC (repeatable)")
    parser.add_argument("--scratch", type=Path, required=True)
    parser.add_argument("--files", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    builds = [(v, *v.partition("=")[::2]) for v in args.wh]
    tree = tiny_tree(args.scratch / f"tree{args.files}", args.files)
    home = args.scratch / "home"
    shutil.rmtree(home, ignore_errors=True)
    base = {**os.environ, "WH_HOME": str(home), "MALLOC_ARENA_MAX": "2"}
    base.pop("WH_URL", None)
    base.pop("PYTHONPATH", None)
    first = builds[0]
    env0 = dict(base, **({"PYTHONPATH": first[2]} if first[2] else {}))
    tenth = sorted(tree.iterdir())[: len(list(tree.iterdir())) // 10]

    def put(paths: list[Path]) -> str:
        done = subprocess.run(
            [first[1], "put", "--no-progress", *map(str, paths)],
            env=env0,
            capture_output=True,
            check=True,
        )
        return done.stdout.decode().strip()

    pdhs = {"tenth": put(tenth), "whole": put([tree])}
    dest = args.scratch / "out"
    peaks: dict[tuple[str, str, str], list[int]] = {}
    for _ in range(args.rounds):
        for name, wh, src in builds:
            env = dict(base, **({"PYTHONPATH": src} if src else {}))
            for size, pdh in pdhs.items():
                runs = {
                    "get --no-write": ["get", "--no-write", pdh],
                    "get": ["get", pdh, str(dest)],
                    "ls": ["ls", pdh],
                    "ls --json": ["ls", "--json", pdh],
                    "ls PDH/sub": ["ls", f"{pdh}/{tenth[0].name}"],
                    "put --dry-run": [
                        "put",
                        "--dry-run",
                        *(map(str, tenth) if size == "tenth" else [str(tree)]),
                    ],
                }
                for label, argv in runs.items():
                    shutil.rmtree(dest, ignore_errors=True)
                    peaks.setdefault((label, size, name), []).append(_child_peak([wh, *argv], env))
    shutil.rmtree(dest, ignore_errors=True)
    print(f"{args.files:,} files (whole) and a tenth; peak resident MB, each round")
    for (label, size, name), values in peaks.items():
        shown = ", ".join(f"{v / 1e6:.1f}" for v in values)
        print(f"{label:16} {size:6} {name:50.50} {shown}")
    print("load average: " + " ".join(f"{x:.1f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
