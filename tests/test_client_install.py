"""A client-only install: the client's commands never import the [server],
[dask] or [postgres] extras, and a command that needs one says which."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from packaging.requirements import Requirement

from conftest import WH_BIN, make_tree

ROOT = Path(__file__).resolve().parent.parent

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


# -- a client installed alone: only what `pip install warehouse` brings ---------

# Installed in every process of the test (the `wh` commands and the steps they
# start) through PYTHONPATH: a module of an installed distribution that the
# client's own requirements do not bring cannot be imported.
SITECUSTOMIZE = """
import sys

BLOCKED = frozenset({blocked!r})


class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, Blocker())
"""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _client_distributions() -> set[str]:
    """The distributions `pip install warehouse` installs: the requirements in
    pyproject.toml (no extras) and, from what is installed, theirs."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [(Requirement(r), "") for r in project["dependencies"]]
    seen = {"warehouse"}
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = _canonical(req.name)
        if name in seen:
            continue
        seen.add(name)
        for wanted in ("", *req.extras):
            todo.extend((Requirement(r), wanted) for r in metadata.requires(req.name) or [])
    return seen


def _client_alone(tmp_path: Path) -> dict[str, str]:
    """An environment in which only the client's requirements can be imported."""
    client = _client_distributions()
    blocked = sorted(
        module
        for module, dists in metadata.packages_distributions().items()
        if not any(_canonical(d) in client for d in dists)
    )
    site = tmp_path / "client-alone"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE.format(blocked=blocked))
    env = {k: v for k, v in os.environ.items() if not k.startswith("WH_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    env["WH_HOME"] = str(tmp_path / "home")
    return env


@pytest.mark.slow
def test_a_client_installed_alone_makes_a_table_and_queries_it(tmp_path: Path) -> None:
    env = _client_alone(tmp_path)
    # The environment really is a client alone: an extra's module is refused.
    probe = subprocess.run(
        [sys.executable, "-c", "import fastapi"], env=env, capture_output=True, text=True
    )
    assert "No module named 'fastapi'" in probe.stderr, probe.stderr
    src = tmp_path / "src"
    src.mkdir()
    (src / "t.csv").write_text("k,x\n" + "".join(f"{i % 3},{i}\n" for i in range(100)))
    names = pa.table({"k": [0, 1, 2], "name": ["zero", "one", "two"]})
    pq.write_table(names, src / "names.parquet")

    def wh(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([WH_BIN, *args], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (args, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    wh("put", "--no-progress", str(src), "--name", "src")
    wh("table", "create", "t", "--from", "src/t.csv", "--partition-by", "k", "--partitions", "2")
    wh("table", "create", "names", "--from", "src/names.parquet")
    sql = "select name, count(*), sum(x) from t join names using (k) group by name order by name"
    want = {"zero": 0, "one": 1, "two": 2}
    for how in ("client", "one-step"):  # answered here, and by a job's step
        rows = json.loads(wh("query", "--json", "--plan", how, sql).stdout)["rows"]
        assert rows == [
            [n, 34 - (k > 0), sum(range(k, 100, 3))] for n, k in sorted(want.items())
        ], how
