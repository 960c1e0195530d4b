"""How long `wh lineage` takes over a large graph of jobs.

Builds an embedded warehouse whose catalog holds a layered DAG of complete
jobs (recorded directly, nothing runs): ``--width`` jobs a layer, each job
after the first layer reading the combined collection of two outputs of the
layer before, and one last job reading all of the last layer. Then times,
best of ``--repeat``:

- ``trace`` up from the last output (the whole graph) and down from the raw
  put (the whole graph again), in this process;
- ``wh lineage --json`` up and down as a user runs it (a new process each).

Usage::

    .venv/bin/python benchmarks/lineage.py                   # 200 and 2,000 jobs
    .venv/bin/python benchmarks/lineage.py --jobs 5000 --width 50 --json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs.jobstore import insert_job
from warehouse.lineage import trace
from warehouse.manifest import Manifest
from warehouse.workflows.runstore import record_parts

WH = str(Path(sys.executable).with_name("wh"))


def build(home: Path, jobs: int, width: int) -> tuple[str, str]:
    """The catalog of a layered DAG of ``jobs`` jobs; (raw input PDH, last output PDH)."""
    with EmbeddedWarehouse(home, user="bench") as wh:
        raw_dir = home.parent / "raw"
        raw_dir.mkdir(exist_ok=True)
        (raw_dir / "reads.txt").write_text("acgt\n" * 1000)
        raw = wh.put([raw_dir], name="raw").pdh
        loc = wh.store.put(b"x").locator
        wh.store.flush()
        count = 0

        def job(input_pdh: str) -> str:
            nonlocal count
            count += 1
            out = wh.save_manifest(Manifest.parse(f". {loc} 0:1:out{count}\n")).pdh
            now = time.time()
            insert_job(
                wh.engine,
                {
                    "function": "builtin:copy",
                    "function_pdh": "0" * 32 + "+1",
                    "function_path": "copy.py",
                    "function_commit": None,
                    "input_pdh": input_pdh,
                    "params": json.dumps({"n": count}),
                    "cpus": 1,
                    "memory": 0,
                    "max_attempts": 1,
                    "priority": 0,
                    "executor": "local",
                    "reuse_key": f"{count:064x}",
                    "submitted_by": "bench",
                    "state": "complete",
                    "output_pdh": out,
                    "started_at": now,
                    "finished_at": now,
                },
            )
            return out

        def combine(parts: dict[str, str]) -> str:
            lines = []
            for d, pdh in parts.items():
                for line in wh.manifest(pdh).format().splitlines():
                    stream, _, rest = line.partition(" ")
                    lines.append(f"./{d}{stream[1:]} {rest}\n")
            pdh = wh.save_manifest(Manifest.parse("".join(lines)).normalized()).pdh
            record_parts(wh.engine, pdh, list(parts.items()))
            return pdh

        layer = [job(raw) for _ in range(width)]
        while count < jobs - 1:
            n = min(width, jobs - 1 - count)
            layer = [
                job(combine({"a": layer[k % len(layer)], "b": layer[(k + 1) % len(layer)]}))
                for k in range(n)
            ]
        last = job(combine({f"p{k}": pdh for k, pdh in enumerate(layer)}))
        return raw, last


def best(repeat: int, fn: Any) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(jobs: int, width: int, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="wh-lineage-bench-") as tmp:
        home = Path(tmp) / "home"
        start = time.perf_counter()
        raw, last = build(home, jobs, width)
        built = time.perf_counter() - start
        env = {**os.environ, "WH_HOME": str(home)}
        env.pop("WH_URL", None)
        with EmbeddedWarehouse(home) as wh:
            up = trace(wh.engine, last)
            down = trace(wh.engine, raw, down=True)
            assert len(up.jobs) == jobs and len(down.jobs) == jobs, (len(up.jobs), len(down.jobs))
            figures = {
                "jobs": jobs,
                "width": width,
                "collections_up": len(up.collections),
                "build_s": round(built, 2),
                "trace_up_s": best(repeat, lambda: trace(wh.engine, last)),
                "trace_down_s": best(repeat, lambda: trace(wh.engine, raw, down=True)),
            }

        def cli(*args: str) -> None:
            subprocess.run(
                [WH, "lineage", *args, "--json"], env=env, check=True, capture_output=True
            )

        figures["cli_up_s"] = best(repeat, lambda: cli(last))
        figures["cli_down_s"] = best(repeat, lambda: cli(raw, "--down"))
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, action="append", help="Jobs in the DAG (repeatable).")
    parser.add_argument("--width", type=int, default=20, help="Jobs a layer (default 20).")
    parser.add_argument("--repeat", type=int, default=3, help="Best of N (default 3).")
    parser.add_argument("--json", action="store_true", help="Print the figures as JSON.")
    args = parser.parse_args()
    results = [measure(n, args.width, args.repeat) for n in args.jobs or [200, 2000]]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"{'jobs':>6} {'colls':>6} {'trace up':>9} {'trace down':>11} {'wh up':>7} {'wh down':>8}"
    )
    for r in results:
        print(
            f"{r['jobs']:>6} {r['collections_up']:>6} {r['trace_up_s']:>8.3f}s "
            f"{r['trace_down_s']:>10.3f}s {r['cli_up_s']:>6.3f}s {r['cli_down_s']:>7.3f}s"
        )


if __name__ == "__main__":
    main()
