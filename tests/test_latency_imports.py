"""The small commands' start: what they import, not how long they take
(docs/latency.md). A command's time is mostly its imports; these tests check
the mechanism that keeps the heavy ones out, which a busy machine cannot
blur: `wh name ls` and `wh ls NAME` load no SQLAlchemy (embedded: the
catalog's reads go through sqlite3; through a controller: no catalog at
all), and no trio nor httpx through a controller (the JSON API's client
speaks http.client), nor anything for blocks (no block is read). The sqlite3
reads are compared with the engine's on one catalog."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from cluster import Controller, ctl_fixture, pool_fixture
from conftest import wh_process
from warehouse import catalog
from warehouse.catalog.lite import LiteCatalog
from warehouse.cli import cli
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import NotFoundError, UsageError

pool = pool_fixture("module")
ctl = ctl_fixture()

# Loaded by a command that needs them; never by one that lists names or files.
HEAVY = (
    "sqlalchemy",
    "alembic",
    "trio",
    "httpx",
    "httpcore",
    "h11",
    "pygments",
    "fastapi",
    "duckdb",
)

# Through a controller, a listing of names or of a manifest's text reads no
# block: neither the keep servers' client (and its signature cache in
# sqlite3), nor the block store, nor the collection reader loads.
FOR_BLOCKS = (
    "warehouse.remote.keepclient",
    "warehouse.remote.signatures",
    "sqlite3",
    "warehouse.blocks.store",
    "warehouse.blocks.volume",
    "warehouse.collection.reader",
    "warehouse.collection.scratch",
)

_PROBE = """
import sys
from warehouse.cli import main
sys.argv[:] = ['wh', *sys.argv[1:]]
try:
    main()
except SystemExit as e:
    code = e.code
print('loaded:', ' '.join(m for m in {heavy!r} if m in sys.modules), 'rc:', code)
"""


def _loaded(
    env: dict[str, str], *args: str, heavy: tuple[str, ...] = HEAVY
) -> tuple[list[str], str]:
    """The ``heavy`` modules ``wh ARGS`` loaded in its process, and its output."""
    base = {k: v for k, v in os.environ.items() if k not in ("WH_URL", "WH_TOKEN")}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=heavy), *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    *out, last = done.stdout.splitlines()
    words = last.split()
    assert words[0] == "loaded:" and words[-2:] == ["rc:", "0"], (last, done.stderr)
    return words[1:-2], "\n".join(out)


def test_embedded_reads_load_no_sqlalchemy(tmp_path: Path) -> None:
    home = tmp_path / "home"
    data = tmp_path / "data"
    data.mkdir()
    (data / "f.txt").write_text("hello\n")
    put = wh_process("put", str(data), "--name", "x", home=home)
    assert put.returncode == 0, put.stderr
    env = {"WH_HOME": str(home)}
    loaded, out = _loaded(env, "name", "ls")
    assert loaded == [], out
    assert out.splitlines()[1].split("\t")[:2] == ["x", put.stdout.strip()]
    loaded, out = _loaded(env, "ls", "x")
    assert loaded == [], out
    assert out == "f.txt"


def test_reads_through_a_controller_load_no_catalog_nor_httpx_nor_blocks(
    tmp_path: Path, ctl: Controller
) -> None:
    token = ctl.user("alice")
    env = {"WH_HOME": str(tmp_path / "client"), "WH_URL": ctl.url, "WH_TOKEN": token}
    data = tmp_path / "data"
    data.mkdir()
    (data / "f.txt").write_text("hello\n")
    put = wh_process("put", str(data), "--name", "x", env=env)
    assert put.returncode == 0, put.stderr
    loaded, out = _loaded(env, "name", "ls", heavy=HEAVY + FOR_BLOCKS)
    assert loaded == [], out
    assert out.splitlines()[1].split("\t")[:2] == ["x", put.stdout.strip()]
    loaded, out = _loaded(env, "ls", "x", heavy=HEAVY + FOR_BLOCKS)
    assert loaded == [], out
    assert out == "f.txt"
    # The same client reading a file's bytes does make the block client.
    loaded, out = _loaded(env, "cat", "x/f.txt", heavy=FOR_BLOCKS)
    assert "warehouse.remote.keepclient" in loaded, out
    assert out == "hello"


def test_a_small_query_loads_no_catalog_library(tmp_path: Path, ctl: Controller) -> None:
    """`wh query` over a small table is answered in the client (docs/query.md):
    DuckDB, but no SQLAlchemy embedded (the catalog read through sqlite3)
    and none of a controller's libraries through one."""
    table = tmp_path / "t"
    table.mkdir()
    columns = [["k", "BIGINT"], ["v", "BIGINT"]]
    meta = f'{{"format": "csv", "partitions": 1, "hash": "h", "columns": {columns}}}'
    (table / "_table.json").write_text(meta.replace("'", '"'))
    (table / "part-00000.csv").write_text("k,v\n1,10\n2,20\n3,30\n")
    remote = {"WH_HOME": str(tmp_path / "client"), "WH_URL": ctl.url, "WH_TOKEN": ctl.user("a")}
    for env in ({"WH_HOME": str(tmp_path / "home")}, remote):
        put = wh_process("put", str(table), "--name", "t", env=env)
        assert put.returncode == 0, put.stderr
        loaded, out = _loaded(env, "query", "SELECT sum(v) AS s FROM t")
        assert loaded == ["duckdb"], (env, out)
        assert out == "s\n60", out


def test_sqlite3_reads_equal_the_engines(tmp_path: Path) -> None:
    """The statements of catalog.lite against catalog's own queries, on one catalog."""
    data = tmp_path / "data"
    data.mkdir()
    with EmbeddedWarehouse(tmp_path / "home") as wh:
        pdhs = []
        for i, text in enumerate(["a", "b", "c"]):
            (data / "f").write_text(text * (i + 1))
            pdhs.append(wh.put([data]).pdh)
        # Case, code points past ASCII's, and names that are prefixes of others.
        for i, name in enumerate(["a", "ab", "abc", "B", "b", "x.y", "a@b", "zz"]):
            wh.set_name(name, pdhs[i % 3], expect=None)
        wh.set_name("ab", pdhs[2], expect=pdhs[1])  # a second version
        engine = wh.engine
        lite = LiteCatalog.open(wh.home / "warehouse.db")
        assert lite is not None
        try:
            for prefix in ["", "a", "ab", "abc", "abcd", "b", "B", "x.", "q"]:
                assert lite.list_names(prefix) == catalog.list_names(engine, prefix), prefix
            for name in ["a", "ab", "B", "zz"]:
                assert lite.get_name(name) == catalog.get_name(engine, name)
            with pytest.raises(NotFoundError):
                lite.get_name("nothing")
            with pytest.raises(UsageError):
                lite.get_name("bad name")
            for pdh in pdhs:
                stored = catalog.get_collection(engine, pdh).manifest_blocks
                assert lite.manifest_blocks(pdh) == stored
            with pytest.raises(NotFoundError):
                lite.manifest_blocks("d41d8cd98f00b204e9800998ecf8427e+0")
        finally:
            lite.close()


def test_sqlite3_reads_only_a_current_catalog(tmp_path: Path) -> None:
    """No file, or a catalog a migration must bring up to date: the engine's way."""
    path = tmp_path / "home" / "warehouse.db"
    assert LiteCatalog.open(path) is None
    with EmbeddedWarehouse(tmp_path / "home") as wh:
        wh.list_names()
        wh.engine  # noqa: B018 - made and migrated
    current = LiteCatalog.open(path)
    assert current is not None
    current.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0016_step_input_bytes'")
    conn.close()
    assert LiteCatalog.open(path) is None


def test_every_listed_command_shows_its_help() -> None:
    """Commands load by name when run: each one `wh --help` lists must load
    and print its help (a command added to the list with a wrong path fails)."""
    listing = CliRunner().invoke(cli, ["--help"])
    assert listing.exit_code == 0, listing.output
    lines = listing.output.split("Commands:\n", 1)[1].splitlines()
    # A command's line starts with two spaces; a folded help's next line, more.
    names = [line.split()[0] for line in lines if line[:2] == "  " and line[2:3] != " "]
    assert "ls" in names and "query" in names
    for name in names:
        shown = CliRunner().invoke(cli, [name, "--help"])
        assert shown.exit_code == 0, (name, shown.output, shown.exception)
        assert "Usage: " in shown.output, name
