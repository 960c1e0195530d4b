"""Shared helpers of the job tests: sample inputs and running a job to its end."""

from __future__ import annotations

import bz2
import fcntl
import gzip
import lzma
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from warehouse import jobs
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs.jobrecords import JobRecord


@pytest.fixture(scope="session")
def dask_cluster() -> Iterator[str]:
    """A real Dask cluster of 2 worker processes; its scheduler's address.
    (Its HTTP routes on any free port: the default 8787 may be taken.)"""
    yield from local_dask(2)


def local_dask(workers: int) -> Iterator[str]:
    """A real Dask cluster of ``workers`` processes, one thread each; its
    scheduler's address while the generator is not closed."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address="127.0.0.1:0",
        memory_limit=0,
    ) as c:
        yield c.scheduler_address


@pytest.fixture(scope="session")
def slurm_cluster() -> str:
    """A real one-node Slurm cluster (slurmctld, slurmd, munged) started by
    scripts/slurm.sh; its slurm.conf, also set as SLURM_CONF. Skipped where it
    cannot run (not root), except in CI (``CI`` set), where that fails."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "slurm.sh"
    problem = ""
    if os.geteuid() != 0 and not os.environ.get("SLURM_CONF"):
        problem = "scripts/slurm.sh must run as root (or set SLURM_CONF to a running cluster)"
    conf = os.environ.get("SLURM_CONF", "")
    if not problem and (os.geteuid() == 0 or not conf):
        proc = subprocess.run([script], capture_output=True, text=True, check=False)
        conf = proc.stdout.strip()
        if proc.returncode != 0:
            problem = f"scripts/slurm.sh failed: {proc.stderr.strip()[-500:]}"
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"Slurm: {problem}; CI must test the Slurm executor", pytrace=False)
        pytest.skip(f"Slurm: {problem}")
    os.environ["SLURM_CONF"] = conf
    return conf


@pytest.fixture(autouse=True)
def slurm_turn(request: pytest.FixtureRequest) -> Iterator[None]:
    """A case on the one Slurm cluster waits for its turn: the test processes
    (``make test`` runs two) share it, and some cases count what it runs or
    need its node free. Other cases pass straight through."""
    node = request.node
    callspec = getattr(node, "callspec", None)
    on_slurm = callspec is not None and callspec.params.get("executor") == "slurm"
    if not on_slurm and "slurm_cluster" not in request.fixturenames:
        yield
        return
    with open(Path(tempfile.gettempdir()) / "wh-test-slurm.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # the lock goes with the file's closing


@pytest.fixture(params=["local", "dask", "slurm"])
def executor(request: pytest.FixtureRequest) -> str:
    """Each executor in turn, as a job names it."""
    if request.param == "local":
        return "local"
    if request.param == "slurm":
        request.getfixturevalue("slurm_cluster")
        return "slurm"
    return f"dask:{request.getfixturevalue('dask_cluster')}"


def make_compressed(root: Path) -> Path:
    """Two directories of gzip, bzip2, xz, plain and empty files (names hide the kind)."""
    a, b = root / "a", root / "b c"
    a.mkdir(parents=True)
    b.mkdir()
    text = b"".join(b"line %d of some text\n" % i for i in range(3000))
    (a / "one.gz").write_bytes(gzip.compress(text, mtime=0))
    (a / "two.dat").write_bytes(bz2.compress(text[:5000]))
    (a / "three").write_bytes(lzma.compress(text[:777]))
    (a / "plain.txt").write_bytes(b"not compressed\n")
    (a / "empty").write_bytes(b"")
    (b / "multi.gz").write_bytes(gzip.compress(b"first\n", mtime=0) + gzip.compress(b"2nd\n"))
    (b / "random.bin").write_bytes(os.urandom(20000))
    (root / "top.xz").write_bytes(lzma.compress(b"at the top\n"))
    return root


def make_text(root: Path) -> Path:
    """Three directories of words, four files each (for pivot and wordcount)."""
    words = ["acgt", "gatc", "tata", "ccgg", "read", "lane", "tile", "Ünïcode"]
    for c in range(3):
        d = root / f"cycle{c}"
        d.mkdir(parents=True)
        for f in range(4):
            body = " ".join(words[(c * 7 + f * 3 + i) % len(words)] for i in range(50 + f * c))
            (d / f"frame{f}.txt").write_text(body + "\n", encoding="utf-8")
    return root


def run_job(wh: EmbeddedWarehouse, function: str, key: str, **kw: Any) -> JobRecord:
    """Submit and run the manager here until the job is finished."""
    executor = kw.pop("executor", "local")
    params = kw.pop("params", {})
    record = jobs.submit(wh, jobs.JobRequest(function, key, params, executor=executor, **kw))
    if record.state == "queued":
        assert jobs.run_manager(wh, executor, until_job=record.id)
    return jobs.get_job(wh.engine, record.id)


def put_function(wh: EmbeddedWarehouse, tmp: Path, name: str, text: str) -> str:
    """Store one script as a collection; return the function spec PDH/NAME."""
    d = tmp / f"fn-{name}"
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(text)
    return f"{wh.put([d]).pdh}/{name}"


def job_row(**changes: Any) -> dict[str, Any]:
    """A complete job's row as ``jobs.records.insert_jobs`` takes it (a
    catalog's worth of jobs made without running any), with ``changes``."""
    row: dict[str, Any] = {
        "function": "builtin:copy",
        "function_pdh": "d41d8cd98f00b204e9800998ecf8427e+0",
        "function_path": "copy",
        "input_pdh": "d41d8cd98f00b204e9800998ecf8427e+0",
        "params": "{}",
        "cpus": 1,
        "memory": 0,
        "max_attempts": 1,
        "priority": 0,
        "executor": "local",
        "state": "complete",
        "reuse_key": "k",
        "submitted_by": "alice",
    }
    return row | changes
