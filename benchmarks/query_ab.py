"""A/B of `wh query`'s fixed cost: two versions of the code, alternated, and DuckDB alone.

    .venv/bin/python benchmarks/query_ab.py --base OTHER/src [--scale 1] [--partitions 8]
        [--rounds 2] [--repeat K] [--workdir DIR] [--json]

Makes TPC-H tables as benchmarks/query.py does (untimed, with this
checkout's code), then, round after round and query after query, times in a
fresh process each: the default-plan query job from submission to its end
with the code under ``--base`` (``PYTHONPATH``, which the steps inherit),
the same with this checkout's code, and DuckDB alone over the same Parquet
files (2 threads, views made untimed). With ``--repeat K`` each version's
process runs the query job K times: the first is timed as before, the median
of the others is reported as ``NAME-warm`` (a long-lived process, as
benchmarks/query.py times: after the first run, the process waits untimed
for a fork server, where the code has one, to be ready). The
order of the two versions swaps
every round, so both see the same load; the 1-minute load average is
printed with every figure. Every process runs with Python's bytecode
cache (``PYTHONDONTWRITEBYTECODE`` dropped, ``PYTHONPYCACHEPREFIX`` under
the workdir), as an installation does. Also times, per version, pinning a built-in
function (what a submission does first) and importing a query step's
modules (``python -X importtime``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from tpch.queries import QUERIES  # noqa: E402

THIS = HERE.parent / "src"
PYCACHE = [Path(tempfile.gettempdir()) / "wh-bench-pycache"]


def one_query(home: str, label: str, plan: str, repeat: str = "1") -> list[float]:
    """The query job timed ``repeat`` times in this one process (the first in
    a fresh process; the later ones as a long-lived manager process runs them)."""
    from query import run_job

    from warehouse.embedded import EmbeddedWarehouse
    from warehouse.query.catalog import compile_query

    times = []
    with EmbeddedWarehouse(Path(home)) as wh:
        _, input_pdh, params = compile_query(wh, QUERIES[label], plan)
        for n in range(int(repeat)):
            if n == 1:
                wait_for_fork_server()
            start = time.perf_counter()
            run_job(wh, "builtin:query", input_pdh, params)
            times.append(time.perf_counter() - start)
    return times


def wait_for_fork_server(limit: float = 30.0) -> None:
    """Untimed: let this process's fork server (where the code has one, started
    after the first step) finish its imports, as in a long-lived manager."""
    try:
        from warehouse.jobs import forkserver
    except ImportError:
        return
    deadline = time.monotonic() + limit
    while not forkserver.ready() and time.monotonic() < deadline:
        time.sleep(0.01)


def one_duckdb(data: str, label: str) -> float:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")
    for t in ("lineitem", "orders", "customer"):
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{data}/{t}.parquet')")
    start = time.perf_counter()
    con.execute(QUERIES[label]).fetchall()
    return time.perf_counter() - start


def one_pin(home: str) -> float:
    from warehouse.embedded import EmbeddedWarehouse
    from warehouse.jobs.functions import resolve

    with EmbeddedWarehouse(Path(home)) as wh:
        wh.engine  # noqa: B018 - the catalog open, as at a submission
        resolve(wh, "builtin:query")  # the first pin may store it
        start = time.perf_counter()
        resolve(wh, "builtin:query")
        return time.perf_counter() - start


def imports() -> float:
    """Seconds importing what a query step imports before it runs (-X importtime)."""
    probe = "import warehouse.query.steps, warehouse.step; warehouse.step.warehouse()"
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "WH_HOME": os.environ["AB_HOME"]},
    )
    total = 0
    for line in done.stderr.splitlines():
        parts = line.split("|")
        top = len(parts) == 3 and parts[2].startswith(" ") and not parts[2].startswith("  ")
        if top and parts[1].strip().isdigit():
            total += int(parts[1])  # cumulative microseconds of a top-level import
    return total / 1e6


def run_child(src: Path, *args: str, home: Path | None = None) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    # As installed: modules compiled once (in a cache of their own, so
    # neither source tree is written to), not at every process start.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE[0])
    if home is not None:
        env["AB_HOME"] = str(home)
    done = subprocess.run(
        [sys.executable, __file__, "--child", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if done.returncode != 0:
        raise SystemExit(f"{args} failed:\n{done.stderr[-2000:]}")
    return [float(x) for x in done.stdout.strip().splitlines()[-1].split()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", type=Path, required=True, help="the other version's src directory")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each query job this many times in its process: the first is"
        " a fresh process's, the later ones (reported as NAME-warm, their"
        " median) a long-lived manager process's",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from query import generate, make_tables, warm

    from warehouse.embedded import EmbeddedWarehouse

    work = args.workdir or Path(tempfile.mkdtemp(prefix="wh-bench-query-ab-"))
    PYCACHE[0] = work / "pycache"
    data = work / f"tpch-{args.scale}"
    generate(data, args.scale)
    home = work / f"wh-home-ab-{args.partitions}"
    if not (home / "warehouse.db").exists():
        with EmbeddedWarehouse(home) as wh:
            make_tables(wh, data, args.partitions)
    versions = {"base": args.base.resolve(), "this": THIS}
    results: list[dict[str, object]] = []
    for r in range(args.rounds):
        order = list(versions) if r % 2 == 0 else list(reversed(versions))
        warm(data, home / "blocks")
        for label in QUERIES:
            row: dict[str, object] = {"round": r + 1, "query": label}
            for name in order:
                times = run_child(
                    versions[name], "query", str(home), label, "auto", str(args.repeat)
                )
                row[name] = times[0]
                if len(times) > 1:
                    row[f"{name}-warm"] = statistics.median(times[1:])
            row["duckdb"] = run_child(THIS, "duckdb", str(data), label)[0]
            row["load"] = os.getloadavg()[0]
            results.append(row)
            print(json.dumps(row), flush=True)
        for name in order:
            pin = run_child(versions[name], "pin", str(home))[0]
            imp = run_child(versions[name], "imports", home=home)[0]
            row = {"round": r + 1, "version": name, "pin": pin, "imports": imp}
            row["load"] = os.getloadavg()[0]
            results.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        json.dump({"scale": args.scale, "results": results}, sys.stdout, indent=2)
        print()


def child(argv: list[str]) -> None:
    what, *rest = argv
    if what == "query":
        print(" ".join(str(t) for t in one_query(*rest)))
        return
    if what == "duckdb":
        seconds = one_duckdb(*rest)
    elif what == "pin":
        seconds = one_pin(*rest)
    else:
        seconds = imports()
    print(seconds)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
    else:
        main()
