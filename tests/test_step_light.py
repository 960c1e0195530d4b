"""A Python step of the embedded warehouse reads its input, earlier steps'
intermediates and the catalog without loading SQLAlchemy (its import and the
catalog's migration check cost a step more than a second under load)."""

from __future__ import annotations

import json
from pathlib import Path

from jobs_helpers import make_text, put_function, run_job
from warehouse import jobs
from warehouse.embedded import EmbeddedWarehouse

HEAVY = ("sqlalchemy", "alembic")

STEPS = """
import json, sys
from warehouse import step
from warehouse.collection.reader import CollectionReader

def heavy():
    return sorted(m for m in HEAVY if m in sys.modules)

if step.level() == 0:
    names = sorted(step.input_manifest().files())
    out = step.StreamWriter("./passed")
    out.add_file("names.txt", ["\\n".join(names).encode()])
    out.add_file("heavy.json", [json.dumps(heavy()).encode()])
    step.intermediate(out.finish())
    step.queue(1, names[0])
else:
    ((number, fragment),) = step.intermediates(0)
    passed = CollectionReader(step.warehouse().store, fragment)
    report = {
        "from_step": number,
        "names": passed.read_file("passed/names.txt").decode().split("\\n"),
        "heavy_at_0": json.loads(passed.read_file("passed/heavy.json")),
        "first": step.reader().read_file(step.step_input()).decode(),
        "heavy": heavy(),
    }
    # The full catalog still opens when asked for (then with SQLAlchemy).
    from warehouse.jobs.jobstore import list_steps

    report["steps_at_0"] = len(list_steps(step.warehouse().engine, step.job(), level=0))
    out = step.StreamWriter(".")
    out.add_file("report.json", [json.dumps(report).encode()])
    step.output(out.finish())
""".replace("HEAVY", repr(HEAVY))


def test_a_python_step_reads_without_the_database_library(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    key = wh.put([make_text(tmp_path / "in")]).pdh
    fn = put_function(wh, tmp_path, "light.py", STEPS)
    job = run_job(wh, fn, key)
    assert job.state == "complete", job.error
    report = json.loads(wh.reader(str(job.output_pdh)).read_file("report.json"))
    names = sorted(wh.manifest(key).files())
    assert report["names"] == names
    assert report["from_step"] == 0
    assert report["first"] == wh.reader(key).read_file(names[0]).decode()
    assert report["first"].strip()
    assert report["heavy_at_0"] == [] and report["heavy"] == []
    assert report["steps_at_0"] == 1


def _table(wh: EmbeddedWarehouse, tmp_path: Path) -> tuple[str, int]:
    """A one-partition table ``t`` (k, v) of 200,000 rows; the sum of v."""
    import duckdb

    src = tmp_path / "src"
    src.mkdir()
    rows = 200_000
    duckdb.sql(
        f"COPY (SELECT range AS k, range * 2 AS v FROM range({rows})) "
        f"TO '{src / 't.parquet'}' (FORMAT parquet)"
    )
    params = {"format": "parquet", "path": "t.parquet", "partitions": 1}
    made = run_job(wh, "builtin:table", wh.put([src]).pdh, params=params)
    assert made.state == "complete", made.error
    wh.set_name("t", str(made.output_pdh), expect=None)
    return str(made.output_pdh), rows * (rows - 1)


def test_a_one_step_query_reports_nothing_read_from_a_corrupt_block(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    """The one-step plan runs DuckDB while the blocks it reads are checked:
    a block failing its check fails the step (the reader names it), and no
    result is reported, whatever DuckDB made of the bad bytes."""
    from warehouse.query.catalog import compile_query, read_rows

    table, total = _table(wh, tmp_path)
    _, input_pdh, params = compile_query(wh, "SELECT sum(v) AS s FROM t", "auto")
    good = run_job(wh, "builtin:query", input_pdh, params=params, reuse=False)
    assert good.state == "complete", good.error
    assert read_rows(wh, str(good.output_pdh), 10)[1] == [(total,)]
    steps = jobs.list_steps(wh.engine, good.id)
    assert len(steps) == 1 and '"copied_bytes": 0' in (steps[0].counters or ""), steps

    entry = wh.manifest(table).files()["part-00000.parquet"]
    # Every block of column data (the partition is cut at its column chunks,
    # between a head and a tail block): DuckDB may read it without noticing.
    data_pieces = entry.pieces[1:-1] if len(entry.pieces) > 2 else entry.pieces
    for piece in data_pieces:
        block = wh.volume.path_for(piece.locator.md5)
        block.chmod(0o600)
        data = bytearray(block.read_bytes())
        data[len(data) // 2] ^= 0xFF
        block.write_bytes(bytes(data))
    bad = run_job(wh, "builtin:query", input_pdh, params=params, reuse=False, max_attempts=1)
    assert bad.state == "failed"
    assert bad.output_pdh is None
    (step,) = jobs.list_steps(wh.engine, bad.id)
    assert "corrupt" in (step.log_tail or "").lower(), step.log_tail


def test_a_stored_builtin_is_pinned_without_writing(wh: EmbeddedWarehouse) -> None:
    """Pinning a built-in at each submission computes its PDH and, once the
    collection is stored, writes nothing (no block write, no transaction)."""
    from warehouse import catalog
    from warehouse.jobs.functions import builtin_dir, resolve

    def writes() -> int:
        return sum(r.writes for r in catalog.accounting(wh.engine))

    first = resolve(wh, "builtin:query")
    files = sorted(p for p in builtin_dir().glob("*.py") if not p.name.startswith("_"))
    assert first.pdh == wh.put(files).pdh  # the very collection a put makes
    before = writes()
    again = resolve(wh, "builtin:wordcount")
    assert again.pdh == first.pdh and again.path == "wordcount.py"
    assert writes() == before
    # A block of it lost: the next pin stores it again.
    (block,) = [b for b in wh.manifest(first.pdh).blocks() if not b.is_empty]
    wh.volume.path_for(block.md5).unlink()
    assert resolve(wh, "builtin:query").pdh == first.pdh
    assert wh.store.exists(block)
    assert writes() > before
