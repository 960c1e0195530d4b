"""What Regol asks git: a function spec's parts, a branch's commits, a range,
one revision. Local repositories are read in place; a URL is fetched into a
temporary bare repository first (the branch only)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from warehouse import gitcmd
from warehouse.errors import NotFoundError, UsageError
from warehouse.regol.model import Commit

__all__ = ["GitPolicy", "GitSpec", "Repository", "open_repository", "parse_spec"]

SUBJECT_LIMIT = 200  # characters of a commit's subject kept
MAX_COMMITS = 1000  # one request runs at most this many commits
MAX_BISECT = 100_000  # commits a bisect may search (about 17 runs)


class GitPolicy(Protocol):
    """Where a controller's git may read (a host's git_roots and git_allow)."""

    @property
    def git_roots(self) -> Sequence[str] | None: ...

    @property
    def git_allow(self) -> Sequence[str] | None: ...


@dataclass(frozen=True, slots=True)
class GitSpec:
    repository: str
    revision: str
    path: str

    def at(self, commit: str) -> str:
        """The function spec pinned to one commit."""
        return f"git:{self.repository}@{commit}:{self.path}"


def parse_spec(spec: str) -> GitSpec:
    if not spec.startswith("git:"):
        raise UsageError(f"function {spec!r} is not git:REPOSITORY@REVISION:PATH")
    repo, at, rest = spec.removeprefix("git:").rpartition("@")
    revision, colon, path = rest.partition(":")
    if not (at and colon and repo and revision and path.strip("/")):
        raise UsageError(f"function {spec!r} is not git:REPOSITORY@REVISION:PATH")
    return GitSpec(repo, revision, path.strip("/"))


def _git(gitdir: str, *args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", gitdir, *args],
        capture_output=True,
        text=True,
        check=False,
        env=env or {**os.environ, **gitcmd.GIT_ENV},  # no ext:: or fd:: transport
    )
    if done.returncode != 0:
        # git's first line says what went wrong; the rest is advice (one Error: line).
        said = next((line.strip() for line in done.stderr.splitlines() if line.strip()), "failed")
        raise UsageError(f"git {' '.join(args[:2])}: {said}")
    return done.stdout


class Repository:
    def __init__(self, gitdir: str, env: dict[str, str] | None = None) -> None:
        self.gitdir = gitdir
        # A controller's: gitcmd.clean_env (none of its operator's git setup).
        self.env = env or {**os.environ, **gitcmd.GIT_ENV}

    def commit(self, revision: str) -> str:
        if revision.startswith("-"):
            raise UsageError(f"bad revision {revision!r}")
        verify = ["rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"]
        done = subprocess.run(
            ["git", "-C", self.gitdir, *verify],
            capture_output=True,
            text=True,
            check=False,
            env=self.env,
        )
        if done.returncode != 0:
            raise NotFoundError(f"no commit {revision!r} in the repository")
        return done.stdout.strip()

    def lacking(self, commits: list[str], path: str) -> set[str]:
        """The commits whose tree has no file ``path`` (one git process for all)."""
        if not commits:
            return set()
        done = subprocess.run(
            ["git", "-C", self.gitdir, "cat-file", "--batch-check=%(objecttype)"],
            input="".join(f"{sha}:{path}\n" for sha in commits),
            capture_output=True,
            text=True,
            check=False,
            env=self.env,
        )
        if done.returncode != 0:
            said = next((x.strip() for x in done.stderr.splitlines() if x.strip()), "failed")
            raise UsageError(f"git cat-file: {said}")
        answers = done.stdout.splitlines()
        return {sha for sha, kind in zip(commits, answers, strict=True) if kind != "blob"}

    def is_branch(self, name: str) -> bool:
        done = subprocess.run(
            ["git", "-C", self.gitdir, "show-ref", "--verify", "--quiet", f"refs/heads/{name}"],
            check=False,
            env=self.env,
        )
        return done.returncode == 0

    def default_branch(self) -> str:
        return _git(self.gitdir, "symbolic-ref", "--short", "HEAD", env=self.env).strip()

    def is_ancestor(self, older: str, newer: str) -> bool:
        done = subprocess.run(
            ["git", "-C", self.gitdir, "merge-base", "--is-ancestor", older, newer],
            check=False,
            env=self.env,
        )
        return done.returncode == 0

    def describe(self, revision: str) -> Commit:
        sha = self.commit(revision)
        generation = int(
            _git(self.gitdir, "rev-list", "--count", "--first-parent", sha, env=self.env)
        )
        when, _, subject = _git(
            self.gitdir, "log", "-1", "--format=%ct%x00%s", sha, env=self.env
        ).partition("\0")
        return Commit(sha, float(when), subject.strip()[:SUBJECT_LIMIT], generation)

    def commits(self, start: str | None, end: str, limit: int = MAX_COMMITS) -> list[Commit]:
        """The first-parent chain to ``end`` (after ``start``, at most ``limit``
        commits then), oldest first."""
        tip = self.commit(end)
        total = int(_git(self.gitdir, "rev-list", "--count", "--first-parent", tip, env=self.env))
        span = tip if start is None else f"{self.commit(start)}..{tip}"
        text = _git(
            self.gitdir,
            "log",
            "--first-parent",
            "--reverse",
            "--format=%H%x00%ct%x00%s",
            span,
            env=self.env,
        )
        lines = text.splitlines()
        if len(lines) > limit and start is not None:
            raise UsageError(f"{len(lines)} commits in the range; at most {limit} at once")
        out = []
        for i, line in enumerate(lines):
            sha, when, subject = line.split("\0", 2)
            # The chain ends at tip, so the i-th of n sits n-1-i generations below it.
            generation = total - (len(lines) - 1 - i)
            out.append(Commit(sha, float(when), subject[:SUBJECT_LIMIT], generation))
        return out


@contextmanager
def open_repository(
    location: str, branch: str | None = None, host: GitPolicy | None = None
) -> Iterator[Repository]:
    """A repository to read: the directory itself, or a fetch of ``branch``;
    on a controller (``host``), only where its admin allows, with a clean
    environment (gitcmd)."""
    gitcmd.no_option(repository=location, branch=branch or "")
    allow = host.git_allow if host is not None else None
    gitcmd.check_local(location, host.git_roots if host is not None else None)
    gitcmd.check_remote(location, allow)
    with tempfile.TemporaryDirectory(prefix="wh-regol-") as tmp:
        env = None
        if allow is not None:
            os.mkdir(home := os.path.join(tmp, "home"))
            env = gitcmd.clean_env(home)
        if Path(location).is_dir():
            is_git = subprocess.run(
                ["git", "-C", location, "rev-parse", "--git-dir"],
                capture_output=True,
                check=False,
                env=env,
            )
            if is_git.returncode != 0:
                raise NotFoundError(f"no git repository at {location}")
            yield Repository(location, env)
            return
        if location.startswith(("/", "./", "../", "~")):
            # A path, not a URL: fetching it would only say so in git's words.
            raise NotFoundError(f"no git repository at {location}")
        gitdir = os.path.join(tmp, "repo.git")
        _git(tmp, "init", "--quiet", "--bare", gitdir, env=env)
        ref = branch or "HEAD"
        refspec = f"+{ref}:refs/heads/{branch or 'fetched'}"
        _git(gitdir, "fetch", "--quiet", "--", location, refspec, env=env)
        yield Repository(gitdir, env)
