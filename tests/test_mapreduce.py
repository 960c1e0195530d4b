"""builtin:mapreduce: an inverted index by Python and by shell functions against a
plain-Python oracle, combiners, spilling, bad mapper output, Dask = local."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest

from jobs_helpers import run_job
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import UsageError
from warehouse.jobs.builtins.wordcount import partitions_of
from warehouse.jobs.counters import step_counters, totals
from warehouse.jobs.jobstore import list_jobs, list_steps
from warehouse.mapreduce import MapReduceSpec

PYTHON_CODE = """
from warehouse.mapreduce import current_file


def index(line):
    for word in set(line.split()):
        yield word, current_file()


def unique(word, files):
    for f in sorted(set(files)):
        yield word, f


def join(word, files):
    yield word + "\\t" + ",".join(sorted(set(files)))
"""

# Hadoop Streaming: records on stdin, key<TAB>value lines out.
SHELL_MAP = r"""#!/bin/sh
tr ' ' '\n' | grep -v '^$' | LC_ALL=C sort -u | sed "s|\$|	$WH_MAP_FILE|"
"""
SHELL_REDUCE = r"""#!/bin/sh
LC_ALL=C sort -u | awk -F'\t' '
  $1 != k { if (NR > 1) print k "\t" v; k = $1; v = $2; next }
  { v = v "," $2 }
  END { if (NR > 0) print k "\t" v }'
"""

WORDS = [f"w{i:03d}" for i in range(300)] + ["alpha", "beta", "Zeta", "a"]


def make_corpus(root: Path, files: int, lines: int, seed: int = 7) -> Path:
    rng = random.Random(seed)
    for n in range(files):
        d = root / f"dir{n % 3}"
        d.mkdir(parents=True, exist_ok=True)
        body = "".join(
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 12))) + "\n"
            for _ in range(lines)
        )
        (d / f"doc{n:03d}.txt").write_text(body)
    return root


def oracle(root: Path) -> dict[str, list[str]]:
    found: dict[str, set[str]] = {}
    for path in root.rglob("*.txt"):
        for word in path.read_text().split():
            found.setdefault(word, set()).add(str(path.relative_to(root)))
    return {w: sorted(files) for w, files in found.items()}


def read_index(wh: EmbeddedWarehouse, pdh: str, reducers: int) -> dict[str, list[str]]:
    reader = wh.reader(pdh)
    assert sorted(reader.files) == [f"part-{r:05d}" for r in range(reducers)]
    index: dict[str, list[str]] = {}
    for path in sorted(reader.files):
        keys = []
        for line in reader.read_file(path).decode().splitlines():
            word, files = line.split("\t")
            assert word not in index
            index[word] = files.split(",")
            keys.append(word.encode())
        assert keys == sorted(keys)  # each part sorted by key bytes
    return index


def code_collection(wh: EmbeddedWarehouse, tmp: Path) -> str:
    d = tmp / "code"
    (d / "bin").mkdir(parents=True)
    (d / "invert.py").write_text(PYTHON_CODE)
    (d / "bin" / "map.sh").write_text(SHELL_MAP)
    (d / "bin" / "reduce.sh").write_text(SHELL_REDUCE)
    return wh.put([d]).pdh


PY = {"mapper": "invert:index", "reducer": "invert:join"}
SH = {"mapper": "bin/map.sh", "reducer": "bin/reduce.sh"}


@pytest.mark.slow
def test_inverted_index_python_and_shell_equal_the_oracle(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    corpus = make_corpus(tmp_path / "corpus", files=9, lines=40)
    make_corpus(tmp_path / "corpus" / "big", files=1, lines=500)  # ~15 KB: cut in 4 or more
    pdh = wh.put([corpus]).pdh
    code = code_collection(wh, tmp_path)
    want = oracle(corpus)
    outputs = {}
    for label, functions in {"python": PY, "shell": SH}.items():
        params = {**functions, "code": code, "reducers": 3, "split_size": 4000}
        job = run_job(wh, "builtin:mapreduce", pdh, params=params)
        assert job.state == "complete", (label, job.error)
        assert read_index(wh, job.output_pdh, 3) == want, label
        outputs[label] = job.output_pdh
        steps = list_steps(wh.engine, job.id)
        _by_level, total = totals(steps)
        maps = [s for s in steps if s.level == 1]
        assert len(maps) >= 3 + 4  # splits of at most 4000 bytes
        assert total["map_records_in"] == sum(
            len(p.read_text().splitlines()) for p in corpus.rglob("*.txt")
        )
        assert total["shuffle_bytes"] == total["map_output_bytes"] > 0
        assert total["reduce_records_out"] == len(want)
        assert all(step_counters(s)["map_records_in"] > 0 for s in maps)
    # The same lines in the same parts: byte for byte the same output.
    assert outputs["python"] == outputs["shell"]


@pytest.mark.slow
def test_combiner_changes_no_byte_and_spilling_reducer_matches(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    corpus = make_corpus(tmp_path / "corpus", files=20, lines=1000, seed=3)  # ~0.6 MB
    pdh = wh.put([corpus]).pdh
    code = code_collection(wh, tmp_path)
    base = {**PY, "code": code, "reducers": 2, "split_size": "256K"}
    plain = run_job(wh, "builtin:mapreduce", pdh, params=base)
    assert plain.state == "complete", plain.error
    assert read_index(wh, plain.output_pdh, 2) == oracle(corpus)
    _, plain_total = totals(list_steps(wh.engine, plain.id))
    assert plain_total["reduce_spilled_runs"] == 0

    combined = run_job(wh, "builtin:mapreduce", pdh, params={**base, "combiner": "invert:unique"})
    assert combined.state == "complete", combined.error
    assert combined.output_pdh == plain.output_pdh
    _, comb_total = totals(list_steps(wh.engine, combined.id))
    assert comb_total["shuffle_bytes"] < plain_total["shuffle_bytes"]

    small = run_job(wh, "builtin:mapreduce", pdh, params={**base, "sort_memory": "1M"})
    assert small.state == "complete", small.error
    _, small_total = totals(list_steps(wh.engine, small.id))
    assert plain_total["shuffle_bytes"] > 2 * (1 << 20)  # each reducer had more than 1M
    assert small_total["reduce_spilled_runs"] > 0 and small_total["map_spilled_runs"] > 0
    assert small.output_pdh == plain.output_pdh


@pytest.mark.slow
def test_dask_gives_the_same_output_as_local(
    wh: EmbeddedWarehouse, tmp_path: Path, dask_cluster: str
) -> None:
    corpus = make_corpus(tmp_path / "corpus", files=6, lines=30)
    pdh = wh.put([corpus]).pdh
    code = code_collection(wh, tmp_path)
    params = {**PY, "combiner": "invert:unique", "code": code, "reducers": 2}
    local = run_job(wh, "builtin:mapreduce", pdh, params=params)
    assert local.state == "complete", local.error
    dask = run_job(
        wh, "builtin:mapreduce", pdh, params=params, executor=f"dask:{dask_cluster}", reuse=False
    )
    assert dask.state == "complete", dask.error
    assert dask.output_pdh == local.output_pdh


def test_code_from_a_git_revision_is_pinned(wh: EmbeddedWarehouse, tmp_path: Path) -> None:
    corpus = make_corpus(tmp_path / "corpus", files=3, lines=10)
    pdh = wh.put([corpus]).pdh
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "invert.py").write_text(PYTHON_CODE)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "index"], check=True)
    job = run_job(wh, "builtin:mapreduce", pdh, params={**PY, "code": f"git:{repo}@HEAD"})
    assert job.state == "complete", job.error
    assert read_index(wh, job.output_pdh, 4) == oracle(corpus)
    params = json.loads(job.params)
    assert len(params["code_commit"]) == 40 and params["code"].count("+") == 1


def test_a_boolean_is_no_reducer_count() -> None:
    base = {"mapper": "m:f", "reducer": "m:g"}
    for reducers in (True, False, 2.0, "2"):
        with pytest.raises(UsageError, match="reducers must be 1 to"):
            MapReduceSpec.from_params({**base, "reducers": reducers})
    assert MapReduceSpec.from_params({**base, "reducers": 3}).reducers == 3


LONE_SURROGATE_CODE = """
def key(line):
    yield "\\ud800" + line, 1


def echo(line):
    yield line, 1


def out(key, values):
    yield "\\udfff" + key
"""


@pytest.mark.slow
def test_text_utf8_cannot_hold_fails_its_step_without_a_traceback(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    d = tmp_path / "code"
    d.mkdir()
    (d / "lone.py").write_text(LONE_SURROGATE_CODE)
    code = wh.put([d]).pdh
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("x\n")
    pdh = wh.put([tmp_path / "in"]).pdh
    for mapper, reducer, level in (("lone:key", "lone:out", 1), ("lone:echo", "lone:out", 2)):
        params = {"mapper": mapper, "reducer": reducer, "reducers": 1, "code": code}
        job = run_job(wh, "builtin:mapreduce", pdh, params=params, max_attempts=1)
        assert job.state == "failed"
        failed = [s for s in list_steps(wh.engine, job.id) if s.failures]
        assert [s.level for s in failed] == [level]
        tail = failed[0].log_tail or ""
        assert "mapreduce: " in tail and "UTF-8 can hold" in tail, tail
        assert "Traceback" not in tail, tail


def test_wordcount_partitions_must_be_a_count() -> None:
    assert partitions_of({}) == 4
    assert partitions_of({"partitions": 3}) == partitions_of({"partitions": "3"}) == 3
    for bad in (True, 2.5, "x", "", 0, -1, None, [2]):
        with pytest.raises(SystemExit, match="wordcount: partitions must be 1 to"):
            partitions_of({"partitions": bad})


@pytest.mark.slow
def test_wordcount_with_bad_partitions_fails_with_one_line(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("x y\n")
    pdh = wh.put([tmp_path / "in"]).pdh
    job = run_job(wh, "builtin:wordcount", pdh, params={"partitions": "many"}, max_attempts=1)
    assert job.state == "failed"
    failed = [s for s in list_steps(wh.engine, job.id) if s.failures]
    tail = failed[0].log_tail or ""
    assert "wordcount: partitions must be 1 to" in tail and "Traceback" not in tail, tail


def test_a_mapper_line_without_a_tab_fails_its_step_naming_the_line(
    wh: EmbeddedWarehouse, tmp_path: Path, run
) -> None:  # type: ignore[no-untyped-def]
    corpus = make_corpus(tmp_path / "corpus", files=1, lines=5)
    pdh = wh.put([corpus]).pdh
    params = {"mapper": "sed 's/^/no tab here: /'", "reducer": "cat", "reducers": 1}
    job = run_job(wh, "builtin:mapreduce", pdh, params=params, max_attempts=1)
    assert job.state == "failed"
    failed = [s for s in list_steps(wh.engine, job.id) if s.failures]
    assert [s.level for s in failed] == [1]
    assert "without a tab: 'no tab here: " in (failed[0].log_tail or "")
    shown = run("job", "show", str(job.id)).stdout
    assert "without a tab" in shown

    # Bad parameters are refused at submission: no job is made to fail later.
    with pytest.raises(UsageError, match="the reducer parameter is needed"):
        run_job(wh, "builtin:mapreduce", pdh, params={"mapper": "x:y"}, max_attempts=1)
    submit = ["job", "submit", "builtin:mapreduce", "--input", pdh, "--param", "mapper=cat"]
    for extra, said in (
        (["--param", "reducer=cat", "--param", "reducers=0"], "reducers must be 1 to"),
        (["--param", "reducer=cat", "--param", "split_size=abc"], "split_size must be"),
        (["--param", "reducer=cat", "--param", "bogus=1"], "unknown parameters bogus"),
    ):
        assert said in run(*submit, *extra, code=2).stderr
    assert len(list_jobs(wh.engine)) == 1
