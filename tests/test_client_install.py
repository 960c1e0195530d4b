"""A client-only install: the client's commands never import the [server],
[dask] or [postgres] extras, and a command that needs one says which."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import make_tree

# Run `wh ARGS...` in a fresh interpreter where the extras cannot be imported.
PROBE = """
import sys
BLOCKED = {"fastapi", "starlette", "uvicorn", "uvloop", "jinja2", "dask", "distributed", "psycopg"}

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker())
sys.argv[:] = ["wh", *sys.argv[1:]]
from warehouse.cli import main
main()
"""


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    env["WH_HOME"] = str(tmp_path / "home")
    return subprocess.run(
        [sys.executable, "-c", PROBE, *args], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_client_commands_run_without_the_extras(tmp_path: Path) -> None:
    src = make_tree(tmp_path / "src")
    for args in (
        ("put", str(src), "--name", "t"),
        ("ls", "t"),
        ("get", "--no-write", "t"),
        ("cat", "t/hello.txt"),
        ("name", "log", "t"),
        ("config",),
        ("job", "ls"),
    ):
        done = run(tmp_path, *args)
        assert done.returncode == 0, (args, done.stderr)
        assert "Traceback" not in done.stderr


def test_a_server_command_names_its_extra(tmp_path: Path) -> None:
    done = run(tmp_path, "serve", "--listen", "127.0.0.1:0")
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("Error: this needs "), done.stderr
    assert "pip install 'warehouse[server]'" in done.stderr
    assert "Traceback" not in done.stderr
