"""Workflows on the embedded warehouse, through `wh workflow` as a user runs it:
a diamond of real git functions and real step processes, reuse, a change, failure."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import pytest

from conftest import Runner
from warehouse import jobs
from warehouse.embedded import EmbeddedWarehouse
from warehouse.workflows import runstore
from warehouse.workflows.plan import NodeState, decide, may_move, readers_of
from warehouse.workflows.spec import parse_input_option, parse_workflow
from workflow_helpers import json_out, make_lab, new_commit, ran, write_diamond


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    return make_lab(tmp_path)


@pytest.fixture
def reads(tmp_path: Path, wh: EmbeddedWarehouse) -> str:
    d = tmp_path / "reads"
    (d / "lane1").mkdir(parents=True)
    (d / "lane1" / "r1.fq").write_text("@r1\nACGT\n+\nIIII\n")
    (d / "r2.fq").write_text("@r2\nGGCC\n+\nIIII\n")
    return wh.put([d], name="reads").pdh


def by_hand(wh: EmbeddedWarehouse, function: str, key: str, tag: str) -> jobs.JobRecord:
    record = jobs.submit(wh, jobs.JobRequest(function, key, {"tag": tag, "sleep": 0}, reuse=False))
    assert jobs.run_manager(wh, "local", until_job=record.id)
    done = jobs.get_job(wh.engine, record.id)
    assert done.state == "complete", done.error
    return done


@pytest.mark.slow
def test_a_diamond_equals_its_jobs_by_hand_reruns_nothing_and_a_change_reruns_c_and_d(
    run: Runner, wh: EmbeddedWarehouse, tmp_path: Path, lab: Path, reads: str
) -> None:
    wf = write_diamond(tmp_path)
    first = json_out(run("workflow", "run", str(wf), "--wait", "--json").output)
    assert first["state"] == "complete" and not first["resumed"]
    nodes = {n["node"]: n for n in first["nodes"]}
    assert {n["state"] for n in nodes.values()} == {"complete"}
    assert ran(tmp_path) == {"a": 1, "b": 1, "c": 1, "d": 1}
    final = first["outputs"]["final"]
    assert final == nodes["d"]["output_pdh"]

    # The same jobs submitted by hand (no reuse), D's input put together from files.
    fn = f"git:{lab}@v1:tag.py"
    a = by_hand(wh, fn, reads, "a")
    b = by_hand(wh, fn, a.output_pdh or "", "b")
    c = by_hand(wh, f"git:{lab}@main:tag.py", a.output_pdh or "", "c")
    both = tmp_path / "both"
    wh.get(b.output_pdh or "", both / "b")
    wh.get(c.output_pdh or "", both / "c")
    combined = wh.put([both / "b", both / "c"]).pdh
    assert combined == nodes["d"]["input_pdh"]
    assert [(p.dir, p.part_pdh) for p in runstore.parts_of(wh.engine, combined)] == [
        ("b", b.output_pdh),
        ("c", c.output_pdh),
    ]
    d = by_hand(wh, fn, combined, "d")
    assert d.output_pdh == final

    # Again: everything is reused, no step runs, and it says so.
    before = ran(tmp_path)
    again = run("workflow", "run", str(wf), "--wait")
    assert "nothing to run, all 4 jobs reused (0 steps run)" in again.output
    assert f"final: {final}" in again.output
    assert ran(tmp_path) == before

    # A new commit on the branch C's function follows: exactly C and D run again.
    new_commit(lab)
    third = json_out(run("workflow", "run", str(wf), "--wait", "--json").output)
    assert third["state"] == "complete"
    reused = {n["node"]: n["reused"] for n in third["nodes"]}
    assert reused == {"a": True, "b": True, "c": False, "d": False}
    after = ran(tmp_path)
    assert {k: after[k] - before[k] for k in after} == {"a": 0, "b": 0, "c": 1, "d": 1}
    assert third["outputs"]["final"] != final

    listed = run("workflow", "ls").output
    assert listed.count("diamond") == 3
    shown = run("workflow", "show", str(third["id"])).output
    assert "complete" in shown and "reused" in shown


@pytest.mark.slow
def test_a_failed_job_fails_the_run_while_independent_jobs_finish(
    run: Runner, wh: EmbeddedWarehouse, tmp_path: Path, lab: Path, reads: str
) -> None:
    text = (
        "workflow: half\n"
        "jobs:\n"
        "  a: {function: 'git:./lab@v1:tag.py', input: reads, params: {tag: a}}\n"
        "  bad: {function: 'git:./lab@v1:tag.py', input: $a, params: {tag: bad, fail: true}}\n"
        "  c: {function: 'git:./lab@v1:tag.py', input: $a, params: {tag: c}}\n"
        "  d: {function: 'git:./lab@v1:tag.py', input: $bad, params: {tag: d}}\n"
    )
    wf = tmp_path / "half.yml"
    wf.write_text(text)
    out = run("workflow", "run", str(wf), "--wait", code=1).output
    # The reason: the failed job's step's own last line.
    assert "workflow run 1 failed: job bad failed: failing on purpose" in out
    (view,) = runstore.list_runs(wh.engine)
    nodes = {n.node: n.state for n in runstore.list_nodes(wh.engine, view.id)}
    assert nodes == {"a": "complete", "bad": "failed", "c": "complete", "d": "skipped"}
    assert view.state == "failed"
    assert "d" not in ran(tmp_path)


BAD = [
    ("workflow: x\njobs:\n  a: {function: builtin:copy, input: [\n", 4, "(top): bad YAML"),
    (
        "workflow: x\njobs:\n  a:\n    function: builtin:copy\n    input: $nope\n",
        5,
        "jobs.a.input: unknown reference $nope",
    ),
    (
        "workflow: x\njobs:\n  a: {function: builtin:copy, input: $b}\n"
        "  b: {function: builtin:copy, input: $a}\n",
        3,
        "cycle: a -> b -> a",
    ),
    (
        "workflow: x\ninputs:\n  reads:\njobs:\n  a: {function: builtin:copy, input: $reads}\n",
        3,
        "inputs.reads: missing input",
    ),
    (
        "workflow: x\njobs:\n  a:\n    input: reads\n    function: builtin:nosuch\n",
        5,
        "jobs.a.function: unknown function 'builtin:nosuch'",
    ),
    (
        "workflow: x\njobs:\n  a:\n    function: builtin:copy\n    input: reads\n    parms: {}\n",
        6,
        "jobs.a.parms: unknown key",
    ),
    (
        "workflow: x\njobs:\n  a: {function: builtin:copy, input: {x: $b}}\n"
        "  b: {function: builtin:copy, input: reads}\noutputs:\n  o: $zz\n",
        6,
        "outputs.o: unknown reference $zz",
    ),
]

_JOB = "workflow: x\njobs:\n  a: {function: builtin:copy, input: reads, "
_LAUGHS = (
    "workflow: x\njobs:\n  a:\n    function: builtin:copy\n    input: reads\n    params:\n"
    "      l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"      l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 9))
)
_NOBODY = "0" * 32 + "+5"

# YAML that stands for more than it says, or for what JSON cannot hold. (An
# alias is named by where it is used, on the line of the value it names.)
BAD_VALUES = [
    (_JOB + "params: {p: &a [*a]}}\n", 3, "jobs.a.params.p[0]: an alias refers to a value holding"),
    (_LAUGHS, 11, "jobs.a.params.l5[7]: the file stands for more than 1000000 values"),
    (_JOB + "params: {p: " + "[" * 100 + "]" * 100 + "}}\n", 3, "nested deeper than 64 levels"),
    (
        _JOB.replace("input: reads, ", "input: reads, params: {p0: &p0 [x], ")
        + ", ".join(f"p{i}: &p{i} [*p{i - 1}]" for i in range(1, 70))
        + "}}\n",
        3,
        "nested deeper than 64 levels",
    ),
    (_JOB + "params: {d: 2020-01-01}}\n", 3, "jobs.a.params.d: a date is not a JSON value"),
    (_JOB + "params: {b: !!binary aGVsbG8=}}\n", 3, "jobs.a.params.b: bytes is not a JSON"),
    (_JOB + "params: {n: .nan}}\n", 3, "jobs.a.params.n: nan is not a number JSON holds"),
    (_JOB + "params: {t: !!python/name:os.system x}}\n", 3, "unknown YAML tag !!python/name:os"),
    (
        "workflow: x\nbase: &b {function: builtin:copy}\njobs:\n  a: {<<: *b, input: reads}\n",
        4,
        "jobs.a: merge keys (<<) are not supported",
    ),
    # A key holding a newline is named escaped, on the one line.
    ('workflow: x\njobs:\n  "a\\nb": {function: builtin:copy}\n', 3, "jobs.a\\nb: a job's name"),
]

# Values the catalog or the warehouse cannot take: refused before a run is recorded.
BAD_BINDINGS = [
    (_JOB + "resources: {cpus: 99999999999}}\n", 3, "resources.cpus: must be within ±2147483647"),
    (_JOB + "resources: {priority: -2147483648}}\n", 3, "resources.priority: must be within"),
    (_JOB + "resources: {memory: 99999999T}}\n", 3, "resources.memory: must be under 2**63"),
    (
        "workflow: x\njobs:\n  a:\n    function: builtin:copy\n    input: nosuch\n",
        5,
        "jobs.a.input: 'nosuch': no name 'nosuch'",
    ),
    (
        f"workflow: x\njobs:\n  a:\n    function: builtin:copy\n    input: {{d: {_NOBODY}}}\n",
        5,
        f"jobs.a.input.d: '{_NOBODY}': no collection {_NOBODY}",
    ),
    (
        f"workflow: x\ninputs:\n  r: {{default: {_NOBODY}}}\njobs:\n"
        "  a: {function: builtin:copy, input: $r}\n",
        3,
        f"inputs.r: '{_NOBODY}': no collection",
    ),
    # A path inside a collection: the job would quietly read the whole collection.
    (
        "workflow: x\ninputs:\n  r: {default: reads/x}\njobs:\n"
        "  a: {function: builtin:copy, input: $r}\n",
        3,
        "inputs.r: 'reads/x': a job reads a whole collection",
    ),
    (
        "workflow: x\njobs:\n  a:\n    function: builtin:copy\n    input: {d: reads/x}\n",
        5,
        "jobs.a.input.d: 'reads/x': a job reads a whole collection",
    ),
    # Parts known at the start that cannot be combined.
    (
        "workflow: x\njobs:\n  a:\n    function: builtin:copy\n    input: {d: reads, d/x: reads}\n",
        5,
        "jobs.a.input: combined input: 'd/x' is both a file and a directory",
    ),
    # git says why in several lines: the first is kept (one Error: line).
    (
        "workflow: x\njobs:\n  a: {function: 'git:./nolab@main:f.py', input: reads}\n",
        3,
        "does not appear to be a git repository",
    ),
]


@pytest.mark.parametrize(("text", "line", "message"), BAD + BAD_VALUES + BAD_BINDINGS)
def test_a_bad_file_is_refused_with_its_line_and_key_before_anything_runs(
    run: Runner, wh: EmbeddedWarehouse, tmp_path: Path, text: str, line: int, message: str
) -> None:
    wh.put([_reads(tmp_path)], name="reads")
    wf = tmp_path / "bad.yml"
    wf.write_text(text)
    result = run("workflow", "run", str(wf), "--wait", code=2)
    err = result.stderr
    assert err.startswith(f"Error: bad.yml:{line}: "), err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert runstore.list_runs(wh.engine) == [] and jobs.list_jobs(wh.engine) == []


def _reads(tmp_path: Path) -> Path:
    d = tmp_path / "some-reads"
    d.mkdir(exist_ok=True)
    (d / "x").write_text("x")
    return d


def test_an_unknown_input_option_and_a_bad_prefix_are_refused(
    run: Runner, wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    wh.put([_reads(tmp_path)], name="reads")
    wf = tmp_path / "ok.yml"
    wf.write_text("workflow: ok\njobs:\n  a: {function: builtin:copy, input: reads}\n")
    assert "no such input" in run("workflow", "run", str(wf), "-i", "x=1", code=2).stderr
    assert (
        "--name-outputs" in run("workflow", "run", str(wf), "--name-outputs", "a//b", code=2).stderr
    )
    assert "not NAME=VALUE" in run("workflow", "run", str(wf), "-i", "novalue", code=2).stderr
    assert run("workflow", "run", str(tmp_path / "missing.yml"), code=2).stderr.startswith("Error:")
    assert runstore.list_runs(wh.engine) == []


def test_a_file_without_a_size_is_read_only_up_to_the_bound(
    run: Runner, wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    # A device (or a pipe) says size 0: reading it whole ran out of memory.
    err = run("workflow", "run", "/dev/zero", code=2).stderr
    assert err == "Error: /dev/zero: over 4194304 bytes\n"
    assert runstore.list_runs(wh.engine) == []


def test_keys_are_the_text_written_not_what_yaml_reads_them_as() -> None:
    # YAML 1.1 reads `on`, `yes` and `null` as true and None: the key `on`
    # became "True", and `$on` named nothing.
    text = (
        "workflow: x\ninputs:\n  on: {default: reads}\njobs:\n"
        "  yes: {function: builtin:copy, input: $on, params: {0x10: 1}}\n"
        "  no: {function: builtin:copy, input: $yes}\noutputs:\n  null: $no\n"
    )
    wf = parse_workflow(text, builtins=frozenset({"copy"}))
    assert list(wf.inputs) == ["on"] and list(wf.jobs) == ["yes", "no"]
    assert list(wf.outputs) == ["null"] and wf.jobs["yes"].params == {"0x10": 1}
    assert wf.jobs["no"].depends_on == ("yes",)


@pytest.mark.parametrize("command", ["show", "cancel", "drive"])
@pytest.mark.parametrize("run_id", [str(2**31), str(10**30), str(-(10**30))])
def test_a_run_id_beyond_what_the_catalog_holds_names_no_run(
    run: Runner, wh: EmbeddedWarehouse, command: str, run_id: str
) -> None:
    # Such an id made the query itself fail (a traceback, or a 500 from the API).
    err = run("workflow", command, "--", run_id, code=4).stderr
    assert err == f"Error: no workflow run {run_id}\n"


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_an_input_json_cannot_hold_as_a_number_is_its_text(text: str) -> None:
    # JSON's reader takes these for floats that no JSON text may hold: the
    # run's params and its --json would not be JSON.
    assert parse_input_option(f"k={text}") == ("k", text)
    assert parse_input_option("k=1.5") == ("k", 1.5)


@pytest.mark.slow
def test_a_run_in_the_background_is_cancelled(
    run: Runner, wh: EmbeddedWarehouse, tmp_path: Path, lab: Path, reads: str
) -> None:
    import time

    wf = write_diamond(tmp_path)
    out = run("workflow", "run", str(wf), "-i", "sleep=30").output
    assert out.startswith("workflow run 1: ")
    deadline = time.monotonic() + 90
    while runstore.list_nodes(wh.engine, 1)[0].state != "running":
        assert time.monotonic() < deadline, "the background driver did not start a"
        time.sleep(0.1)
    run("workflow", "cancel", "1")
    while runstore.get_run(wh.engine, 1).state != "cancelled":
        assert time.monotonic() < deadline, "the cancel was not applied"
        time.sleep(0.1)
    assert {n.state for n in runstore.list_nodes(wh.engine, 1)} == {"cancelled"}
    a_job = runstore.list_nodes(wh.engine, 1)[0].job_id
    assert a_job is not None
    while jobs.get_job(wh.engine, a_job).state != "cancelled":
        assert time.monotonic() < deadline, "a's job was not cancelled"
        time.sleep(0.1)
    assert "already cancelled" in run("workflow", "cancel", "1", code=2).stderr


def test_a_follow_up_says_whether_decide_may_move_in_agreement_with_decide() -> None:
    """``may_move`` (after only some nodes changed) is True whenever ``decide``
    would submit or skip something or end the run, for every state of a diamond
    reached from one where nothing was ready."""
    wf = parse_workflow(
        "workflow: diamond\n"
        "jobs:\n"
        "  a: {function: 'builtin:copy', input: 'd41d8cd98f00b204e9800998ecf8427e+0'}\n"
        "  b: {function: 'builtin:copy', input: $a}\n"
        "  c: {function: 'builtin:copy', input: $a}\n"
        "  d: {function: 'builtin:copy', input: {b: $b, c: $c}}\n",
        "diamond.wf.yml",
    )
    readers = readers_of(wf)
    assert readers == {"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": []}
    names = list(wf.jobs)
    ends = ("complete", "failed", "cancelled")
    for before in itertools.product(("waiting", "queued", "running", *ends), repeat=4):
        states = dict(zip(names, before, strict=True))
        if decide(wf, {n: NodeState(s) for n, s in states.items()}).submit:
            continue  # a turn would have submitted these already
        if decide(wf, {n: NodeState(s) for n, s in states.items()}).skip:
            continue  # or skipped them
        for name in names:
            if states[name] not in ("queued", "running"):
                continue  # only followed nodes change
            for end in ends:
                after = {**states, name: end}
                got = decide(wf, {n: NodeState(s) for n, s in after.items()})
                moves = bool(got.submit or got.skip or got.run_state != "running")
                if moves:
                    assert may_move(wf, after, [name], readers), (states, name, end)
                if end == "complete" and not moves:
                    assert not may_move(wf, after, [name], readers), (states, name, end)


class _CountedJobs(dict[str, Any]):
    """A workflow's jobs that count the passes made over them."""

    passes = 0

    def items(self) -> Any:
        self.passes += 1
        return super().items()


def test_a_failure_skips_a_chain_listed_backwards_in_one_pass() -> None:
    # Each job reads the one listed after it, and the last one failed: a pass
    # over the file per level of the chain made a 20,000-job run's turn
    # quadratic (minutes).
    n = 200
    jobs = {
        f"j{i}": {"function": "builtin:copy", "input": f"$j{i + 1}" if i < n - 1 else "reads"}
        for i in range(n)
    }
    wf = parse_workflow({"workflow": "backwards", "jobs": jobs}, builtins=frozenset({"copy"}))
    counted = _CountedJobs(wf.jobs)
    wf = dataclasses.replace(wf, jobs=counted)
    states = {name: NodeState("waiting") for name in wf.jobs}
    states[f"j{n - 1}"] = NodeState("failed")
    got = decide(wf, states)
    assert got.skip == [f"j{i}" for i in range(n - 1)] and got.run_state == "failed"
    assert counted.passes <= 3


def test_a_fan_in_depends_on_each_job_once_in_order_of_first_reference() -> None:
    n = 2000  # each reference was looked up in a list of those before it
    copy = {"function": "builtin:copy", "input": "reads"}
    jobs: dict[str, Any] = {f"j{i}": copy for i in range(n)}
    parts = {f"p{i}": f"$j{i}" for i in range(n)}
    jobs["all"] = {"function": "builtin:copy", "input": parts, "params": {"again": "$j0"}}
    wf = parse_workflow({"workflow": "fan", "jobs": jobs}, builtins=frozenset({"copy"}))
    assert wf.jobs["all"].depends_on == tuple(f"j{i}" for i in range(n))


def test_an_alias_within_the_bounds_stands_for_its_value() -> None:
    text = (
        "workflow: x\njobs:\n"
        "  a: {function: builtin:copy, input: reads, params: {opts: &o {k: [1, 2], m: x}}}\n"
        "  b: {function: builtin:copy, input: $a, params: {opts: *o, both: [*o, *o]}}\n"
    )
    wf = parse_workflow(text, builtins=frozenset({"copy"}))
    opts = {"k": [1, 2], "m": "x"}
    assert wf.jobs["a"].params == {"opts": opts}
    assert wf.jobs["b"].params == {"opts": opts, "both": [opts, opts]}
