"""What the CWL tests share: the check that cwltool and `wh-cwl-runner` are
installed (a skip here, a failure under CI, which must run them), and the
small sort tool several of them run."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent

# A tool of one input file, sorted to stdout.
SORT = """\
cwlVersion: v1.2
class: CommandLineTool
baseCommand: [sort]
inputs:
  f: {type: File, inputBinding: {position: 1}}
stdout: sorted.txt
outputs:
  sorted: {type: stdout}
"""


def need(problem: str | None) -> None:
    """Nothing when ``problem`` is None; else skip, or fail under CI."""
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"CWL tests: {problem}; CI must run them", pytrace=False)
    pytest.skip(problem)


@pytest.fixture(autouse=True)
def cwltool_installed() -> None:
    """Every test of a module that imports this fixture needs cwltool and the runner."""
    try:
        import cwltool  # noqa: F401
    except ImportError:
        need("cwltool is not installed (pip install -e '.[cwl]')")
    need(None if shutil.which("wh-cwl-runner", path=str(BIN)) else "no wh-cwl-runner in the venv")
