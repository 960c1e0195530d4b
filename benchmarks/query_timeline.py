"""Where a one-step `wh query` job's time goes, piece by piece.

    .venv/bin/python benchmarks/query_timeline.py [--scale 1] [--partitions 8]
        [--runs 3] [--query q6] [--workdir DIR] [--json]

Makes the TPC-H tables as benchmarks/query.py does (untimed; kept in the
workdir), then runs the query job ``--runs`` times in this process (the
manager in-process, local executor, as ``wh query --wait`` does) and prints
a timeline of each run, in milliseconds from the submission:

- ``pin``: pinning ``builtin:query`` (timed apart, right before);
- ``submitted``: the job row committed (``jobs.submit``);
- ``noticed``: the manager has loaded the job;
- ``launched``: the executor's ``start`` returned (fork or spawn);
- ``step_main``: the step's file begins (Python started, or forked);
- ``step_imported``: the step's modules imported;
- ``checks_done``: every block's MD5 checked (threads beside DuckDB);
- ``query_done``: DuckDB wrote the result table in scratch;
- ``reported``: the result's blocks stored and fsynced, its record written;
- ``ending``: the step's code is done, its process about to exit;
- ``exited``: the manager saw the step's end;
- ``written``: the job's rows and manifests committed;
- ``returned``: the waiter (``run_manager``) returned;
- ``step_cpu``: the CPU time the step's process used (a forked step's own
  since its fork), less sensitive to other load than the times above.

The step is the built-in query step, run from a copy of ``builtin:query``
that notes those moments on stderr (the same code path, timestamps added).
Run it with ``PYTHONPATH`` set to another checkout's ``src`` to see that
version's timeline; the 1-minute load average is printed with every run.
The first run is a fresh process's; before the second the process waits
(untimed) for its fork server, where the code has one, to be ready.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from query_ab import wait_for_fork_server  # noqa: E402

from tpch.queries import QUERIES  # noqa: E402

STEP = """
import time, sys
_t = {"step_main": time.time()}
import warehouse.query.steps as qs
_t["step_imported"] = time.time()
_check_later, _compute, _report = qs.check_blocks_later, qs._compute, qs._report
def check_later(*a, **k):
    failed = _check_later(*a, **k)
    def timed():
        out = failed()
        _t["checks_done"] = time.time()
        return out
    return timed
def compute(*a, **k):
    out = _compute(*a, **k)
    _t["query_done"] = time.time()
    return out
def report(*a, **k):
    _report(*a, **k)
    _t["reported"] = time.time()
qs.check_blocks_later, qs._compute, qs._report = check_later, compute, report
qs.query_step()
print(f"STEPCPU {time.process_time()}", file=sys.stderr)
_t["ending"] = time.time()
print("TIMELINE " + " ".join(f"{k}={v}" for k, v in _t.items()), file=sys.stderr)
import warehouse.step
if hasattr(warehouse.step, "done"):  # as builtin:query ends, where it does
    warehouse.step.done()
"""

ORDER = [
    "pin",
    "submitted",
    "noticed",
    "launched",
    "step_main",
    "step_imported",
    "checks_done",
    "query_done",
    "reported",
    "ending",
    "exited",
    "written",
    "returned",
    "step_cpu",
]


def one_run(wh: Any, sql: str, fn: str) -> dict[str, float]:
    from warehouse import jobs
    from warehouse.jobs import executors, manager
    from warehouse.jobs.functions import resolve
    from warehouse.query.catalog import compile_query

    marks: dict[str, float] = {}
    cpu = [float("nan")]  # the step process's CPU time (ms), as it reports it
    _, input_pdh, params = compile_query(wh, sql, "auto")
    t = time.time()
    resolve(wh, "builtin:query")
    pin = time.time() - t

    orig_load, orig_start = manager.Manager._load, executors.LocalExecutor.start
    # Newer managers write the job's rows on a writer thread (no ``_write``):
    # "written" is then not marked.
    orig_exited, orig_write = manager.Manager._exited, getattr(manager.Manager, "_write", None)

    def load(self: Any, record: Any, job: Any) -> None:
        orig_load(self, record, job)
        marks.setdefault("noticed", time.time())

    def start(self: Any, launch: Any) -> None:
        orig_start(self, launch)
        marks.setdefault("launched", time.time())

    def exited(self: Any, done: Any) -> None:
        marks.setdefault("exited", time.time())
        for line in done.log.decode("utf-8", "replace").splitlines():
            if line.startswith("STEPCPU "):
                cpu[0] = float(line.split()[1]) * 1000
            if line.startswith("TIMELINE "):
                for item in line.split()[1:]:
                    k, v = item.split("=")
                    marks[k] = float(v)
        orig_exited(self, done)

    def write(self: Any, *args: Any) -> None:
        assert orig_write is not None
        orig_write(self, *args)
        if "exited" in marks:
            marks["written"] = time.time()

    manager.Manager._load = load  # type: ignore[method-assign]
    executors.LocalExecutor.start = start  # type: ignore[method-assign]
    manager.Manager._exited = exited  # type: ignore[method-assign]
    if orig_write is not None:
        manager.Manager._write = write  # type: ignore[attr-defined]
    try:
        t0 = time.time()
        record = jobs.submit(wh, jobs.JobRequest(fn, input_pdh, params, reuse=False))
        marks["submitted"] = time.time()
        jobs.run_manager(wh, "local", until_job=record.id)
        marks["returned"] = time.time()
    finally:
        manager.Manager._load = orig_load  # type: ignore[method-assign]
        executors.LocalExecutor.start = orig_start  # type: ignore[method-assign]
        manager.Manager._exited = orig_exited  # type: ignore[method-assign]
        if orig_write is not None:
            manager.Manager._write = orig_write  # type: ignore[attr-defined]
    done = jobs.get_job(wh.engine, record.id)
    if done.state != "complete":
        raise SystemExit(f"job {done.id} {done.state}: {done.error}")
    out = {"pin": pin * 1000}
    out.update({k: (v - t0) * 1000 for k, v in marks.items()})
    out["step_cpu"] = cpu[0]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--query", default="q6", choices=sorted(QUERIES))
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from query import generate, make_tables, warm

    from warehouse.embedded import EmbeddedWarehouse

    work = args.workdir or Path(tempfile.mkdtemp(prefix="wh-bench-query-tl-"))
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: bytecode cached
    os.environ.setdefault("PYTHONPYCACHEPREFIX", str(work / "pycache"))
    data = work / f"tpch-{args.scale}"
    generate(data, args.scale)
    home = work / f"wh-home-tl-{args.partitions}"
    with EmbeddedWarehouse(home) as wh:
        if not (home / ".tables-made").exists():
            make_tables(wh, data, args.partitions)
            (home / ".tables-made").touch()
        warm(data, home / "blocks")
        step_dir = work / "timed-step"
        step_dir.mkdir(exist_ok=True)
        (step_dir / "query.py").write_text(STEP)
        fn = f"{wh.put([step_dir / 'query.py']).pdh}/query.py"
        runs = []
        for n in range(args.runs):
            if n == 1:
                wait_for_fork_server()
            marks = one_run(wh, QUERIES[args.query], fn)
            marks["load"] = os.getloadavg()[0]
            runs.append(marks)
            cells = "  ".join(f"{k} {marks[k]:.0f}" for k in ORDER if k in marks)
            print(f"{args.query}: {cells}  (ms; load {marks['load']:.2f})", flush=True)
    medians = {
        k: statistics.median(r[k] for r in runs if k in r)
        for k in ORDER
        if any(k in r for r in runs)
    }
    print("median: " + "  ".join(f"{k} {v:.0f}" for k, v in medians.items()))
    if args.json:
        json.dump({"query": args.query, "runs": runs, "median": medians}, sys.stdout, indent=2)
        print()


if __name__ == "__main__":
    main()
