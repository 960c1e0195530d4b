"""A 4-job diamond of real jobs (A → B, A → C, {B, C} → D) for the lineage tests.

The jobs run a git function of a test repository: A and B at its first
commit, C and D at its second; D reads the combined collection of B's and
C's outputs (``./b`` and ``./c``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from warehouse.manifest import Manifest

# One step: list every file of the input with its MD5, under the params'
# tag, and report that one file as the job's output (one process a job).
TAG = """import hashlib
from warehouse import step

r = step.reader()
lines = [hashlib.md5(r.read_file(p)).hexdigest() + "  " + p + "\\n" for p in sorted(r.files)]
text = (step.params()["tag"] + "\\n" + "".join(lines)).encode()
out = step.StreamWriter(".")
out.add_file("result.txt", [text])
step.output(out.finish())
"""


def git(repo: Path, *args: str) -> str:
    env_args = ["-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    done = subprocess.run(
        ["git", "-C", str(repo), *env_args, *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def function_repo(root: Path) -> tuple[Path, str, str]:
    """A repository with ``tag.py`` at two commits; (repo, first commit, second commit)."""
    repo = root / "lab"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "tag.py").write_text(TAG)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "one")
    first = git(repo, "rev-parse", "HEAD")
    (repo / "README").write_text("the second revision\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "two")
    return repo, first, git(repo, "rev-parse", "HEAD")


def combined(parts: dict[str, Manifest]) -> Manifest:
    """Each part's streams re-rooted under ``./dir`` (manifest text only)."""
    lines = []
    for d, manifest in parts.items():
        for line in manifest.format().splitlines():
            stream, _, rest = line.partition(" ")
            lines.append(f"./{d}{stream[1:]} {rest}")
    return Manifest.parse("".join(line + "\n" for line in lines)).normalized()


@dataclass(frozen=True)
class Diamond:
    a_input: str
    other_input: str
    jobs: dict[str, int]  # A, B, C, D, and E (reads other_input)
    outputs: dict[str, str]
    bc: str  # the combined collection D read
    commits: tuple[str, str]


# submit(function, input, params) -> (job id, output PDH), the job run to its end
Submit = Callable[[str, str, dict[str, str]], tuple[int, str]]


def make_diamond(
    tmp: Path,
    put: Callable[[Path], str],
    submit: Submit,
    manifest: Callable[[str], Manifest],
    combine: Callable[[dict[str, str]], str],
) -> Diamond:
    repo, first, second = function_repo(tmp)
    data = tmp / "raw"
    data.mkdir()
    (data / "reads.txt").write_text("acgt\n" * 100)
    a_input = put(data)
    other = tmp / "other"
    other.mkdir()
    (other / "x.txt").write_text("something else\n")
    other_input = put(other)
    at_first, at_main = f"git:{repo}@{first}:tag.py", f"git:{repo}@main:tag.py"
    ids, outs = {}, {}
    ids["A"], outs["A"] = submit(at_first, a_input, {"tag": "A"})
    ids["B"], outs["B"] = submit(at_first, outs["A"], {"tag": "B"})
    ids["C"], outs["C"] = submit(at_main, outs["A"], {"tag": "C"})
    bc = combine({"b": outs["B"], "c": outs["C"]})
    ids["D"], outs["D"] = submit(at_main, bc, {"tag": "D"})
    ids["E"], outs["E"] = submit(at_main, other_input, {"tag": "E"})  # unrelated
    return Diamond(a_input, other_input, ids, outs, bc, (first, second))
