"""TPC-H Q1, Q3, Q6, Q12: `wh query` against DuckDB alone and Spark SQL local[2].

    .venv/bin/python benchmarks/query.py [--scale 1] [--partitions 8] [--workdir DIR]
        [--skip-spark] [--json]

Generates TPC-H (lineitem, orders, customer) as Parquet with tpchgen-cli,
stores it, and makes the tables lineitem and orders partitioned on the order
key and customer unpartitioned (untimed). Then, for each query, times: the
wh query job from submission to its end (local executor, one slot per core),
once as `wh query` plans it by default ("wh": one step for tables of at most
1 GiB, DuckDB on every core) and once forced to distribute ("wh-dist": a
step per group of partitions, DuckDB with one thread per step, and a final
step); DuckDB alone over the same Parquet files (2 threads); Spark SQL on
local[2] over the same files (views created untimed). Every file is read
once before the timings (page cache warm for all). Targets: wh at most
3x DuckDB alone and at most 1.0x Spark. Exits 0 even when a target is missed.

`make bench-query` installs pyspark (the [bench] extra) and a Java runtime
(Debian's default-jre-headless, as root) first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from warehouse import jobs
from warehouse.embedded import EmbeddedWarehouse
from warehouse.query.catalog import compile_query

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from tpch.queries import QUERIES

TABLES = ("lineitem", "orders", "customer")


def generate(out: Path, scale: float) -> None:
    if all((out / f"{t}.parquet").exists() for t in TABLES):
        return
    cli = shutil.which("tpchgen-cli", path=str(Path(sys.executable).parent)) or "tpchgen-cli"
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [cli, "parquet", "-s", str(scale), f"--tables={','.join(TABLES)}", f"--output-dir={out}"],
        check=True,
    )


def run_job(wh: EmbeddedWarehouse, function: str, key: str, params: dict) -> jobs.JobRecord:
    record = jobs.submit(wh, jobs.JobRequest(function, key, params, reuse=False))
    jobs.run_manager(wh, "local", until_job=record.id)
    done = jobs.get_job(wh.engine, record.id)
    if done.state != "complete":
        raise SystemExit(f"job {done.id} {done.state}: {done.error}")
    return done


def make_tables(wh: EmbeddedWarehouse, data: Path, partitions: int) -> None:
    pdh = wh.put([data]).pdh
    keys = {"lineitem": "l_orderkey", "orders": "o_orderkey", "customer": None}
    for table, key in keys.items():
        params: dict[str, object] = {"format": "parquet", "path": f"{table}.parquet"}
        params |= {"partitions": partitions, "partition_by": key} if key else {"partitions": 1}
        done = run_job(wh, "builtin:table", pdh, params)
        wh.set_name(table, str(done.output_pdh), expect=None)


def warm(*roots: Path) -> None:
    """Read every file under ``roots`` once: the Parquet files and the
    warehouse's blocks (which a put drops from the page cache) are then all
    read from memory, as every system below finds them."""
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                with open(path, "rb") as f:
                    while f.read(1 << 24):
                        pass


def time_wh(wh: EmbeddedWarehouse, sql: str, how: str) -> float:
    _, input_pdh, params = compile_query(wh, sql, how)
    start = time.perf_counter()
    run_job(wh, "builtin:query", input_pdh, params)
    return time.perf_counter() - start


def time_duckdb(data: Path, sql: str) -> float:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 2")
    for t in TABLES:
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{data / t}.parquet')")
    start = time.perf_counter()
    con.execute(sql).fetchall()
    return time.perf_counter() - start


def spark_session():  # type: ignore[no-untyped-def]
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        print("spark: pyspark is not installed (pip install -e '.[bench]'): skipped")
        return None
    return (
        SparkSession.builder.master("local[2]")
        .config("spark.driver.bindAddress", "127.0.0.1")  # loopback only
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.memory", "4g")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--skip-spark", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="wh-bench-query-"))
    # Steps start as on an installation: modules compiled once, not at every
    # start (the cache under the workdir, so no source tree is written to).
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    data = work / f"tpch-{args.scale}"
    generate(data, args.scale)
    home = work / "wh-home"
    shutil.rmtree(home, ignore_errors=True)
    results: dict[str, dict[str, float]] = {}
    with EmbeddedWarehouse(home) as wh:
        make_tables(wh, data, args.partitions)
        warm(data, home / "blocks")
        for label, sql in QUERIES.items():
            results[label] = {
                "wh": time_wh(wh, sql, "auto"),
                "wh-dist": time_wh(wh, sql, "distributed"),
                "duckdb": time_duckdb(data, sql),
            }
    spark = None if args.skip_spark else spark_session()
    if spark is not None:
        for t in TABLES:
            spark.read.parquet(str(data / f"{t}.parquet")).createOrReplaceTempView(t)
        for label, sql in QUERIES.items():
            start = time.perf_counter()
            spark.sql(sql).collect()
            results[label]["spark"] = time.perf_counter() - start
        spark.stop()
    for label, r in results.items():
        times = ", ".join(f"{k} {v:.2f} s" for k, v in r.items())
        ratios = f"wh/duckdb {r['wh'] / r['duckdb']:.1f} (target <= 3)"
        ratios += f", wh-dist/duckdb {r['wh-dist'] / r['duckdb']:.1f}"
        if "spark" in r:
            ratios += f", wh/spark {r['wh'] / r['spark']:.2f} (target <= 1.0)"
        print(f"{label} (SF {args.scale}, {args.partitions} partitions): {times}; {ratios}")
    if args.json:
        json.dump({"scale": args.scale, "results": results}, sys.stdout, indent=2)
        print()
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
