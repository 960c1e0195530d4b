"""A small `wh query` answered in the client (docs/query.md, docs/latency.md):
no job and nothing recorded, every block it reads checked, big tables and
--name still a job, and a private-mode user who may not read a table refused
as before, on SQLite and PostgreSQL catalogs. The rows of every path are
compared with DuckDB's in tests/test_query.py and tests/test_query_bad.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import Controller, KeepPool, controller
from conftest import Runner
from disk_helpers import rot
from permission_helpers import wh_as
from warehouse import catalog
from warehouse.embedded import EmbeddedWarehouse
from warehouse.query import inclient

ROWS = "k,v\n1,10\n2,20\n3,30\n"


def _table_dir(root: Path, rows: str = ROWS) -> Path:
    """A CSV table of one partition as `wh table create` makes one, to be put."""
    root.mkdir(parents=True)
    meta = {
        "format": "csv",
        "partitioned_by": None,
        "partitions": 1,
        "hash": "h",
        "columns": [["k", "BIGINT"], ["v", "BIGINT"]],
    }
    (root / "_table.json").write_text(json.dumps(meta))
    (root / "part-00000.csv").write_text(rows)
    return root


@pytest.fixture
def small(run: Runner, tmp_path: Path) -> Runner:
    run("put", str(_table_dir(tmp_path / "t")), "--name", "t")
    return run


def test_a_small_query_runs_here_and_records_nothing(small: Runner) -> None:
    run = small
    jobs, collections = run("job", "ls").stdout, run("collection", "ls").stdout
    out = run("query", "SELECT sum(v) AS s, count(*) AS n FROM t")
    assert out.stdout == "s\tn\n60\t3\n"
    assert out.stderr == "(1 row; answered in the client, no job)\n"
    shown = json.loads(run("query", "--json", "SELECT k FROM t ORDER BY k").stdout)
    assert shown == {"job": None, "pdh": None, "columns": ["k"], "rows": [[1], [2], [3]]} | {
        "total_rows": 3
    }
    explained = run("query", "--explain", "SELECT count(*) FROM t").stdout
    assert explained.startswith(f"in the client, no job: it reads and checks {len(ROWS)} bytes")
    assert run("job", "ls").stdout == jobs
    assert run("collection", "ls").stdout == collections
    # A result to keep needs a job; the client path keeps none.
    for flags in (["--name", "r"], ["--no-wait"]):
        err = run("query", "--plan", "client", *flags, "SELECT 1 AS x FROM t", code=2).stderr
        assert err.startswith("Error: query: --plan client keeps no result"), err
    assert run("job", "ls").stdout == jobs


def test_a_named_or_big_query_is_a_job(small: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    """--name and --no-wait make a job; so do tables over the bound, which is
    the bytes of the files the query reads (the partitions, not _table.json)."""
    run = small
    named = run("query", "--name", "r", "SELECT sum(v) AS s FROM t")
    assert named.stderr.startswith("(1 row; job "), named.stderr
    later = run("query", "--no-wait", "SELECT count(*) AS n FROM t")  # a job to look at later
    assert later.stdout.startswith("job "), later.stdout
    assert run("query", "SELECT s FROM r").stdout == "s\n60\n"
    monkeypatch.setattr(inclient, "SMALL_BYTES", len(ROWS))
    here = run("query", "SELECT count(*) AS n FROM t")
    assert here.stderr == "(1 row; answered in the client, no job)\n"
    monkeypatch.setattr(inclient, "SMALL_BYTES", len(ROWS) - 1)
    big = run("query", "SELECT count(*) AS n FROM t")
    assert big.stdout == "n\n3\n"
    assert big.stderr.startswith("(1 row; job "), big.stderr
    # --plan client runs here whatever the size.
    assert run("query", "--plan", "client", "SELECT count(*) AS n FROM t").stdout == "n\n3\n"


def test_a_damaged_block_fails_the_query_here(run: Runner, home: Path, tmp_path: Path) -> None:
    """The client reads each block through the verifying reader: a bad copy
    of a column chunk fails the query (exit 5, naming the block), no row
    comes back, and the copy is moved aside as on any read."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "t.csv").write_text("k,v\n" + "".join(f"{i},{i * i}\n" for i in range(1000)))
    run("put", str(src), "--name", "src")
    run("table", "create", "t", "--from", "src/t.csv")  # each column chunk in its own block
    with EmbeddedWarehouse(home) as wh:
        entry = wh.manifest("t").files()["part-00000.parquet"]
    assert len(entry.pieces) > 3  # head, a chunk per column, tail
    md5 = entry.pieces[2].locator.md5  # v's chunk
    block = home / "blocks" / md5[:3] / md5
    rot(block)
    result = run("query", "SELECT sum(v) FROM t", code=5)
    assert result.stdout == ""
    assert result.stderr.startswith("Error: ") and result.stderr.count("\n") == 1
    assert md5 in result.stderr, result.stderr
    assert not block.exists()
    assert list(block.parent.glob(md5 + ".corrupt.*"))


@pytest.fixture
def ctl(catalog_url: str, keep_servers: KeepPool, tmp_path: Path) -> Iterator[Controller]:
    with controller(catalog_url, keep_servers, scratch=tmp_path) as c:
        c.state.start_jobs(c.url, tmp_path / "controller-jobs", "local", cpus=1)
        yield c


def test_private_mode_refuses_a_table_the_user_may_not_read(
    ctl: Controller, tmp_path: Path
) -> None:
    """Through a controller, each catalog: bob may not read alice's table, so
    his query is refused as one over a table that does not exist, in the
    client and as a job alike; once shared, the client answers him."""
    alice, bob = ctl.user("alice"), ctl.user("bob")
    wh_as(ctl, ctl.admin_token, "perms-mode", "private")
    wh_as(ctl, alice, "put", str(_table_dir(tmp_path / "t")), "--name", "secret")
    sql = "SELECT sum(v) AS s FROM {}"
    for how in ("auto", "client", "one-step"):
        hidden = wh_as(ctl, bob, "query", "--plan", how, sql.format("secret"), code=4)
        missing = wh_as(ctl, bob, "query", "--plan", how, sql.format("nosuch"), code=4)
        assert hidden.stdout == "" and "unknown table 'secret'" in hidden.stderr, hidden.stderr
        assert hidden.stderr.replace("secret", "nosuch") == missing.stderr, how
    assert wh_as(ctl, bob, "job", "ls").stdout.count("\n") <= 1  # no job of his
    # Alice's own query runs in her client, reading through the keep servers.
    mine = wh_as(ctl, alice, "query", sql.format("secret"))
    assert mine.stdout == "s\n60\n" and "answered in the client" in mine.stderr
    wh_as(ctl, alice, "share", "secret", "bob")
    shared = wh_as(ctl, bob, "query", sql.format("secret"))
    assert shared.stdout == "s\n60\n" and "answered in the client" in shared.stderr
    job = wh_as(ctl, bob, "query", "--plan", "one-step", sql.format("secret"))
    assert job.stdout == "s\n60\n" and job.stderr.startswith("(1 row; job "), job.stderr


def test_an_embedded_warehouse_answers_as_its_other_reads_do(
    run: Runner, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Embedded, the warehouse is its user's own (docs/permissions.md): in
    private mode another user named by WH_USER reads what `wh cat` reads,
    in the client and as a job alike (the files are theirs to open anyway)."""
    run("put", str(_table_dir(tmp_path / "t")), "--name", "t")
    run("perms-mode", "private")
    with EmbeddedWarehouse(home) as wh:
        catalog.add_user(wh.engine, "bob")
    monkeypatch.setenv("WH_USER", "bob")
    assert run("cat", "t/part-00000.csv").stdout == ROWS
    for how in ("client", "one-step"):
        assert run("query", "--plan", how, "SELECT sum(v) AS s FROM t").stdout == "s\n60\n", how
