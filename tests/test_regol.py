"""Regol end to end, on the embedded warehouse and through a controller: watch a
job whose function is git:, run it at every commit of the branch, read the
history, bisect to the commit that changed the output and to the one that
broke it."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from cluster import KeepPool, controller
from conftest import Runner
from postgres import fresh_schema
from regol_helpers import git as helpers_git
from regol_helpers import make_repo
from warehouse.regol.model import REGOL_PRIORITY


@pytest.fixture(params=["embedded", "remote-postgresql"])
def where(
    request: pytest.FixtureRequest, tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The `wh` commands of the test talk to this installation: the embedded
    warehouse (SQLite), or a controller whose catalog is on PostgreSQL."""
    if request.param == "embedded":
        monkeypatch.delenv("WH_URL", raising=False)
        yield "embedded"
        return
    pool: KeepPool = request.getfixturevalue("keep_servers")
    admin: sa.Engine = request.getfixturevalue("pg_admin")
    with fresh_schema(admin) as url, controller(url, pool) as ctl:
        ctl.state.start_jobs(ctl.url, tmp_path / "controller-jobs", "local", cpus=2)
        monkeypatch.setenv("WH_URL", ctl.url)
        monkeypatch.setenv("WH_TOKEN", ctl.user("alice"))
        yield "remote"


def as_json(run: Runner, *args: str, code: int = 0) -> Any:
    out = run(*args, "--json", code=code).output
    start = min(i for i in (out.find("{"), out.find("[")) if i >= 0)
    return json.loads(out[start:])


def watched_job(run: Runner, tmp_path: Path) -> tuple[list[str], int]:
    """The repository's commits and a completed job of its function at c1."""
    commits = make_repo(tmp_path / "repo")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.txt").write_text("input\n")
    run("put", str(tmp_path / "in"), "--name", "input")
    spec = f"git:{tmp_path / 'repo'}@{commits[0]}:fn.py"
    job = as_json(run, "job", "submit", spec, "--input", "input", "--attempts", "1", "--wait")
    assert job["state"] == "complete"
    return commits, int(job["id"])


def test_run_at_every_commit_marks_the_change_and_the_failures(
    where: str, run: Runner, tmp_path: Path
) -> None:
    commits, job = watched_job(run, tmp_path)
    other = as_json(run, "job", "submit", "builtin:copy", "--input", "input", "--wait")
    refused = run("regol", "watch", str(other["id"]), code=2)
    assert "git:" in refused.output and "Traceback" not in refused.output
    assert "no branch" in run("regol", "watch", str(job), "--branch", "nope", code=2).output
    assert as_json(run, "regol", "ls") == []  # nothing was recorded by the refusals

    watch = as_json(run, "regol", "watch", str(job), "--label", "value of fn")
    assert (watch["branch"], watch["label"], watch["active"]) == ("main", "value of fn", True)
    made = as_json(run, "regol", "run", "--wait")
    assert [r["commit"] for r in made] == commits  # oldest first, one run each
    assert all(r["state"] in ("complete", "failed") for r in made)

    shown = as_json(run, "regol", "show", str(watch["id"]))
    runs = shown["runs"]
    assert [r["commit"] for r in runs] == commits
    assert [r["state"] for r in runs] == ["complete"] * 6 + ["failed"] * 2
    assert [c for c, r in zip(commits, runs, strict=True) if r["equals_previous"] is False] == [
        commits[4]
    ]
    assert [r["equals_previous"] for r in runs] == [None, True, True, True, False, True, None, None]
    outputs = [r["output_pdh"] for r in runs]
    assert len(set(outputs[:4])) == 1 and outputs[4] == outputs[5] != outputs[0]
    assert all(r["run_time"] is not None and r["run_time"] >= 0 for r in runs)
    assert runs[0]["reused"]  # commit 1 is the watched job's own version
    table = run("regol", "show", str(watch["id"])).output
    assert table.count("CHANGED") == 1 and commits[4][:10] in table
    assert "run time" in table and "CPU" in table

    assert "nothing to run" in run("regol", "run").output
    # A range runs its commits again where the last run failed.
    again = as_json(run, "regol", "run", "--commits", f"{commits[5]}..{commits[7]}")
    assert [r["commit"] for r in again] == commits[6:]
    assert run("regol", "run", "--commits", "nonsense", code=2).output.startswith("Error:")

    run("regol", "unwatch", str(watch["id"]))
    assert "unwatched" in run("regol", "ls").output
    assert "no longer active" in run("regol", "run", str(watch["id"]), code=2).output
    assert run("regol", "show", "999", code=4).output.startswith("Error:")


def test_bisect_names_the_changing_commit_then_the_breaking_one(
    where: str, run: Runner, tmp_path: Path
) -> None:
    commits, job = watched_job(run, tmp_path)

    def bisect(good: int, bad: int) -> tuple[str | None, list[dict[str, Any]]]:
        watch = as_json(run, "regol", "watch", str(job))  # fresh: no runs
        assert as_json(run, "regol", "show", str(watch["id"]))["runs"] == []
        found = as_json(
            run, "regol", "bisect", str(watch["id"]),
            "--good", commits[good - 1], "--bad", commits[bad - 1],
        )  # fmt: skip
        history = as_json(run, "regol", "show", str(watch["id"]))["runs"]
        assert sorted(r["id"] for r in history) == sorted(r["id"] for r in found["runs_made"])
        n = bad - good + 1
        assert len(found["runs_made"]) <= math.ceil(math.log2(n)) + 1
        return found["found"], found["runs_made"]

    found, made = bisect(1, 8)
    assert found == commits[4]
    assert made[0]["commit"] == commits[0]  # the good commit's output first
    found, made = bisect(5, 8)
    assert found == commits[6]
    assert any(r["state"] == "failed" for r in made)

    # Watch 2 ran c5..c8 above: bisecting it again needs no new run.
    text = run("regol", "bisect", "2", "--good", "main~3", "--bad", "main").output
    assert "ran watch" not in text
    assert f"first commit that differs: {commits[6]}" in text
    assert (
        "ancestor"
        in run("regol", "bisect", "1", "--good", "main", "--bad", commits[0], code=2).output
    )
    assert run("regol", "bisect", "1", "--good", "nope", "--bad", "main", code=4).output.startswith(
        "Error:"
    )


def test_runs_start_at_the_watched_commit_at_the_lowest_priority(
    run: Runner, tmp_path: Path
) -> None:
    from warehouse import jobs
    from warehouse.embedded import EmbeddedWarehouse

    commits, _ = watched_job(run, tmp_path)
    spec = f"git:{tmp_path / 'repo'}@{commits[5]}:fn.py"
    job = as_json(run, "job", "submit", spec, "--input", "input", "--attempts", "1", "--wait")
    watch = as_json(run, "regol", "watch", str(job["id"]))
    made = as_json(run, "regol", "run", str(watch["id"]), "--wait")
    assert [r["commit"] for r in made] == commits[5:]  # the history before c6 is not new
    with EmbeddedWarehouse() as wh:
        records = [jobs.get_job(wh.engine, r["job"]) for r in made]
    assert {r.priority for r in records} == {REGOL_PRIORITY}
    assert [r.function_commit for r in records] == commits[5:]


@pytest.mark.parametrize(
    "args",
    [
        ["show", "99999999999999999999999"],
        ["unwatch", "99999999999999999999999"],
        ["bisect", "99999999999999999999999", "--good", "a", "--bad", "b"],
        ["run", "99999999999999999999999"],
        ["show", "--", "-99999999999999999999999"],
    ],
)
def test_a_watch_id_beyond_what_the_catalog_holds_names_no_watch(
    run: Runner, args: list[str]
) -> None:
    # Such an id made the query itself fail (a traceback, or a 500 from the API).
    err = run("regol", *args, code=4).stderr
    assert err == f"Error: no watch {args[-1] if args[0] == 'show' else args[1]}\n"


def test_with_no_watch_there_is_nothing_to_run_and_no_history(run: Runner) -> None:
    assert run("regol", "run").output == (
        "nothing to run: no active watch (wh regol watch JOB makes one)\n"
    )
    assert as_json(run, "regol", "run", "--wait") == []
    assert as_json(run, "regol", "ls") == []
    assert run("regol", "show", "1", code=4).stderr == "Error: no watch 1\n"


def test_a_watch_whose_repository_is_gone_fails_the_run_naming_it_and_submits_nothing(
    run: Runner, tmp_path: Path
) -> None:
    commits, job = watched_job(run, tmp_path)
    shutil.copytree(tmp_path / "repo", tmp_path / "other")
    spec = f"git:{tmp_path / 'other'}@{commits[0]}:fn.py"
    other = as_json(run, "job", "submit", spec, "--input", "input", "--attempts", "1", "--wait")
    first = as_json(run, "regol", "watch", str(job))["id"]
    second = as_json(run, "regol", "watch", str(other["id"]))["id"]
    (tmp_path / "other").rename(tmp_path / "moved")
    err = run("regol", "run", code=4).stderr
    assert err == f"Error: watch {second}: no git repository at {tmp_path / 'other'}\n"
    # The first watch's runs were not submitted before the second one failed.
    assert as_json(run, "regol", "show", str(first))["runs"] == []
    (tmp_path / "other").mkdir()  # a directory, but no repository
    assert "no git repository" in run("regol", "run", str(second), code=4).stderr
    (tmp_path / "other").rmdir()
    (tmp_path / "moved").rename(tmp_path / "other")
    made = as_json(run, "regol", "run", "--wait")
    assert {r["watch"] for r in made} == {first, second}


def test_a_fetched_repository_that_is_gone_is_one_error_line(run: Runner, tmp_path: Path) -> None:
    commits, _ = watched_job(run, tmp_path)
    helpers_git(tmp_path / "repo", "branch", "good", commits[5])
    spec = f"git:file://{tmp_path / 'repo'}@good:fn.py"
    job = as_json(run, "job", "submit", spec, "--input", "input", "--attempts", "1", "--wait")
    watch = as_json(run, "regol", "watch", str(job["id"]))["id"]
    (tmp_path / "repo").rename(tmp_path / "moved")
    err = run("regol", "run", str(watch), code=2).stderr
    assert err.startswith("Error: ") and "git fetch --quiet: fatal: " in err
    assert len(err.splitlines()) == 1  # not git's advice besides


def test_bisect_between_a_commit_and_itself_says_so(run: Runner, tmp_path: Path) -> None:
    commits, job = watched_job(run, tmp_path)
    watch = as_json(run, "regol", "watch", str(job))["id"]
    err = run("regol", "bisect", str(watch), "--good", "main", "--bad", commits[-1], code=2).stderr
    tip = commits[-1]
    assert err == f"Error: --good main and --bad {tip} are the same commit {tip[:12]}\n"


def test_a_commit_without_the_function_file_has_no_run_and_does_not_stop_the_others(
    run: Runner, tmp_path: Path
) -> None:
    commits, _ = watched_job(run, tmp_path)
    repo = tmp_path / "repo"
    spec = f"git:{repo}@{commits[5]}:fn.py"  # few commits after it: a short test
    job = as_json(run, "job", "submit", spec, "--input", "input", "--attempts", "1", "--wait")["id"]
    kept = (repo / "fn.py").read_text()
    (repo / "README").write_text("the function is gone for one commit\n")
    helpers_git(repo, "add", "README")
    helpers_git(repo, "rm", "-q", "fn.py")
    helpers_git(repo, "commit", "-qm", "c9 removes fn.py")
    gone = helpers_git(repo, "rev-parse", "HEAD")
    (repo / "fn.py").write_text(kept.replace("raise SystemExit(3)", ""))
    helpers_git(repo, "add", "fn.py")
    helpers_git(repo, "commit", "-qm", "c10 brings it back")
    back = helpers_git(repo, "rev-parse", "HEAD")
    watch = as_json(run, "regol", "watch", str(job))["id"]
    # Pinning the function at c9 failed and stopped the whole command there,
    # at every later call too.
    made = as_json(run, "regol", "run", "--wait")
    assert [r["commit"] for r in made] == [*commits[5:], back]
    history = as_json(run, "regol", "show", str(watch))["runs"]
    assert gone not in {r["commit"] for r in history} and history[-1]["state"] == "complete"
    assert as_json(run, "regol", "run") == []
