"""A git repository whose function's output changes at commit 5 and which fails
from commit 7 on; commits a day apart so the chart spreads them out."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

FUNCTION = """from warehouse import step

VALUE = "{value}"
# revision {number}
{extra}
w = step.StreamWriter(".")
w.add_file("out.txt", [f"value {{VALUE}}\\n".encode()])
step.output(w.finish())
"""


def git(repo: Path, *args: str, when: str | None = None) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    if when:
        env.update(GIT_AUTHOR_DATE=when, GIT_COMMITTER_DATE=when)
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return done.stdout.strip()


def make_repo(repo: Path) -> list[str]:
    """Eight commits on ``main`` of ``fn.py``; their hashes, oldest first.

    Every commit changes the file (so no run is reused from another commit),
    commit 5 changes the output, commit 7 makes the function fail.
    """
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    commits = []
    for n in range(1, 9):
        value = "1" if n < 5 else "2"
        extra = "raise SystemExit(3)" if n >= 7 else ""
        (repo / "fn.py").write_text(FUNCTION.format(value=value, number=n, extra=extra))
        git(repo, "add", ".")
        subject = {5: "c5 changes the value", 7: "c7 breaks it"}.get(n, f"c{n}")
        git(repo, "commit", "-q", "-m", subject, when=f"2026-01-0{n}T10:00:00Z")
        commits.append(git(repo, "rev-parse", "HEAD"))
    return commits
