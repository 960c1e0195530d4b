"""Workflow runs, nodes and combined collections in the catalog (both backends)."""

from __future__ import annotations

import importlib

import pytest
import sqlalchemy as sa

from warehouse.errors import NotFoundError, UsageError
from warehouse.workflows import runstore

P1 = "a" * 32 + "+1"
P2 = "b" * 32 + "+2"
P3 = "c" * 32 + "+3"


def _run(engine: sa.Engine, key: str = "k" * 64) -> int:
    run = runstore.insert_run(
        engine,
        {
            "workflow": "diamond",
            "file_pdh": P1,
            "inputs": '{"reads": "' + P2 + '"}',
            "pins": "{}",
            "state": "running",
            "owner": "alice",
            "run_key": key,
        },
        [
            {"node": "a", "function": "builtin:identity", "depends_on": []},
            {"node": "c", "function": "builtin:identity", "depends_on": ["a"]},
            {"node": "b", "function": "builtin:identity", "depends_on": ["a"]},
        ],
    )
    return run.id


def test_a_run_keeps_its_nodes_in_file_order(catalog_engine: sa.Engine) -> None:
    run_id = _run(catalog_engine)
    got = runstore.get_run_with_nodes(catalog_engine, run_id)
    assert got.run.input_values == {"reads": P2}
    assert [n.node for n in got.nodes] == ["a", "c", "b"]
    assert got.nodes[1].dependencies == ["a"]
    assert {n.state for n in got.nodes} == {"waiting"}
    runstore.update_nodes(
        catalog_engine,
        run_id,
        {"a": {"state": "complete", "job_id": 7, "reused": True, "output_pdh": P3}},
        {"state": "running"},
    )
    assert runstore.runs_of_job(catalog_engine, 7)[0].node == "a"
    assert got.as_dict()["nodes"][0]["node"] == "a"
    with pytest.raises(NotFoundError):
        runstore.get_run(catalog_engine, run_id + 100)


def test_a_run_has_one_driver_until_it_falls_silent(catalog_engine: sa.Engine) -> None:
    run_id = _run(catalog_engine)
    assert runstore.claim_run(catalog_engine, run_id, "h:1", stale_after=10, now=1000.0)
    assert not runstore.claim_run(catalog_engine, run_id, "h:2", stale_after=10, now=1005.0)
    assert runstore.claim_run(catalog_engine, run_id, "h:2", stale_after=10, now=1011.0)
    assert not runstore.heartbeat(catalog_engine, run_id, "h:1")
    assert runstore.find_resumable(catalog_engine, "k" * 64, "alice") is not None
    assert runstore.find_resumable(catalog_engine, "k" * 64, "bob") is None
    runstore.request_cancel(catalog_engine, run_id)
    runstore.update_run(catalog_engine, run_id, {"state": "cancelled"})
    with pytest.raises(UsageError):
        runstore.request_cancel(catalog_engine, run_id)
    assert runstore.find_resumable(catalog_engine, "k" * 64, "alice") is None


def test_combined_collections_keep_their_parts(catalog_engine: sa.Engine) -> None:
    runstore.record_parts(catalog_engine, P3, [("graph", P1), ("reads", P2)])
    runstore.record_parts(catalog_engine, P3, [("graph", P1), ("reads", P2)])
    assert [(p.dir, p.part_pdh) for p in runstore.parts_of(catalog_engine, P3)] == [
        ("graph", P1),
        ("reads", P2),
    ]
    assert [p.pdh for p in runstore.combined_of(catalog_engine, P2)] == [P3]
    assert runstore.parts_of(catalog_engine, P1) == []


def test_every_public_name_of_the_workflows_package_loads() -> None:
    module = importlib.import_module("warehouse.workflows")
    assert sorted(module.__all__) == sorted(module._WHERE)
    for name in module.__all__:
        assert getattr(module, name) is not None


def test_gc_keeps_what_runs_within_the_job_retention_refer_to(catalog_engine: sa.Engine) -> None:
    from warehouse.gc.roots import workflow_roots

    p = [f"{i:032x}+{i}" for i in range(1, 9)]
    live = _run(catalog_engine, "l" * 64)
    runstore.update_run(
        catalog_engine, live, {"file_pdh": p[0], "inputs": f'{{"r": "{p[1]}", "k": 31}}'}
    )
    runstore.update_nodes(catalog_engine, live, {"c": {"input_pdh": p[2], "output_pdh": p[3]}})
    runstore.record_parts(catalog_engine, p[2], [("x", p[4])])
    old = _run(catalog_engine, "o" * 64)
    runstore.update_run(
        catalog_engine,
        old,
        {
            "file_pdh": p[5],
            "state": "complete",
            "finished_at": 100.0,
            "outputs": f'{{"o": "{p[6]}"}}',
        },
    )
    roots = workflow_roots(catalog_engine, since=1000.0)
    assert {p[0], p[1], p[2], p[3], p[4]} <= roots
    assert not {p[5], p[6]} & roots, "a run finished before the retention is no root"
    assert p[6] in workflow_roots(catalog_engine, since=50.0)


def test_many_jobs_go_in_one_insert_in_order(catalog_engine: sa.Engine) -> None:
    from warehouse.jobs import jobstore

    def row(state: str, params: str) -> dict[str, object]:
        return {
            "function": "builtin:copy",
            "function_pdh": P1,
            "function_path": "copy.py",
            "function_commit": None,
            "input_pdh": P2,
            "params": params,
            "cpus": 1,
            "memory": 0,
            "max_attempts": 3,
            "priority": 0,
            "executor": "local",
            "reuse_key": params * 8,
            "submitted_by": "alice",
            "state": state,
        }

    made = jobstore.insert_jobs(
        catalog_engine,
        [
            row("queued", "{a:1}"),
            {**row("complete", "{b:2}"), "output_pdh": P3},
            row("queued", "{c:3}"),
        ],
    )
    assert [j.params for j in made] == ["{a:1}", "{b:2}", "{c:3}"]
    assert made[0].id < made[1].id < made[2].id
    assert [len(jobstore.list_steps(catalog_engine, j.id)) for j in made] == [1, 0, 1]
    found = jobstore.find_reusable_many(catalog_engine, ["{b:2}" * 8, "{a:1}" * 8])
    assert list(found) == ["{b:2}" * 8] and found["{b:2}" * 8].output_pdh == P3
