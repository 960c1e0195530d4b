"""Steps that read plain files: a function with ``# wh: files`` finds the
job's input at ``$WH_INPUT_DIR`` and what it writes under ``$WH_OUTPUT_DIR``
becomes its output; a shell step running ``samtools view`` there gives what
the same command gives on a ``wh get`` copy, embedded and through a
controller's sandboxed steps (docs/jobs.md, "Plain files")."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from cluster import Controller, KeepPool, controller
from warehouse.cli import cli
from warehouse.jobs.files import asks_for_files

SAM = "@HD\tVN:1.6\tSO:unsorted\n@SQ\tSN:chr1\tLN:5000\n" + "".join(
    f"r{i}\t{16 if i % 3 else 0}\tchr1\t{10 + i * 7}\t60\t8M\t*\t0\t0\tACGTACGT\tIIIIIIII\n"
    for i in range(500)
)

VIEW = """#!/bin/sh
# wh: files
set -eu
samtools view "$WH_INPUT_DIR/lane 1/reads.bam" > "$WH_OUTPUT_DIR/reads.sam"
samtools view -c "$WH_INPUT_DIR/lane 1/reads.bam" > "$WH_OUTPUT_DIR/count.txt"
"""


@pytest.fixture
def samtools() -> str:
    found = shutil.which("samtools")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("no samtools (`make install-samtools`); CI must run this", pytrace=False)
        pytest.skip("no samtools (`make install-samtools`)")
    return found


def _inputs(samtools: str, where: Path) -> tuple[Path, Path]:
    """A BAM in a directory with a space in its name, and the shell function."""
    (where / "in" / "lane 1").mkdir(parents=True)
    sam = where / "reads.sam"
    sam.write_text(SAM)
    bam = where / "in" / "lane 1" / "reads.bam"
    subprocess.run([samtools, "view", "-b", "-o", str(bam), str(sam)], check=True)
    (where / "fn").mkdir()
    (where / "fn" / "view.sh").write_text(VIEW)
    (where / "fn" / "view.sh").chmod(0o755)
    return where / "in", where / "fn"


def _wh(env: dict[str, str], *args: str) -> Result:
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("WH_")}
    clean.update(env)
    result = CliRunner().invoke(cli, list(args), env=clean, catch_exceptions=False)
    assert result.exit_code == 0, (args, result.output, result.stderr)
    return result


def _same_as_on_a_copy(env: dict[str, str], samtools: str, tmp_path: Path) -> None:
    data, fn = _inputs(samtools, tmp_path)
    _wh(env, "put", str(data), "--name", "bam")
    function = _wh(env, "put", str(fn)).output.split()[-1]
    done = _wh(env, "job", "submit", f"{function}/view.sh", "--input", "bam", "--wait")
    out = done.output.split()[-1]
    _wh(env, "get", "bam", str(tmp_path / "copy"))
    on_copy = subprocess.run(
        [samtools, "view", str(tmp_path / "copy" / "lane 1" / "reads.bam")],
        capture_output=True,
        check=True,
    ).stdout
    assert on_copy.count(b"\n") == 500
    assert _wh(env, "cat", f"{out}/reads.sam").stdout_bytes == on_copy
    assert _wh(env, "cat", f"{out}/count.txt").output == "500\n"
    assert sorted(_wh(env, "ls", out).output.split()) == ["count.txt", "reads.sam"]


def test_a_shell_step_reads_its_input_as_files_embedded(
    samtools: str, tmp_path: Path, home: Path
) -> None:
    _same_as_on_a_copy({"WH_HOME": str(home), "WH_USER": "alice"}, samtools, tmp_path)


@pytest.fixture
def ctl(tmp_path: Path, keep_servers: KeepPool) -> Iterator[Controller]:
    with controller(tmp_path / "controller.db", keep_servers) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=1)
        yield c


def test_a_shell_step_reads_its_input_as_files_through_a_controller(
    samtools: str, tmp_path: Path, ctl: Controller
) -> None:
    env = {"WH_URL": ctl.url, "WH_TOKEN": ctl.user("alice")}
    _same_as_on_a_copy(env, samtools, tmp_path)


def test_a_failing_files_step_fails_and_stores_nothing(tmp_path: Path, home: Path) -> None:
    env = {"WH_HOME": str(home), "WH_USER": "alice"}
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("a\n")
    (tmp_path / "fn").mkdir()
    (tmp_path / "fn" / "bad.py").write_text(
        "# wh: files\nimport os, pathlib, sys\n"
        "text = (pathlib.Path(os.environ['WH_INPUT_DIR']) / 'a.txt').read_text()\n"
        "(pathlib.Path(os.environ['WH_OUTPUT_DIR']) / 'half').write_text(text)\n"
        "sys.exit(3)\n"
    )
    _wh(env, "put", str(tmp_path / "in"), "--name", "in")
    function = _wh(env, "put", str(tmp_path / "fn")).output.split()[-1]
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("WH_")}
    clean.update(env)
    failed = CliRunner().invoke(
        cli,
        ["job", "submit", f"{function}/bad.py", "--input", "in", "--attempts", "1", "--wait"],
        env=clean,
    )
    assert failed.exit_code == 1, failed.output
    show = _wh(env, "job", "show", "1").output
    assert "failed" in show and "exit" in show, show


def test_only_the_directive_in_the_entrys_first_lines_asks_for_files(tmp_path: Path) -> None:
    cases = {
        "shell": ("#!/bin/sh\n# wh: files\nls\n", True),
        "spaced": ("#  wh:files  \nprint()\n", True),
        "late": ("#!/bin/sh\n" + "echo\n" * 400 + "# wh: files\n", False),
        "quoted": ("echo '# wh: files'\n", False),
        "other": ("# wh: filesystem\n", False),
    }
    for name, (text, asks) in cases.items():
        (tmp_path / name).write_text(text)
        assert asks_for_files(tmp_path / name) is asks, name
    assert asks_for_files(tmp_path / "missing") is False
