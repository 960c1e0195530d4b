"""Shared fixtures: a fresh embedded warehouse per test, and ways to run `wh`."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from installations import installation, keep_servers  # noqa: F401 (fixtures)
from jobs_helpers import dask_cluster, executor, slurm_cluster, slurm_turn  # noqa: F401 (fixtures)
from postgres import catalog_engine, catalog_url, pg_admin, pg_url  # noqa: F401 (fixtures)
from warehouse.cli import cli
from warehouse.embedded import EmbeddedWarehouse

WH_BIN = str(Path(sys.executable).with_name("wh"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``slow`` run first (in their order, then the others in
    theirs): `make test`'s two processes take work from each other (``--dist
    worksteal``), so the run ends on short tests, not on one process running
    a long one alone. Every process sorts alike, as xdist requires."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients keep signed locators under $XDG_CACHE_HOME: one per test, not the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


@pytest.fixture
def ram_dir(tmp_path: Path) -> Iterator[Path]:
    """A scratch directory on a RAM file system where there is one, else
    under ``tmp_path``: for the tests of many files or blocks, which measure
    memory, not the disk (on a busy disk, making and syncing them would take
    most of their time)."""
    ram = "/dev/shm"
    with tempfile.TemporaryDirectory(dir=ram if os.access(ram, os.W_OK) else tmp_path) as d:
        yield Path(d)


@pytest.fixture(params=["native", "python"])
def small_file_writes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A get's small files written by the native library, then from Python
    alone (as where it is not built): a module's tests run both ways."""
    from warehouse.native import files

    if request.param == "python":
        monkeypatch.setattr(files, "_lib", [None])
        monkeypatch.setenv("WH_NATIVE_FILES", "0")  # and in `wh` run as a process
    elif not files.available():
        pytest.skip("the native file library is not built here")
    return str(request.param)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "wh-home"
    monkeypatch.setenv("WH_HOME", str(h))
    monkeypatch.setenv("WH_USER", "alice")
    return h


@pytest.fixture
def wh(home: Path) -> Iterator[EmbeddedWarehouse]:
    with EmbeddedWarehouse(home) as w:
        yield w


class Runner:
    """Runs `wh` in-process through click, the way a user would call it."""

    def __init__(self) -> None:
        self.runner = CliRunner()

    def __call__(self, *args: str, code: int = 0, input: bytes | None = None) -> Result:
        result = self.runner.invoke(cli, list(args), input=input, catch_exceptions=False)
        assert result.exit_code == code, (args, result.exit_code, result.output, result.stderr)
        return result


@pytest.fixture
def run(home: Path) -> Runner:
    return Runner()


def wh_process(
    *args: str, home: Path | None = None, env: dict[str, str] | None = None, **kw: object
) -> subprocess.CompletedProcess[str]:
    """`wh` as a real subprocess (for concurrency and crash tests)."""
    env = {**os.environ, **(env or {}), **({"WH_HOME": str(home)} if home else {})}
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [WH_BIN, *args], env=env, capture_output=True, text=True, check=False, **kw
    )


def make_tree(root: Path) -> Path:
    """A small tree with every awkward kind of name and file."""
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty dir" / "inner empty").mkdir(parents=True)
    (root / "hello.txt").write_bytes(b"hello\n")
    (root / "empty").write_bytes(b"")
    (root / "sub" / "with space.txt").write_bytes(b"space " * 100)
    (root / "sub" / "colon:name").write_bytes(b"colon\n")
    (root / "sub" / "back\\slash").write_bytes(b"backslash\n")
    (root / "sub" / "deeper" / "Übergrößé 日本.dat").write_bytes(os.urandom(5000))
    (root / "sub" / "deeper" / "tab\tand\nnewline").write_bytes(b"odd\n")
    (root / "a b").mkdir()
    (root / "a b" / "x").write_bytes(b"x")
    (root / "a").mkdir()
    (root / "a" / "y").write_bytes(b"y" * 70000)
    return root
