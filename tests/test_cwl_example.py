"""examples/cwl/: a read-mapping workflow (bwa index, bwa mem, samtools sort,
samtools index) run by `wh cwl run` on inputs named in the warehouse, and
compared byte for byte with `cwltool --no-container`'s outputs (docs/cwl.md,
"The example")."""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import Runner

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "cwl"
BIN = Path(sys.executable).parent


@pytest.fixture(autouse=True)
def tools_installed() -> None:
    missing = [t for t in ("bwa", "samtools") if shutil.which(t) is None]
    try:
        import cwltool  # noqa: F401
    except ImportError:
        missing.append("cwltool (pip install -e '.[cwl]')")
    if missing:  # CI must run the example: `make test` installs bwa and samtools
        if os.environ.get("CI"):
            pytest.fail(f"the CWL example needs {', '.join(missing)}", pytrace=False)
        pytest.skip(f"the CWL example needs {', '.join(missing)} (make install-bwa)")


def _view(bam: Path) -> str:
    done = subprocess.run(
        ["samtools", "view", "-h", "--no-PG", str(bam)], capture_output=True, text=True, check=True
    )
    return done.stdout


def _files(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())


def test_the_example_runs_on_warehouse_inputs_and_again_runs_nothing(
    run: Runner, home: Path, tmp_path: Path
) -> None:
    pdh = run("put", str(EXAMPLE / "data"), "--name", "cwl-example").stdout.split()[-1]
    out = tmp_path / "out"
    res = run(
        "cwl", "run", str(EXAMPLE / "map.cwl"), str(EXAMPLE / "job-wh.yml"),
        "--outdir", str(out), "--name-outputs", "ex1",
    )  # fmt: skip
    assert "wh cwl: 4 jobs: 4 ran, 0 reused" in res.stderr
    assert _files(out) == [
        "index/ref.fa", "index/ref.fa.amb", "index/ref.fa.ann", "index/ref.fa.bwt",
        "index/ref.fa.pac", "index/ref.fa.sa", "sorted.bam", "sorted.bam.bai",
    ]  # fmt: skip
    mapped = subprocess.run(
        ["samtools", "view", "-c", "-F", "4", str(out / "sorted.bam")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert int(mapped.stdout) >= 290  # of 300 reads sampled from the reference
    assert "SO:coordinate" in _view(out / "sorted.bam").splitlines()[0]
    # The same inputs named by PDH (Arvados' keep: spelling): the same jobs, none run.
    job = tmp_path / "job-keep.yml"
    job.write_text(
        f"ref: {{class: File, location: 'keep:{pdh}/ref.fa'}}\n"
        f"reads: {{class: File, location: 'keep:{pdh}/reads.fq'}}\n"
    )
    again = run("cwl", "run", str(EXAMPLE / "map.cwl"), str(job), "--name-outputs", "ex2")
    assert "wh cwl: 4 jobs: 0 ran, 4 reused (0 steps run)" in again.stderr
    shown = run("name", "ls").stdout
    assert "ex1.bam" in shown and "ex2.bam" in shown


def test_the_example_gives_the_bytes_cwltool_gives(run: Runner, home: Path, tmp_path: Path) -> None:
    ours, theirs = tmp_path / "wh", tmp_path / "cwltool"
    run("cwl", "run", str(EXAMPLE / "map.cwl"), str(EXAMPLE / "job.yml"), "--outdir", str(ours))
    done = subprocess.run(
        [str(BIN / "cwltool"), "--quiet", "--no-container", "--outdir", str(theirs),
         str(EXAMPLE / "map.cwl"), str(EXAMPLE / "job.yml")],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert _files(ours) == _files(theirs) and len(_files(ours)) == 8
    _, differ, errors = filecmp.cmpfiles(ours, theirs, _files(ours), shallow=False)
    assert (differ, errors) == ([], [])
    # The BAM as records too (what the issue asks to compare), header and all.
    assert _view(ours / "sorted.bam") == _view(theirs / "sorted.bam")
