"""A/B of benchmarks/remote.py: two source trees of warehouse, run alternately.

    .venv/bin/python benchmarks/remote_ab.py --base OLD/src --new NEW/src \
        [--rounds 3] [--size-mb 300] [--repeat 2] [--tls]

On a machine shared with other work, one run of each version says little:
the load moves between them. Here both versions run in turn, round after
round (A B, then B A, ...), so a change of load falls on both alike; the
ratios (remote / embedded, as remote.py prints them) of each run and their
medians are printed with the load average before each run.

Both versions run in this virtual environment, with the same libraries and
the same benchmark script (this one's remote.py); only ``PYTHONPATH`` picks
which ``warehouse`` package the ``wh`` commands import. ``--tls`` passes
``--tls`` to the new version's runs (the old one may not have TLS).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
_RATIO = re.compile(r"^\s*(remote(?:-tls)?) (put|get) / embedded \w+\s+([0-9.]+)", re.M)


def which_package(src: str) -> str:
    env = {**os.environ, "PYTHONPATH": src}
    code = "import warehouse; print(warehouse.__file__)"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def run(src: str, args: argparse.Namespace, tls: bool) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": src}
    cmd = [sys.executable, str(HERE / "remote.py"), "--size-mb", str(args.size_mb)]
    cmd += ["--repeat", str(args.repeat), *(["--tls"] if tls else [])]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"remote.py failed with {src}: {done.stderr.strip()[-2000:]}")
    return {f"{kind} {op}": float(v) for kind, op, v in _RATIO.findall(done.stdout)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--base", required=True, help="the old version's src directory")
    ap.add_argument("--new", required=True, help="the new version's src directory")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size-mb", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--tls", action="store_true")
    args = ap.parse_args()
    sides = {"old": os.path.abspath(args.base), "new": os.path.abspath(args.new)}
    for name, src in sides.items():
        found = which_package(src)
        if not found.startswith(src + os.sep):
            sys.exit(f"{name}: warehouse imports from {found}, not from {src}")
        print(f"{name}: {src}", flush=True)
    results: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for r in range(args.rounds):
        order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
        for name in order:
            load = os.getloadavg()[0]
            ratios = run(sides[name], args, tls=args.tls and name == "new")
            results[name].append(ratios)
            shown = ", ".join(f"{k} {v:.2f}" for k, v in sorted(ratios.items()))
            print(f"round {r + 1} {name}: load {load:.1f}; {shown}", flush=True)
    print("\nmedians:")
    for name, runs in results.items():
        keys = sorted({k for one in runs for k in one})
        medians = {k: statistics.median(x[k] for x in runs if k in x) for k in keys}
        shown = ", ".join(f"{k} {v:.2f}" for k, v in medians.items())
        print(f"  {name}: {shown}")
    for op in ("put", "get"):
        old = statistics.median(x[f"remote {op}"] for x in results["old"])
        new = statistics.median(x[f"remote {op}"] for x in results["new"])
        print(f"  remote {op} ratio new / old: {new / old:.3f}")


if __name__ == "__main__":
    main()
