"""Shared helpers of the job tests: sample inputs and running a job to its end."""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
from pathlib import Path
from typing import Any

from warehouse import jobs
from warehouse.embedded import EmbeddedWarehouse
from warehouse.jobs.records import JobRecord


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
