"""Running git for specs any user may write (``git:REPOSITORY@REVISION:PATH``).

A controller runs git as itself for every user, so: no argument may be an
option (a repository ``--upload-pack=CMD`` runs CMD), fetches use only the
ordinary transports (no ``ext::`` command, no ``fd::``), and a repository on
the controller's own disk is read only under the directories its admin
allowed (``wh serve --git-root``): otherwise any user could store, as a
collection everyone may read, any repository the controller's user can
read; nor may the repository git finds there lie elsewhere (a directory
with no repository of its own, in which git looks up the tree; a ``.git``
file, a worktree's common directory or object alternates naming another).
The embedded warehouse, one user on their own machine, reads any.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit

from warehouse.errors import ForbiddenError, UsageError

__all__ = ["GIT_ENV", "check_local", "check_local_repository", "local_path", "no_option", "run"]

GIT_ENV = {"GIT_PROTOCOL_FROM_USER": "0", "GIT_ALLOW_PROTOCOL": "http:https:git:ssh:file"}


def run(args: Sequence[str], *, what: int = 3) -> str:
    """git's standard output; a failure is git's first line (the rest is advice)."""
    done = subprocess.run(
        ["git", *args], capture_output=True, text=True, check=False, env={**os.environ, **GIT_ENV}
    )
    if done.returncode != 0:
        said = next((line.strip() for line in done.stderr.splitlines() if line.strip()), "")
        raise UsageError(f"git {' '.join(args[:what])}: {said or f'exit status {done.returncode}'}")
    return done.stdout


def no_option(**values: str) -> None:
    """Refuse a repository or revision git would read as an option."""
    for what, value in values.items():
        if value.startswith("-"):
            raise UsageError(f"git {what} {value!r} starts with '-'")


def local_path(repo: str) -> str | None:
    """The directory a repository names on this machine (a path or a file://
    URL), or None for a remote one."""
    if repo.startswith("file:"):
        return unquote(urlsplit(repo).path)
    if "://" in repo or (":" in repo.split("/", 1)[0] and not Path(repo).exists()):
        return None  # a URL, or scp-like ssh (host:path)
    return repo


def check_local(repo: str, roots: Sequence[str] | None) -> None:
    """Refuse a repository on this machine outside ``roots`` (None: any is read)."""
    if roots is None:
        return
    path = local_path(repo)
    if path is None:
        return
    real = os.path.realpath(path)
    for root in roots:
        top = os.path.realpath(root)
        if os.path.commonpath([real, top]) == top:
            return
    raise ForbiddenError(
        f"git repository {repo!r} is on the controller's disk outside the directories "
        "its admin allows (wh serve --git-root): use a URL the controller can fetch"
    )


def check_local_repository(path: str, roots: Sequence[str] | None) -> str:
    """The repository git reads for the directory ``path`` (itself under
    ``roots``): its git directory, refused when any part of it (git
    directory, common directory, object alternates) lies outside ``roots``."""
    if roots is None:
        return path
    found = run(["-C", path, "rev-parse", "--absolute-git-dir", "--git-common-dir"])
    places = [os.path.join(path, line) for line in found.splitlines() if line]
    if not places:
        return path
    objects = os.path.join(places[-1], "objects")
    try:
        # Each line another object store git reads (relative: to this one).
        text = Path(objects, "info", "alternates").read_text(errors="replace")
    except OSError:
        text = ""
    places += [os.path.join(objects, line) for line in text.splitlines() if line.strip()]
    for place in places:
        try:
            check_local(place, roots)
        except ForbiddenError:
            raise ForbiddenError(
                f"git repository {path!r} keeps its history outside the directories "
                "its admin allows (wh serve --git-root): use a URL the controller can fetch"
            ) from None
    return places[0]
