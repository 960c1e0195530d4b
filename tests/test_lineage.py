"""Lineage over real jobs: a diamond A → B, A → C, {B, C} → D of git-function jobs,
traced up from D and down from A's input, embedded and through a controller."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from cluster import KeepPool, controller
from conftest import Runner
from jobs_helpers import run_job
from lineage_helpers import Diamond, combined, make_diamond
from test_web import sign_in
from warehouse import jobs
from warehouse.cli._common import conventional
from warehouse.cli.web import sign_in_token
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import NotFoundError, UsageError
from warehouse.jobs.jobsview import RemoteJobs
from warehouse.lineage import lineage, to_dot, to_text, trace
from warehouse.remote.warehouse import RemoteWarehouse
from warehouse.server.serving import ServerThread
from warehouse.web import create_web_app
from warehouse.workflows.runstore import record_parts


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Diamond]]:
    """One diamond for the module's tests (five real jobs take a while)."""
    tmp = tmp_path_factory.mktemp("diamond")
    home = tmp / "home"
    with EmbeddedWarehouse(home, user="alice") as wh:

        def submit(function: str, key: str, params: dict[str, str]) -> tuple[int, str]:
            job = run_job(wh, function, key, params=params)
            assert job.state == "complete", job.error
            assert job.output_pdh is not None
            return job.id, job.output_pdh

        def combine(parts: dict[str, str]) -> str:
            pdh = wh.save_manifest(combined({d: wh.manifest(p) for d, p in parts.items()})).pdh
            record_parts(wh.engine, pdh, list(parts.items()))
            return pdh

        d = make_diamond(tmp, lambda p: wh.put([p]).pdh, submit, wh.manifest, combine)
        wh.set_name("d-result", d.outputs["D"], expect=None, create=True)
        wh.set_name("raw", d.a_input, expect=None, create=True)
        yield home, d


@pytest.fixture
def diamond(built: tuple[Path, Diamond], monkeypatch: pytest.MonkeyPatch) -> Diamond:
    """The module's diamond, with ``wh`` working on its warehouse."""
    monkeypatch.setenv("WH_HOME", str(built[0]))
    monkeypatch.setenv("WH_USER", "alice")
    monkeypatch.delenv("WH_URL", raising=False)
    return built[1]


@pytest.fixture
def run() -> Runner:
    return Runner()


def lineage_json(run: Runner, *args: str) -> dict:
    return json.loads(run("lineage", *args, "--json").output)


def test_up_from_d_lists_exactly_the_jobs_functions_and_inputs_back_to_the_puts(
    diamond: Diamond, run: Runner, built: tuple[Path, Diamond]
) -> None:
    d = diamond
    g = lineage_json(run, "d-result")
    assert (g["key"], g["pdh"], g["direction"], g["format"]) == (
        "d-result",
        d.outputs["D"],
        "up",
        1,
    )
    jobs = {j["id"]: j for j in g["jobs"]}
    assert sorted(jobs) == sorted(d.jobs[x] for x in "ABCD")
    first, second = d.commits
    a, c = jobs[d.jobs["A"]], jobs[d.jobs["C"]]
    assert a["function"]["commit"] == first and c["function"]["commit"] == second
    assert a["function"]["path"] == "tag.py" and a["params"] == {"tag": "A"}
    assert (a["input"], a["output"], a["state"]) == (d.a_input, d.outputs["A"], "complete")
    assert a["executor"] == "local" and a["submitted_by"] == "alice"
    assert a["started_at"] <= a["finished_at"]
    functions = {f["commit"]: sorted(f["jobs"]) for f in g["functions"]}
    assert functions == {
        first: sorted([d.jobs["A"], d.jobs["B"]]),
        second: sorted([d.jobs["C"], d.jobs["D"]]),
    }
    assert [p["pdh"] for p in g["puts"]] == [d.a_input]
    assert g["puts"][0]["by"] == "alice" and g["puts"][0]["names"] == ["raw"]
    colls = {c["pdh"]: c for c in g["collections"]}
    assert set(colls) == {d.a_input, d.bc, *(d.outputs[x] for x in "ABCD")}
    assert g["collections"][0]["pdh"] == d.outputs["D"]
    assert colls[d.bc]["kinds"] == ["combined"]
    assert colls[d.bc]["parts"] == [
        {"dir": "b", "pdh": d.outputs["B"]},
        {"dir": "c", "pdh": d.outputs["C"]},
    ]
    assert colls[d.outputs["D"]]["made_by"] == [d.jobs["D"]]
    assert colls[d.outputs["D"]]["names"] == ["d-result"]
    edges = {(e["from"], e["to"], e["role"], e.get("dir")) for e in g["edges"]}
    assert (f"collection:{d.outputs['B']}", f"collection:{d.bc}", "part", "b") in edges
    assert (f"collection:{d.bc}", f"job:{d.jobs['D']}", "input", None) in edges
    assert (f"job:{d.jobs['D']}", f"collection:{d.outputs['D']}", "output", None) in edges
    assert len(edges) == 2 * 4 + 2  # each job's input and output, and two parts

    # Asked for by PDH the graph is the same; a job answered from reuse is
    # the same job, not a second maker.
    with EmbeddedWarehouse(built[0]) as wh:
        again = run_job(wh, jobs[d.jobs["D"]]["function"]["spec"], d.bc, params={"tag": "D"})
    assert again.reused_from == d.jobs["D"]
    by_pdh = lineage_json(run, d.outputs["D"])
    assert by_pdh["jobs"] == g["jobs"] and by_pdh["edges"] == g["edges"]

    # --depth 1: D's job and the combined collection it read, which is marked
    # as made by something not followed.
    one = lineage_json(run, "d-result", "--depth", "1")
    assert [j["id"] for j in one["jobs"]] == [d.jobs["D"]]
    shallow = {c["pdh"]: c for c in one["collections"]}
    assert set(shallow) == {d.outputs["D"], d.bc} and shallow[d.bc]["more"] is True
    assert one["puts"] == []


def test_down_from_a_input_lists_exactly_a_b_c_d_and_their_outputs(
    diamond: Diamond, run: Runner
) -> None:
    d = diamond
    g = lineage_json(run, d.a_input, "--down")
    assert sorted(j["id"] for j in g["jobs"]) == sorted(d.jobs[x] for x in "ABCD")
    made = {j["id"]: j["output"] for j in g["jobs"]}
    assert made == {d.jobs[x]: d.outputs[x] for x in "ABCD"}
    assert {c["pdh"] for c in g["collections"]} == {
        d.a_input,
        d.bc,
        *(d.outputs[x] for x in "ABCD"),
    }
    # From B's output: D (through the combined input) and nothing else.
    below_b = lineage_json(run, d.outputs["B"], "--down")
    assert [j["id"] for j in below_b["jobs"]] == [d.jobs["D"]]
    bc = next(c for c in below_b["collections"] if c["pdh"] == d.bc)
    assert [p["dir"] for p in bc["parts"]] == ["b", "c"]  # all its parts, not only ./b
    assert {e["role"] for e in below_b["edges"]} == {"part", "input", "output"}
    assert len(below_b["edges"]) == 3
    assert lineage_json(run, d.other_input, "--down")["jobs"][0]["id"] == d.jobs["E"]


def test_text_and_dot(diamond: Diamond, run: Runner) -> None:
    d = diamond
    text = run("lineage", d.outputs["D"]).output
    assert text.splitlines()[0] == f"lineage of {d.outputs['D']} ({d.outputs['D']}), up"
    assert f"made by job {d.jobs['D']} (complete)" in text
    assert f"commit {d.commits[0]}" in text and "part ./b" in text
    assert "(see above)" in text  # A's output, reached through both B and C
    down = run("lineage", d.a_input, "--down").output
    assert f"read by job {d.jobs['A']}" in down
    dot = run("lineage", d.outputs["D"], "--dot").output
    assert dot.splitlines()[1] == "digraph lineage {" and dot.endswith("}\n")
    assert f'"job:{d.jobs["D"]}" -> "collection:{d.outputs["D"]}";' in dot
    assert f'"collection:{d.outputs["B"]}" -> "collection:{d.bc}" [label="./b"];' in dot


def test_bad_keys_and_options(wh: EmbeddedWarehouse, tmp_path: Path) -> None:
    run = Runner()
    (tmp_path / "f").write_text("x")
    pdh = wh.put([tmp_path / "f"]).pdh
    assert run("lineage", "no-such-name", code=4).output.startswith("Error: ")
    assert "no collection" in run("lineage", "0" * 32 + "+1", code=4).output
    assert "whole collections" in run("lineage", f"{pdh}/f", code=2).output
    assert "choose one" in run("lineage", pdh, "--json", "--dot", code=2).output
    run("lineage", pdh, "--depth", "-1", code=2)
    g = lineage_json(run, pdh)
    assert g["jobs"] == [] and [c["pdh"] for c in g["puts"]] == [pdh]


@pytest.mark.slow
def test_through_a_controller_the_api_and_the_cli_give_the_same_graph(
    tmp_path: Path, keep_servers: KeepPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    with controller(tmp_path / "controller.db", keep_servers) as ctl:
        ctl.state.start_jobs(ctl.url, tmp_path / "controller-jobs", "local", cpus=2)
        token = ctl.user("alice")
        for k, v in {
            "WH_URL": ctl.url,
            "WH_TOKEN": token,
            "WH_HOME": str(tmp_path / "unused"),
        }.items():
            monkeypatch.setenv(k, v)
        with RemoteWarehouse(ctl.url, token) as wh:
            view = RemoteJobs(wh)

            def submit(function: str, key: str, params: dict[str, str]) -> tuple[int, str]:
                job = view.submit(jobs.JobRequest(function, key, params), executor=None)
                deadline = time.monotonic() + 60
                while job.state not in ("complete", "failed", "cancelled"):
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
                    job = view.get(job.id)
                assert job.state == "complete", job.error
                assert job.output_pdh is not None
                return job.id, job.output_pdh

            def combine(parts: dict[str, str]) -> str:
                manifest = combined({d: wh.manifest(p) for d, p in parts.items()})
                pdh = wh.put_manifest(manifest).pdh
                record_parts(ctl.state.engine, pdh, list(parts.items()))
                return pdh

            d = make_diamond(tmp_path, lambda p: wh.put([p]).pdh, submit, wh.manifest, combine)
            up = lineage(wh, d.outputs["D"])
            assert up == trace(ctl.state.engine, d.outputs["D"])
            assert sorted(j.id for j in up.jobs) == sorted(d.jobs[x] for x in "ABCD")
            assert [c.pdh for c in up.puts] == [d.a_input]
            assert {f.commit for f in up.functions} == set(d.commits)
            with pytest.raises(NotFoundError):
                wh.api.get("/lineage/nothing-here")
            with pytest.raises(UsageError):
                wh.api.get(f"/lineage/{d.a_input}", depth=-1)
            described = httpx.get(f"{ctl.url}/openapi.json", verify=False).json()
            assert "/api/v1/lineage/{key}" in described["paths"]
            # The controller's pages draw the same graph and link D's output to its job.
            web = sign_in(ctl.url, token)
            try:
                page = web.get(f"/web/lineage/{d.outputs['D']}").text
                for x in "ABCD":
                    assert f'href="/web/jobs/{d.jobs[x]}"' in page
                assert f'href="/web/jobs/{d.jobs["E"]}"' not in page
                made = web.get(f"/web/c/{d.outputs['D']}").text
                assert f'made-by"><a href="/web/jobs/{d.jobs["D"]}"' in made
                assert web.get("/web/workflows").status_code == 200
            finally:
                web.close()
            down = lineage(wh, d.a_input, down=True, depth=1)
            assert [j.id for j in down.jobs] == [d.jobs["A"]]
            assert down.collection(d.outputs["A"]).more
        run = Runner()
        g = lineage_json(run, d.outputs["D"])
        # The CLI prints the API's graph in the --json convention (ISO times).
        assert g == conventional(up.as_dict())
        assert "no collection" in run("lineage", "0" * 32 + "+1", code=4).output
        assert "no name" in run("lineage", "nothing-here", code=4).output.lower()
        run("lineage", d.a_input, "--depth", "100001", code=2)


def test_the_lineage_package_loads_each_public_name_from_its_module() -> None:
    import warehouse.lineage as package

    assert sorted(package.__all__) == sorted(package._WHERE)
    for name in package.__all__:
        value = getattr(package, name)
        assert callable(value), name  # a function or class, never a submodule of that name
    with pytest.raises(AttributeError):
        _ = package.no_such_thing


def test_a_copy_whose_output_is_its_input_is_a_cycle_the_walk_survives(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "f.txt").write_text("hello\n")
    raw = wh.put([tmp_path / "in"]).pdh
    job = run_job(wh, "builtin:copy", raw)
    assert job.output_pdh == raw  # the same collection, made again
    up = trace(wh.engine, raw)
    assert [j.id for j in up.jobs] == [job.id]
    assert up.collection(raw).kinds == ("put", "job output")  # stored before the job ran
    assert [c.pdh for c in up.puts] == [raw]
    down = trace(wh.engine, raw, down=True)
    assert [j.id for j in down.jobs] == [job.id] and [c.pdh for c in down.collections] == [raw]
    assert "(see above)" in to_text(up)
    assert f'"job:{job.id}" -> "collection:{raw}";' in to_dot(up)


def test_a_copy_of_a_combined_collection_leaves_the_combined_one_no_put(
    wh: EmbeddedWarehouse, tmp_path: Path
) -> None:
    # A workflow job reading {a: $x, b: $y} through builtin:copy outputs the very
    # combined collection it read, recorded (by the combining) before it started.
    # Nobody put it: the puts are its parts.
    parts = {}
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "f.txt").write_text(f"{d}\n")
        parts[d] = wh.put([tmp_path / d]).pdh
    whole = wh.save_manifest(combined({d: wh.manifest(p) for d, p in parts.items()})).pdh
    record_parts(wh.engine, whole, list(parts.items()))
    job = run_job(wh, "builtin:copy", whole)
    assert job.output_pdh == whole
    up = trace(wh.engine, whole)
    assert up.collection(whole).kinds == ("job output", "combined")
    assert sorted(c.pdh for c in up.puts) == sorted(parts.values())
    assert f"{whole}  job output, combined" in to_text(up)


def test_the_lineage_page_and_the_collection_pages_over_http(
    diamond: Diamond, built: tuple[Path, Diamond]
) -> None:
    d = diamond
    with EmbeddedWarehouse(built[0]) as wh, ServerThread(create_web_app(wh)) as server:
        web = sign_in(server.url, sign_in_token(wh))
        try:
            page = web.get(f"/web/lineage/{d.outputs['D']}", params={"depth": ""})
            assert page.status_code == 200
            assert page.text.count('<g class="node job') == 4
            one = web.get(f"/web/lineage/{d.outputs['D']}", params={"depth": "1"}).text
            assert one.count('<g class="node job') == 1 and "(more beyond this depth)" in one
            down = web.get(f"/web/lineage/{d.a_input}", params={"direction": "down"}).text
            assert down.count('<g class="node job') == 4
            for bad in ({"depth": "x"}, {"depth": "²"}, {"depth": "99999"}, {"direction": "left"}):
                answer = web.get(f"/web/lineage/{d.a_input}", params=bad)
                assert answer.status_code == 400, bad
            assert web.get("/web/lineage/not-a-pdh").status_code == 404
            assert web.get(f"/web/lineage/{'0' * 32}+1").status_code == 404
            listed = web.get("/web/collections").text
            row = next(r for r in listed.split("<tr>") if "d-result" in r)
            assert '<span class="kind">job output</span>' in row
            raw_row = next(r for r in listed.split("<tr>") if ">raw<" in r)
            assert '<span class="kind">put</span>' in raw_row
            combined = web.get(f"/web/c/{d.bc}").text
            assert '<span class="kind">combined</span>' in combined
            assert f'href="/web/c/{d.outputs["B"]}"' in combined  # its parts
        finally:
            web.close()


def test_the_job_bound_holds_within_one_wide_layer(
    built: tuple[Path, Diamond], diamond: Diamond
) -> None:
    """A collection read by more jobs than the bound: the graph keeps the bound,
    and the collection says more was left out (B and C both read A's output)."""
    from warehouse.lineage.build import build
    from warehouse.lineage.reads import CatalogFacts

    d = diamond
    with EmbeddedWarehouse(built[0], user="alice") as wh:
        facts = CatalogFacts(wh.engine)
        g = build(facts, d.outputs["A"], d.outputs["A"], down=True, max_jobs=1)
        full = build(facts, d.outputs["A"], d.outputs["A"], down=True)
    assert [j.id for j in g.jobs] == [d.jobs["B"]]
    assert g.collection(d.outputs["A"]).more
    assert {c.pdh for c in g.collections} == {d.outputs["A"], d.outputs["B"]}
    assert {j.id for j in full.jobs} == {d.jobs[x] for x in "BCD"}
    assert not any(c.more for c in full.collections)
