"""Functions: resolve a spec to an immutable version, and unpack it to run.

- ``builtin:<name>``: ``<name>.py`` of the package's built-ins; their source
  is stored as a collection, so the job records its PDH like any other.
- ``git:<repository>@<revision>:<path>``: the revision is resolved to a
  commit now (``git rev-parse``), the commit's tree (``git archive``) is
  stored as a collection, and the commit is recorded.
- ``<pdh>/<path>``: an executable inside a stored collection.

A version is run from ``$WH_HOME/jobs/functions/<pdh>/``, unpacked once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from warehouse import gitcmd
from warehouse.blocks import Locator
from warehouse.blocks.store import BlockStore, StoredBlock
from warehouse.collection.reader import CollectionReader
from warehouse.collection.writer import write_tree
from warehouse.embedded import PutResult
from warehouse.errors import NotFoundError, UsageError, WarehouseError
from warehouse.jobs.files import WRAPPER as FILES_WRAPPER
from warehouse.jobs.files import asks_for_files
from warehouse.keys import is_pdh
from warehouse.manifest import Manifest

__all__ = [
    "FunctionVersion",
    "builtin_dir",
    "command_for",
    "materialize",
    "pin_code",
    "resolve",
]


class _Store(Protocol):
    @property
    def git_roots(self) -> Sequence[str] | None: ...  # None: read anywhere (gitcmd)

    @property
    def git_allow(self) -> Sequence[str] | None: ...  # None: fetch from anywhere (gitcmd)

    @property
    def store(self) -> BlockStore: ...

    def put(self, paths: list[Path]) -> PutResult: ...

    def manifest(self, key: str) -> Manifest: ...

    def reader(self, key: str) -> CollectionReader: ...

    def resolve(self, key: str) -> str: ...


@dataclass(frozen=True, slots=True)
class FunctionVersion:
    spec: str  # as the user gave it
    pdh: str
    path: str
    commit: str | None = None


def builtin_dir() -> Path:
    return Path(__file__).resolve().parent / "builtins"


def resolve(wh: _Store, spec: str) -> FunctionVersion:
    if spec.startswith("builtin:"):
        return _builtin(wh, spec)
    if spec.startswith("git:"):
        return _git(wh, spec)
    head, _, path = spec.partition("/")
    if is_pdh(head) and path:
        _check_entry(wh.manifest(head), head, path)
        return FunctionVersion(spec, head, path)
    raise UsageError(
        f"function {spec!r} is not builtin:NAME, git:REPOSITORY@REVISION:PATH or PDH/PATH"
    )


def _builtin(wh: _Store, spec: str) -> FunctionVersion:
    name = spec.removeprefix("builtin:")
    files = sorted(p for p in builtin_dir().glob("*.py") if not p.name.startswith("_"))
    if f"{name}.py" not in {p.name for p in files}:
        known = ", ".join(p.stem for p in files)
        raise NotFoundError(f"no built-in function {name!r} (there are: {known})")
    return FunctionVersion(spec, _stored(wh, files), f"{name}.py")


class _Naming:
    """A block store that only names the blocks a put would store."""

    def put(self, data: bytes | bytearray | memoryview, *, md5: str | None = None) -> StoredBlock:
        return StoredBlock(Locator(md5 or hashlib.md5(data).hexdigest(), len(data)), False)

    def flush(self) -> None:
        pass

    def get(self, locator: Locator, *, cache: bool = True) -> bytes:
        raise NotFoundError(f"block {locator.key} is not stored")

    def exists(self, locator: Locator) -> bool:
        return False

    def put_range(self, fd: int, offset: int, size: int) -> Locator:
        # Read whole: only a few built-in files are named here, and a put
        # without a spool never stores its text from a file range anyway.
        return Locator(hashlib.md5(os.pread(fd, size, offset)).hexdigest(), size)


def _stored(wh: _Store, files: list[Path]) -> str:
    """The PDH of ``files`` stored as a collection, put only if that collection
    is not already recorded with every block: pinning a built-in at each
    submission then reads a few small files and writes nothing (a put records
    the collection, its listing and the block writes in three transactions,
    each waiting for the disk)."""
    planned = write_tree(_Naming(), files, workers=1).manifest
    try:
        held = wh.manifest(planned.pdh)
        if all(loc.is_empty or wh.store.exists(loc) for loc in held.blocks()):
            return planned.pdh
    except WarehouseError:
        pass  # not recorded, or damaged: the put below stores it again
    return wh.put(files).pdh


def _git(wh: _Store, spec: str) -> FunctionVersion:
    body = spec.removeprefix("git:")
    repo, at, rest = body.rpartition("@")
    revision, colon, path = rest.partition(":")
    if not (at and colon and repo and revision and path.strip("/")):
        raise UsageError(f"function {spec!r} is not git:REPOSITORY@REVISION:PATH")
    pdh, commit = _git_tree(wh, repo, revision)
    path = path.strip("/")
    _check_entry(wh.manifest(pdh), pdh, path)
    return FunctionVersion(spec, pdh, path, commit)


def pin_code(wh: _Store, spec: str) -> tuple[str, str | None]:
    """A ``code`` parameter pinned at submission: (collection PDH, commit or None).

    ``git:REPOSITORY@REVISION`` is resolved and stored like a git function's
    tree; anything else is a PDH or a name, resolved to its PDH now.
    """
    if spec.startswith("git:"):
        repo, at, revision = spec.removeprefix("git:").rpartition("@")
        if not (at and repo and revision):
            raise UsageError(f"code {spec!r} is not git:REPOSITORY@REVISION, a PDH or a name")
        return _git_tree(wh, repo, revision)
    return wh.resolve(spec), None


def _git_tree(wh: _Store, repo: str, revision: str) -> tuple[str, str]:
    """The commit ``revision`` names, and its tree stored as a collection."""
    gitcmd.no_option(repository=repo, revision=revision)
    gitcmd.check_local(repo, wh.git_roots)
    gitcmd.check_remote(repo, wh.git_allow)
    clean = wh.git_allow is not None  # a controller: none of its operator's git setup

    def git(*args: str) -> str:
        return gitcmd.run(args, clean=clean)

    local = gitcmd.local_path(repo)
    # The git directory checked is the one read (a swapped `.git` file is not followed).
    checked = None
    if local is not None and Path(local).is_dir():
        checked = gitcmd.check_local_repository(local, wh.git_roots)
    with tempfile.TemporaryDirectory(prefix="wh-git-") as tmp:
        if Path(repo).is_dir() and checked is not None:
            gitdir = checked
        else:  # a URL: fetch just that revision
            gitdir = os.path.join(tmp, "repo.git")
            git("init", "--quiet", "--bare", gitdir)
            git("-C", gitdir, "fetch", "--quiet", "--depth=1", "--", repo, revision)
            revision = "FETCH_HEAD"
        commit = git("-C", gitdir, "rev-parse", "--verify", f"{revision}^{{commit}}")
        commit = commit.strip()
        tree = Path(tmp) / "tree"
        tree.mkdir()
        archive = Path(tmp) / "tree.tar"
        # A commit of no files archives to a tar that tarfile cannot open.
        if not git("-C", gitdir, "ls-tree", "--name-only", commit).strip():
            raise NotFoundError(f"commit {commit[:12]} of {repo} holds no files")
        git("-C", gitdir, "archive", "--format=tar", f"--output={archive}", commit)
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        pdh = wh.put([tree]).pdh
    return pdh, commit


def _check_entry(manifest: Manifest, pdh: str, path: str) -> None:
    if path not in manifest.files():
        raise NotFoundError(f"no file {path!r} in function collection {pdh}")


def materialize(wh: _Store, root: Path, pdh: str, path: str) -> Path:
    """The directory holding version ``pdh`` unpacked (done once, atomically)."""
    final = root / pdh
    if final.is_dir():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{pdh}.", dir=root))
    try:
        reader = wh.reader(pdh)
        for rel in reader.files:
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as f:
                for chunk in reader.iter_file(rel):
                    f.write(chunk)
        (tmp / path).chmod(0o755)
        try:
            tmp.rename(final)
        except OSError:  # another manager unpacked it first
            if not final.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def command_for(function_dir: Path, path: str) -> list[str]:
    """How to run the entry point: Python files with this interpreter, others as is."""
    entry = str(function_dir / path)
    # -P: the entry's directory does not shadow modules.
    argv = [sys.executable, "-P", entry] if path.endswith(".py") else [entry]
    if asks_for_files(function_dir / path):  # `# wh: files` (jobs/files.py)
        return [sys.executable, "-P", "-m", FILES_WRAPPER, *argv]
    return argv
