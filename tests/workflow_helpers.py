"""Shared pieces of the workflow tests: a git repository of functions and a diamond."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

# Each run of a step appends a line to $WH_TEST_RAN/<tag>, else $WH_HOME/../ran/<tag>
# (to count real runs);
# the output is one file <tag>.txt listing the md5 of every input file, then the tag.
TAG = '''"""Test function: name what was read, and the tag."""
import hashlib
import os
import time
from pathlib import Path

from warehouse import step

params = step.params()
tag = params["tag"]
if os.environ.get("WH_TEST_RAN"):
    ran = Path(os.environ["WH_TEST_RAN"])
elif os.environ.get("WH_HOME"):
    ran = Path(os.environ["WH_HOME"]).parent / "ran"
else:
    ran = Path(os.environ["WH_SCRATCH"]) / "ran"
ran.mkdir(exist_ok=True)
with open(ran / tag, "a") as f:
    f.write("ran\\n")
time.sleep(float(params.get("sleep", 0)))
if params.get("fail"):
    raise SystemExit("failing on purpose")
reader = step.reader()
lines = [
    f"{hashlib.md5(reader.read_file(p)).hexdigest()}  {p}\\n" for p in sorted(reader.files)
]
out = step.StreamWriter(".")
out.add_file(f"{tag}.txt", [("".join(lines) + f"tag {tag}{VERSION}\\n").encode()])
step.output(out.finish())
'''


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def make_lab(root: Path) -> Path:
    """A git repository with tag.py; tag v1 and branch main at the first commit."""
    repo = root / "lab"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "tag.py").write_text(TAG.replace("{VERSION}", ""))
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "tag")
    git(repo, "tag", "v1")
    return repo


def new_commit(repo: Path) -> str:
    """A new commit on main whose tag.py writes something else."""
    (repo / "tag.py").write_text(TAG.replace("{VERSION}", " (v2)"))
    git(repo, "commit", "-qam", "v2")
    return git(repo, "rev-parse", "HEAD")


DIAMOND = """\
workflow: diamond
inputs:
  reads: {default: reads}
  sleep: {default: 0}
jobs:
  a:
    function: git:./lab@v1:tag.py
    input: $reads
    params: {tag: a, sleep: $sleep}
  b:
    function: git:./lab@v1:tag.py
    input: $a
    params: {tag: b, sleep: $sleep}
  c:
    function: git:./lab@main:tag.py
    input: $a
    params: {tag: c, sleep: $sleep}
  d:
    function: git:./lab@v1:tag.py
    input: {b: $b, c: $c}
    params: {tag: d}
outputs:
  final: $d
"""


def write_diamond(root: Path, text: str = DIAMOND) -> Path:
    path = root / "diamond.wf.yml"
    path.write_text(text)
    return path


def json_out(output: str) -> Any:
    """The JSON object printed on stdout (stderr may be mixed in by the runner)."""
    return json.loads(output[output.index("{") : output.rindex("}") + 1])


def ran(root: Path) -> dict[str, int]:
    """How many times each tag's step really ran (``root`` is WH_HOME's parent)."""
    d = root / "ran"
    if not d.is_dir():
        return {}
    return {p.name: len(p.read_text().splitlines()) for p in d.iterdir()}
