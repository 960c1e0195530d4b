"""`wh query` and `wh table create` with bad input, and shapes beyond TPC-H:
one `Error:` line with the documented exit code, nothing read outside the
query's tables, and the rows DuckDB gives over the same files by both plans."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import Runner

CSV = "id,k,g,n\n1,1,a,10\n2,2,b,\n3,1,a,30\n4,,,5\n5,3,b,7\n6,2,c,100\n7,3,,\n8,1,c,2\n"


@pytest.fixture
def small(run: Runner, tmp_path: Path) -> Runner:
    """Table ``t`` (8 rows, NULLs in keys and values) in 2 partitions on ``k``."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "t.csv").write_text(CSV)
    run("put", str(src), "--name", "src")
    run("table", "create", "t", "--from", "src/t.csv", "--partition-by", "k", "--partitions", "2")
    return run


def one_error(result: object) -> str:
    err: str = result.stderr  # type: ignore[attr-defined]
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    assert result.stdout == "", result.stdout  # type: ignore[attr-defined]
    return err


def test_a_query_reads_no_file_but_its_tables(small: Runner) -> None:
    """Table functions are refused at submission; a query job submitted by
    hand with SQL that reads a file fails in its step: DuckDB there may read
    only the job's own files."""
    run = small
    for sql in (
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT count(*) FROM t, read_text('/etc/hostname')",
        "SELECT * FROM t WHERE g IN (SELECT * FROM glob('/etc/*'))",
    ):
        err = one_error(run("query", sql, code=2))
        assert "only tables named in the catalog can be read" in err, err
    out = json.loads(run("query", "--json", "SELECT count(*) AS n FROM t").stdout)
    shown = json.loads(run("job", "show", str(out["job"]), "--json").stdout)
    plan = {
        "mode": "single",
        "sql": "SELECT * FROM read_text('/etc/hostname')",
        "tables": {"t": {"role": "all", "format": "parquet"}},
    }
    args = ["--input", shown["input_pdh"], "--param", f"plan={json.dumps(plan)}"]
    job = run("job", "submit", "builtin:query", *args, "--attempts", "1", "--wait", code=1)
    number = job.stdout.split()[1].rstrip(":")
    assert "file system operations are disabled" in run("job", "logs", number).stdout
