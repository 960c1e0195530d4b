#!/usr/bin/env python3
"""`wh get` and `wh ls` of one flat directory of many tiny files (one manifest line).

For each of ``--counts``, a collection of one directory ``all/d00000`` of
that many files of 10 bytes (one stream over one stored block, with the
caller's listing, recorded through the Python API of the build running this
script, untimed: as ``million_get.py`` records its collection). Then, the
builds given with ``--wh`` alternating (``PATH/TO/wh`` or
``PATH/TO/wh=SRC_DIR``, run with ``PYTHONPATH=SRC_DIR``):

- ``get --no-write PDH``   ``--repeat`` times
- ``ls PDH``               ``--repeat`` times (its lines counted, as ``wc -l``)
- ``get PDH DEST``         ``--write-repeat`` times, DEST (``--dest``, else
  under ``--workdir``) removed between runs, untimed

each with its wall and CPU time and peak resident size (``wait4``); every
output is counted, one line a file. Prints the median wall and CPU time and
the highest peak of each, and the load average before and after.

    .venv/bin/python benchmarks/flat_get.py --wh MAIN/.venv/bin/wh=MAIN/src \\
        --wh .venv/bin/wh --counts 200000,1000000 --workdir /var/tmp/flat-get
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from million import _blocks, _run
from million_get import _builds, _manifest, _record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--counts", default="200000,1000000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write-repeat", type=int, default=2)
    parser.add_argument("--wh", action="append", help="a build: WH or WH=SRC (repeatable)")
    parser.add_argument("--workdir", type=Path, required=True, help="homes and destinations")
    parser.add_argument(
        "--dest", type=Path, help="where `get PDH DEST` writes (default: in workdir)"
    )
    args = parser.parse_args()
    builds = [
        (chr(ord("A") + i), wh, src)
        for i, (_, wh, src) in enumerate(
            _builds(args.wh or [str(Path(sys.executable).with_name("wh"))])
        )
    ]
    for name, wh_bin, src in builds:
        print(f"build {name}: {wh_bin}" + (f" with PYTHONPATH={src}" if src else ""))
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    for count in (int(c) for c in args.counts.split(",")):
        home = args.workdir / f"home{count}"
        shutil.rmtree(home, ignore_errors=True)
        blocks = _blocks(1, 10 * count)
        text, digests = _manifest(blocks, count)
        from warehouse.embedded import EmbeddedWarehouse

        with EmbeddedWarehouse(home) as wh:
            pdh = _record(wh, blocks, text, digests)
        print(f"{count:,} files in one stream: manifest line of {len(text):,} bytes", flush=True)
        del blocks, text, digests
        env = dict(os.environ, WH_HOME=str(home))
        env.pop("WH_URL", None)
        dest = args.dest or args.workdir / "dest"
        runs = [
            ("get --no-write", ["get", "--no-write", pdh], args.repeat),
            ("ls", ["ls", pdh], args.repeat),
            ("get DEST", ["get", pdh, str(dest)], args.write_repeat),
        ]
        for label, argv, repeat in runs:
            results: dict[str, list[tuple[float, float, int]]] = {}
            for r in range(repeat):
                for name, wh_bin, src in builds if r % 2 == 0 else list(reversed(builds)):
                    shutil.rmtree(dest, ignore_errors=True)
                    build_env = dict(env)
                    if src is not None:
                        build_env["PYTHONPATH"] = src
                    seconds, cpu, peak, lines, _ = _run([wh_bin, *argv], build_env, args.workdir)
                    if lines != count:
                        raise SystemExit(f"{name} {label}: {lines} lines, want {count}")
                    results.setdefault(name, []).append((seconds, cpu, peak))
                    print(
                        f"  {label:15} {name} {seconds:7.2f} s  (CPU {cpu:6.2f} s)"
                        f"  {peak / 1e6:6.0f} MB  load {os.getloadavg()[0]:.2f}",
                        flush=True,
                    )
            for name, r in results.items():
                print(
                    f"{count:>9,} {label:15} {name}"
                    f" median {statistics.median(s for s, _, _ in r):7.2f} s"
                    f" (CPU {statistics.median(c for _, c, _ in r):6.2f} s)"
                    f"  peak {max(p for _, _, p in r) / 1e6:6.0f} MB",
                    flush=True,
                )
        shutil.rmtree(dest, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
