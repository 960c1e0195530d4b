"""Built-in functions against independent oracles, on the local and the Dask executor."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest

from jobs_helpers import make_compressed, make_text, run_job
from warehouse.embedded import EmbeddedWarehouse

ORACLE = {
    "md5": "md5sum",
    "sha1": "sha1sum",
    "sha256": "sha256sum",
    "sha512": "sha512sum",
    "blake2b": "b2sum",
}
CAT = {b"\x1f\x8b": "zcat", b"BZh": "bzcat", b"\xfd7zXZ": "xzcat"}


def oracle_hash(path: Path, algorithm: str) -> str:
    head = path.read_bytes()[:6]
    cat = next((c for magic, c in CAT.items() if head.startswith(magic)), "cat")
    pipe = f"{cat} < '{path}' | {ORACLE[algorithm]}"
    out = subprocess.run(["sh", "-c", pipe], capture_output=True, text=True, check=True).stdout
    return out.split()[0]


def listings(wh: EmbeddedWarehouse, pdh: str) -> dict[str, str]:
    reader = wh.reader(pdh)
    found = {}
    for path in reader.files:
        directory = path.rpartition("/")[0]
        for line in reader.read_file(path).decode().splitlines():
            digest, name = line.split("  ", 1)
            found[f"{directory}/{name}" if directory else name] = digest
    return found


@pytest.mark.timeout(150)
def test_every_builtin_matches_its_oracle_and_dask_matches_local(
    wh: EmbeddedWarehouse, tmp_path: Path, dask_cluster: str
) -> None:
    comp = make_compressed(tmp_path / "comp")
    text = make_text(tmp_path / "text")
    comp_pdh = wh.put([comp]).pdh
    text_pdh = wh.put([text]).pdh
    local: dict[str, str] = {}
    for algorithm in ORACLE:
        job = run_job(wh, "builtin:zhash", comp_pdh, params={"algorithm": algorithm})
        assert job.state == "complete", job.error
        expected = {
            str(p.relative_to(comp)): oracle_hash(p, algorithm)
            for p in sorted(comp.rglob("*"))
            if p.is_file()
        }
        assert listings(wh, job.output_pdh) == expected
        local[f"zhash-{algorithm}"] = job.output_pdh
    files = wh.manifest(job.output_pdh).files()
    assert set(files) == {"blake2bsum.txt", "a/blake2bsum.txt", "b c/blake2bsum.txt"}

    copy = run_job(wh, "builtin:copy", comp_pdh)
    assert copy.output_pdh == comp_pdh
    local["copy"] = copy.output_pdh

    pivot = run_job(wh, "builtin:pivot", text_pdh)
    assert pivot.state == "complete", pivot.error
    out = wh.reader(pivot.output_pdh)
    assert sorted(out.files) == sorted(f"frame{f}/cycle{c}.txt" for f in range(4) for c in range(3))
    for f in range(4):
        for c in range(3):
            want = (text / f"cycle{c}" / f"frame{f}.txt").read_bytes()
            assert out.read_file(f"frame{f}/cycle{c}.txt") == want
    local["pivot"] = pivot.output_pdh

    wc = run_job(wh, "builtin:wordcount", text_pdh, params={"partitions": 3})
    assert wc.state == "complete", wc.error
    counted: Counter[str] = Counter()
    reader = wh.reader(wc.output_pdh)
    assert sorted(reader.files) == ["part-0000.tsv", "part-0001.tsv", "part-0002.tsv"]
    for path in reader.files:
        for line in reader.read_file(path).decode().splitlines():
            word, n = line.split("\t")
            assert word not in counted
            counted[word] = int(n)
    oracle = Counter(w for p in text.rglob("*.txt") for w in p.read_text("utf-8").split())
    assert counted == oracle
    local["wordcount"] = wc.output_pdh

    executor = f"dask:{dask_cluster}"
    specs = {"zhash-sha1": ("builtin:zhash", comp_pdh, {"algorithm": "sha1"})}
    specs |= {
        "copy": ("builtin:copy", comp_pdh, {}),
        "pivot": ("builtin:pivot", text_pdh, {}),
        "wordcount": ("builtin:wordcount", text_pdh, {"partitions": 3}),
    }
    for label, (function, key, params) in specs.items():
        job = run_job(wh, function, key, params=params, executor=executor, reuse=False)
        assert job.state == "complete", (label, job.error)
        assert job.output_pdh == local[label], label
