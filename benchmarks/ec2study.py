"""The EC2 workflow study reproduced on the warehouse (docs/ec2-study.md).

Three workflow shapes (benchmarks/ec2shapes.py: Montage-like, I/O-bound;
Broadband-like, memory-bound, re-reading large inputs; Epigenome-like,
CPU-bound), each run as a warehouse workflow over each storage
configuration on 1, 2 and 4 worker nodes, and every cell priced under
both billing rules of the study's EC2 table (examples/prices/ec2-2010.toml):

- ``local``: an embedded warehouse, its local executor (one node: the
  baseline);
- ``shared``: an embedded warehouse whose home is a shared POSIX directory
  (an NFS stand-in), its steps run on the Dask workers;
- ``keep``: ``wh serve --keep 2``, steps on the Dask workers, blocks from
  the keep servers;
- ``s3``, ``s3cache``: ``wh serve --keep 2 --keep-s3 URL`` (blocks on S3),
  the workers without, and with, a disk cache of blocks each
  (``WH_CACHE_DIR``); only with ``--s3 URL`` (a SeaweedFS or other S3:
  ``s3://BUCKET/PREFIX?endpoint=…``, credentials in ``AWS_*``).

A "node" is a Dask worker process of one thread with its own cache
directory (all on this machine). Makespan is the run's, from its start to
its end. Cost: the study's nodes were billed whole, so a cell costs
nodes x makespan; ``--time-scale T`` says how many seconds of the study one
second here stands for (task times are scaled down by about that much), and
hourly billing rounds each node's time up to whole hours of the study.

The study's findings are the benchmark's checks (printed, and exit 3 if
one fails where its cells were run; not run by ``make test``):

1. uncached S3 is the slowest storage for Montage-like;
2. the cache makes S3 the fastest or within 10% of it for Broadband-like;
3. storage changes Epigenome-like's makespan by less than 10%;
4. adding nodes never lowers the hourly-billed cost, except 1 -> 2 on the
   shared directory.

    .venv/bin/python benchmarks/ec2study.py --quick            # a subset, a few minutes
    .venv/bin/python benchmarks/ec2study.py --s3 URL --out DIR # everything (a quiet machine)

Writes DIR/ec2study.json, DIR/ec2study.md (the table) and one SVG chart
per shape (makespan and cost per configuration and node count).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ec2charts import write_chart
from ec2shapes import SHAPES, Shape

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
EC2 = ROOT / "examples" / "prices" / "ec2-2010.toml"
CONFIGS = ("local", "shared", "keep", "s3", "s3cache")

# One function for every task: step 0 queues a step per task; each reads
# its inputs whole, holds its memory, burns its CPU, writes its outputs.
TASK = """
import os, time
from warehouse import step

params = step.params()
tasks = params["tasks"]
if step.number() == 0:
    step.queue(1, *[str(i) for i in range(len(tasks))])
    raise SystemExit(0)
task = tasks[int(step.step_input())]
reader = step.reader()
for path in task["in"]:
    for _ in reader.iter_file(path):
        pass
held = bytearray(task["mem"])
for i in range(0, len(held), 4096):
    held[i] = 1
start = time.process_time()
while time.process_time() - start < task["cpu"]:
    sum(i * i for i in range(1000))
out = step.StreamWriter(".")
for name, size in task["out"]:
    chunk = os.urandom(min(size, 1 << 20))
    out.add_file(name, [chunk[: min(len(chunk), size - k)] for k in range(0, size, len(chunk))])
step.output(out.finish())
"""


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _seconds(value: Any) -> float:
    """A time of a run view: seconds, or an ISO time as the API gives it."""
    if isinstance(value, str):
        from datetime import datetime

        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return float(value)


def _makespan(run: dict[str, Any]) -> float:
    return _seconds(run["finished_at"]) - _seconds(run["started_at"])


def _log_file(path: Path) -> int:
    """A log file's descriptor for a child process (ours closes with the cell)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)


def wh(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([str(BIN / "wh"), *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"wh {' '.join(args[:3])}: {done.stderr.strip()[-800:]}")
    return done.stdout


@contextlib.contextmanager
def dask_nodes(work: Path, nodes: int, cache: bool) -> Iterator[str]:
    """A Dask scheduler and ``nodes`` workers of one thread, each with its own
    cache directory when ``cache``; the scheduler's address."""
    from distributed import Client

    sched_file = work / "scheduler.json"
    procs = [
        subprocess.Popen(
            [
                str(BIN / "dask"),
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(sched_file),
            ],
            stdout=subprocess.DEVNULL,
            stderr=_log_file(work / "scheduler.log"),
        )
    ]
    try:
        deadline = time.monotonic() + 120
        while not sched_file.exists():
            if time.monotonic() > deadline:
                raise RuntimeError("the Dask scheduler did not start")
            time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        for i in range(nodes):
            env = {**os.environ}
            env.pop("WH_CACHE_DIR", None)
            if cache:
                env["WH_CACHE_DIR"] = str(work / f"cache{i}")
            procs.append(
                subprocess.Popen(
                    [
                        str(BIN / "dask"),
                        "worker",
                        address,
                        "--nthreads",
                        "1",
                        "--nworkers",
                        "1",
                        "--no-dashboard",
                        "--memory-limit",
                        "0",
                        "--name",
                        f"node{i}",
                    ],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=_log_file(work / f"worker{i}.log"),
                )
            )
        with Client(address, timeout=60) as client:  # type: ignore[no-untyped-call]
            client.wait_for_workers(nodes, timeout=120)
        yield address
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


@contextlib.contextmanager
def controller(work: Path, executor_args: list[str], s3: str | None) -> Iterator[dict[str, str]]:
    """``wh serve --keep 2`` (on S3 with ``s3``): the environment of its admin."""
    env = {**os.environ, "WH_HOME": str(work / "home")}
    for name in ("WH_URL", "WH_TOKEN", "WH_CACHE_DIR"):
        env.pop(name, None)
    admin = wh(env, "user", "add", "admin", "--admin").strip()
    args = ["serve", "--listen", "127.0.0.1:0", "--keep", "2", *executor_args]
    if s3:
        args += ["--keep-s3", s3]
    proc = subprocess.Popen(
        [str(BIN / "wh"), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=_log_file(work / "serve.log"),
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().split()
        if first[:3] != ["controller", "listening", "on"]:
            raise RuntimeError(f"wh serve: {(work / 'serve.log').read_text()[-800:]}")
        for _ in range(2):
            proc.stdout.readline()
        yield {**env, "WH_URL": first[3], "WH_TOKEN": admin}
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def write_inputs(shape: Shape, where: Path, function: Path) -> None:
    where.mkdir(parents=True)
    for name, size in shape.inputs.items():
        with open(where / name, "wb") as f:
            left = size
            while left:
                f.write(os.urandom(min(left, 1 << 20)))
                left -= min(left, 1 << 20)
    function.mkdir(parents=True)
    (function / "task.py").write_text(TASK)


def s3_spec(url: str, prefix: str) -> str:
    """``--s3``: an ``s3://BUCKET/PREFIX?endpoint=…`` spec as given (credentials
    in ``AWS_*``), or ``http://KEY:SECRET@HOST:PORT`` (what scripts/seaweedfs.sh
    prints): then its bucket ``wh-ec2study`` is made and the key is put in
    this process's ``AWS_*`` for the servers it starts."""
    from urllib.parse import urlsplit

    if url.startswith("s3://"):
        bucket_path, _, query = url.partition("?")
        return f"{bucket_path.rstrip('/')}/{prefix}?{query}"
    parts = urlsplit(url)
    endpoint = f"{parts.scheme}://{parts.hostname}:{parts.port}"
    os.environ["AWS_ACCESS_KEY_ID"] = parts.username or ""
    os.environ["AWS_SECRET_ACCESS_KEY"] = parts.password or ""
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint)
    with contextlib.suppress(Exception):  # made already
        client.create_bucket(Bucket="wh-ec2study")
    return f"s3://wh-ec2study/{prefix}?endpoint={endpoint}"


def run_cell(shape: Shape, config: str, nodes: int, work: Path, s3: str | None) -> dict[str, Any]:
    """One workflow run; its makespan and usage."""
    import yaml

    data, fn_dir = work / "data", work / "fn"
    write_inputs(shape, data, fn_dir)
    if config in ("local", "shared"):
        from warehouse.embedded import EmbeddedWarehouse
        from warehouse.workflows.workflowsview import LocalWorkflows

        cm: contextlib.AbstractContextManager[str] = (
            dask_nodes(work, nodes, cache=False)
            if config == "shared"
            else contextlib.nullcontext("")
        )
        with cm as address, EmbeddedWarehouse(work / "shared-home") as embedded:
            pdh = embedded.put([data]).pdh
            fn = f"{embedded.put([fn_dir]).pdh}/task.py"
            text = yaml.safe_dump(shape.workflow(fn), sort_keys=False)
            flows = LocalWorkflows(embedded, f"dask:{address}" if address else "local")
            started = flows.start(text, f"{shape.name}.wf.yml", {"data": pdh})
            run = flows.run(started["id"], wait=True)
        return {"state": run["state"], "makespan": _makespan(run)}
    volume = None
    if s3 and config.startswith("s3"):
        volume = s3_spec(s3, f"{work.name}-{int(time.time())}")
    with (
        dask_nodes(work, nodes, cache=config == "s3cache") as address,
        controller(work, ["--executor", "dask", "--dask-scheduler", address], volume) as env,
    ):
        pdh = wh(env, "put", str(data)).strip()
        fn = wh(env, "put", str(fn_dir)).strip() + "/task.py"
        flow = work / f"{shape.name}.wf.yml"
        flow.write_text(yaml.safe_dump(shape.workflow(fn), sort_keys=False))
        said = wh(env, "workflow", "run", str(flow), "-i", f"data={pdh}", "--wait", "--json")
        if "{" not in said:
            raise RuntimeError(f"wh workflow run said no run: {said[-500:]!r}")
        run = json.loads(said[said.index("{") :])
        usage = json.loads(wh(env, "usage", "--workflow", str(run["id"]), "--json"))["total"]
    return {
        "state": run["state"],
        "makespan": _makespan(run),
        "cpu_seconds": usage["cpu_seconds"],
        "input_bytes": usage["input_bytes"],
    }


def price(makespan: float, nodes: int, time_scale: float) -> dict[str, str]:
    """The cell's cost: every node held for the makespan (in the study's seconds)."""
    from warehouse.usage import parse_prices

    table = parse_prices(EC2.read_text(), str(EC2))
    per_hour = table.nodes[table.default_node].per_hour
    study = Decimal(repr(makespan * time_scale))
    hours = Decimal(math.ceil(study / 3600))
    return {
        "hour": str(nodes * hours * per_hour),
        "second": str((nodes * study / 3600 * per_hour).quantize(Decimal("0.0001"))),
    }


def checks(cells: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """The study's findings against the cells run: (finding, PASS/FAIL/NOT RUN, detail)."""

    def span(shape: str, config: str, nodes: int) -> float | None:
        for c in cells:
            if (c["shape"], c["config"], c["nodes"]) == (shape, config, nodes) and c[
                "state"
            ] == "complete":
                return float(c["makespan"])
        return None

    out = []
    for nodes in sorted({c["nodes"] for c in cells}):
        m = {k: span("montage", k, nodes) for k in CONFIGS}
        found = {k: v for k, v in m.items() if v is not None}
        if m["s3"] is None or len(found) < 2:
            out.append(
                (f"1. uncached S3 slowest for Montage-like, {nodes} node(s)", "NOT RUN", str(found))
            )
        else:
            ok = m["s3"] >= max(found.values())
            out.append(
                (
                    f"1. uncached S3 slowest for Montage-like, {nodes} node(s)",
                    "PASS" if ok else "FAIL",
                    str(found),
                )
            )
        b = {k: span("broadband", k, nodes) for k in CONFIGS}
        found = {k: v for k, v in b.items() if v is not None}
        if b["s3cache"] is None or len(found) < 2:
            out.append(
                (
                    f"2. cached S3 best or within 10% for Broadband-like, {nodes} node(s)",
                    "NOT RUN",
                    str(found),
                )
            )
        else:
            ok = b["s3cache"] <= 1.1 * min(found.values())
            out.append(
                (
                    f"2. cached S3 best or within 10% for Broadband-like, {nodes} node(s)",
                    "PASS" if ok else "FAIL",
                    str(found),
                )
            )
        e = {k: v for k in CONFIGS if (v := span("epigenome", k, nodes)) is not None}
        if len(e) < 2:
            out.append(
                (f"3. storage changes Epigenome-like < 10%, {nodes} node(s)", "NOT RUN", str(e))
            )
        else:
            ok = max(e.values()) < 1.1 * min(e.values())
            out.append(
                (
                    f"3. storage changes Epigenome-like < 10%, {nodes} node(s)",
                    "PASS" if ok else "FAIL",
                    str(e),
                )
            )
    for c in cells:
        if c["state"] != "complete":
            continue
        for d in cells:
            same = (d["shape"], d["config"]) == (c["shape"], c["config"]) and d[
                "state"
            ] == "complete"
            if same and d["nodes"] > c["nodes"]:
                lower = Decimal(d["cost"]["hour"]) < Decimal(c["cost"]["hour"])
                allowed = c["config"] == "shared" and (c["nodes"], d["nodes"]) == (1, 2)
                what = f"4. {c['shape']} on {c['config']}: {c['nodes']} -> {d['nodes']} nodes"
                detail = f"{c['cost']['hour']} -> {d['cost']['hour']} USD"
                out.append((what, "FAIL" if lower and not allowed else "PASS", detail))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a subset in a few minutes")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--configs", default=None, help=f"of {','.join(CONFIGS)}")
    ap.add_argument("--nodes", default=None, help="node counts, default 1,2,4")
    ap.add_argument("--scale", type=float, default=None, help="fraction of the study's workflows")
    ap.add_argument("--shrink", type=float, default=None, help="file sizes divided by this")
    ap.add_argument("--cpu", type=float, default=None, help="CPU seconds per unit of a task's")
    ap.add_argument("--time-scale", type=float, default=60.0, help="study seconds per second here")
    ap.add_argument("--s3", help="s3://BUCKET/PREFIX?endpoint=URL for the s3 configurations")
    ap.add_argument("--out", type=Path, default=None, help="where the JSON, table and charts go")
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    quick = args.quick
    scale = args.scale or (0.004 if quick else 0.03)
    shrink = args.shrink or (200.0 if quick else 20.0)
    cpu = args.cpu or (0.3 if quick else 1.0)
    quick_configs = "local,keep,s3,s3cache" if args.s3 else "local,keep,shared"
    configs = (args.configs or (quick_configs if quick else ",".join(CONFIGS))).split(",")
    if not args.s3:
        configs = [c for c in configs if not c.startswith("s3")]
    node_counts = [int(n) for n in (args.nodes or ("1,2" if quick else "1,2,4")).split(",")]
    out = args.out or Path(tempfile.mkdtemp(prefix="wh-ec2study-out-"))
    out.mkdir(parents=True, exist_ok=True)
    work_root = args.workdir or Path(tempfile.mkdtemp(prefix="wh-ec2study-"))
    cells: list[dict[str, Any]] = []
    for name in args.shapes.split(","):
        shape = SHAPES[name](scale, shrink, cpu)
        log(
            f"{name}: {shape.tasks} tasks in {len(shape.levels)} levels, "
            f"{sum(shape.inputs.values()) / 1e6:.1f} MB in; counts from {shape.source}"
        )
        for config in configs:
            for nodes in node_counts:
                if config == "local" and nodes != 1:
                    continue  # one node by definition
                work = work_root / f"{name}-{config}-{nodes}"
                load = os.getloadavg()[0]
                try:
                    cell = run_cell(shape, config, nodes, work, args.s3)
                except Exception as e:  # one cell failing is reported, the rest still run
                    cell = {"state": "error", "makespan": float("nan"), "error": str(e)[:500]}
                cell.update(shape=name, config=config, nodes=nodes, load=load, tasks=shape.tasks)
                if cell["state"] == "complete":
                    cell["cost"] = price(cell["makespan"], nodes, args.time_scale)
                cells.append(cell)
                log(
                    f"  {config:8} {nodes} node(s): {cell['state']} {cell['makespan']:.1f} s"
                    f" (load {load:.1f}) {cell.get('cost', cell.get('error', ''))}"
                )
                shutil.rmtree(work, ignore_errors=True)
    found = checks(cells)
    result = {
        "scale": scale,
        "shrink": shrink,
        "cpu": cpu,
        "time_scale": args.time_scale,
        "prices": str(EC2.relative_to(ROOT)),
        "cells": cells,
        "checks": [{"finding": f, "result": r, "detail": d} for f, r, d in found],
    }
    (out / "ec2study.json").write_text(json.dumps(result, indent=2))
    lines = [
        "| shape | storage | nodes | makespan s | study hours | cost, hourly | cost, per second"
        " | load |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        cost = c.get("cost", {"hour": "-", "second": "-"})
        hours = c["makespan"] * args.time_scale / 3600
        lines.append(
            f"| {c['shape']} | {c['config']} | {c['nodes']} | {c['makespan']:.1f} | "
            f"{hours:.2f} | {cost['hour']} | {cost['second']} | {c['load']:.1f} |"
        )
    lines += ["", *(f"- {r}: {f} ({d})" for f, r, d in found)]
    (out / "ec2study.md").write_text("\n".join(lines) + "\n")
    for name in args.shapes.split(","):
        write_chart(out / f"ec2study-{name}.svg", name, [c for c in cells if c["shape"] == name])
    print("\n".join(lines))
    print(f"written to {out}")
    if any(r == "FAIL" for _, r, _ in found):
        sys.exit(3)
    if any(c["state"] != "complete" for c in cells):
        sys.exit(1)


if __name__ == "__main__":
    main()
