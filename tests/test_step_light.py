"""A Python step of the embedded warehouse reads its input, earlier steps'
intermediates and the catalog without loading SQLAlchemy (its import and the
catalog's migration check cost a step more than a second under load)."""

from __future__ import annotations

import json
from pathlib import Path

from jobs_helpers import make_text, put_function, run_job
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

