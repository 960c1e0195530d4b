"""Regol's operations over a warehouse that can submit jobs: watch a job, run
its function at commits, step a bisect. Git and the catalog are read here;
what to do with what they say is decided in ``warehouse.regol.model``.

Used as they are by the embedded warehouse (``client.LocalRegol``), by the
controller's API (``server/controller/regol.py``) and by its idle runner
(``auto.RegolRunner``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from warehouse.errors import NotFoundError, UsageError, WarehouseError
from warehouse.jobs.jobhost import SubmitHost
from warehouse.jobs.jobrecords import JobRecord
from warehouse.jobs.jobstore import get_job
from warehouse.jobs.submission import JobRequest, submit
from warehouse.regol import model, records
from warehouse.regol.git import MAX_BISECT, MAX_COMMITS, open_repository, parse_spec
from warehouse.regol.values import BisectRecord, RunRecord, WatchRecord

__all__ = [
    "LABEL_LIMIT",
    "bisect_step",
    "parse_range",
    "run_watch",
    "run_watches",
    "runnable_watches",
    "watch",
]

LABEL_LIMIT = 255


def _bounded(what: str, text: str) -> str:
    if not text or len(text) > LABEL_LIMIT or any(ord(ch) < 32 for ch in text):
        raise UsageError(f"{what} must be 1 to {LABEL_LIMIT} printable characters")
    return text


def watch(host: SubmitHost, job_id: int, branch: str | None, label: str | None) -> WatchRecord:
    """Follow ``job_id`` (complete, with a git: function) along ``branch``
    (default: the revision it ran at, when that is a branch, else the
    repository's current branch)."""
    job = get_job(host.engine, job_id)
    if not job.function.startswith("git:"):
        raise UsageError(
            f"job {job_id} runs {job.function!r}; Regol follows jobs whose function is git:"
        )
    if job.state != "complete":
        raise UsageError(f"job {job_id} is {job.state}; Regol follows completed jobs only")
    spec = parse_spec(job.function)
    repository = spec.repository
    if Path(repository).is_dir():  # a relative path would mean another place later
        repository = str(Path(repository).resolve())
    if branch is not None:
        _bounded("a branch", branch)
    with open_repository(repository, branch or spec.revision, host) as repo:
        if branch is None:
            branch = spec.revision if repo.is_branch(spec.revision) else repo.default_branch()
        elif not repo.is_branch(branch):
            raise UsageError(f"no branch {branch!r} in {spec.repository}")
    return records.add_watch(
        host.engine,
        job=job.id,
        function=job.function,
        repository=repository,
        path=spec.path,
        branch=branch,
        label=_bounded("a label", label or f"{Path(spec.path).name} on {branch}"),
        owner=host.user,
    )


def parse_range(text: str) -> tuple[str, str]:
    """``A..B`` as git means it: the commits after A up to B."""
    start, dots, end = text.partition("..")
    if not dots or not start or not end or end.startswith(".") or len(text) > 2 * LABEL_LIMIT:
        raise UsageError(f"--commits {text!r} is not REV..REV")
    return start, end


def _submit(
    host: SubmitHost, w: WatchRecord, job: JobRecord, commit: model.Commit, executor: str
) -> RunRecord:
    request = JobRequest(
        f"git:{w.repository}@{commit.sha}:{w.path}",
        job.input_pdh,
        json.loads(job.params),
        reuse=True,
        priority=model.REGOL_PRIORITY,
        cpus=job.cpus,
        memory=job.memory,
        max_attempts=job.max_attempts,
        executor=executor,
    )
    return records.add_run(host.engine, w.id, commit, submit(host, request))


def _known(host: SubmitHost, watch_id: int) -> dict[str, RunRecord]:
    return {r.commit: r for r in records.history(host.engine, watch_id)}


def run_watch(
    host: SubmitHost,
    w: WatchRecord,
    commits: str | None,
    executor: str | None = None,
    limit: int = MAX_COMMITS,
) -> list[RunRecord]:
    """Submit a run for every commit of the branch not run yet (from the
    watched job's own commit on, when the branch holds it), or for each
    commit of ``commits`` (``A..B``) without a good or pending run; oldest
    first, at most ``limit`` of them."""
    job, todo = _to_run(host, w, commits)
    return [_submit(host, w, job, c, executor or job.executor) for c in todo[: max(limit, 0)]]


def _to_run(
    host: SubmitHost, w: WatchRecord, commits: str | None
) -> tuple[JobRecord, list[model.Commit]]:
    """The watched job and the commits ``run_watch`` would submit, in order."""
    job = get_job(host.engine, w.job)
    with open_repository(w.repository, w.branch, host) as repo:
        if commits is None:
            found = repo.commits(None, w.branch)
            shas = [c.sha for c in found]
            if job.function_commit in shas:  # the history before it is not "new"
                found = found[shas.index(job.function_commit) :]
        else:
            found = repo.commits(*parse_range(commits))
        known = {sha: model.Outcome(r.state, r.output_pdh) for sha, r in _known(host, w.id).items()}
        todo = model.to_run(found, known, retry_failed=commits is not None)
        # A commit whose tree lacks the function's file has nothing to run (it
        # could not be pinned, and would stop every later run at it).
        lacking = repo.lacking([c.sha for c in todo], w.path)
    return job, [c for c in todo if c.sha not in lacking]


def bisect_step(
    host: SubmitHost, w: WatchRecord, good: str, bad: str, executor: str | None = None
) -> BisectRecord:
    """One step of ``wh regol bisect``: the answer, or the run to wait for
    (submitted now unless one is already under way)."""
    job = get_job(host.engine, w.job)
    with open_repository(w.repository, w.branch, host) as repo:
        g, b = repo.commit(good), repo.commit(bad)
        if g == b:
            raise UsageError(f"--good {good} and --bad {bad} are the same commit {g[:12]}")
        if not repo.is_ancestor(g, b):
            raise UsageError(f"--good {good} must be an ancestor of --bad {bad}")
        candidates = repo.commits(g, b, MAX_BISECT)
        runs = _known(host, w.id)
        known = {sha: model.Outcome(r.state, r.output_pdh) for sha, r in runs.items()}
        try:
            step = model.bisect_step(g, [c.sha for c in candidates], known)
        except ValueError as e:
            raise UsageError(f"{e}: --good must name a commit whose run succeeds") from None
        left = step.high - step.low
        if step.done:
            run = runs.get(step.found) if step.found else None
            return BisectRecord(True, step.found, run, False, len(candidates), 0)
        assert step.run is not None
        if step.run in runs:  # under way: wait for it
            return BisectRecord(False, None, runs[step.run], False, len(candidates), left)
        commit = next((c for c in candidates if c.sha == step.run), None)
        made = _submit(host, w, job, commit or repo.describe(step.run), executor or job.executor)
        return BisectRecord(False, None, made, True, len(candidates), left)


def run_watches(
    host: SubmitHost,
    chosen: Sequence[WatchRecord],
    commits: str | None,
    executor: str | None = None,
) -> list[RunRecord]:
    """``run_watch`` for each watch in turn, at most ``MAX_COMMITS`` runs in all
    (a later call goes on where this one stopped).

    Every watch's commits are found before any run is submitted: a watch whose
    repository is gone (or lacks the range) fails the call, naming the watch,
    with nothing submitted for the others either.
    """
    plans = []
    for w in chosen:
        try:
            plans.append((w, *_to_run(host, w, commits)))
        except WarehouseError as e:
            raise type(e)(f"watch {w.id}: {e}") from None
    made: list[RunRecord] = []
    for w, job, todo in plans:
        for c in todo[: max(MAX_COMMITS - len(made), 0)]:
            made.append(_submit(host, w, job, c, executor or job.executor))
    return made


def runnable_watches(watches: Sequence[WatchRecord], wanted: Sequence[int]) -> list[WatchRecord]:
    """The watches a ``run`` covers: those named (each must be active), else all active."""
    by_id = {w.id: w for w in watches}
    if not wanted:
        return [w for w in watches if w.active]
    out = []
    for i in wanted:
        w = by_id.get(i)
        if w is None:
            raise NotFoundError(f"no watch {i}")
        if not w.active:
            raise UsageError(f"watch {i} is no longer active")
        out.append(w)
    return out
