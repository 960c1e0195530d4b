"""``wh job …`` (submit and follow batch jobs) and ``wh step …`` (used inside steps)."""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Any

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from warehouse import jobs
from warehouse.blocks import Locator
from warehouse.cli._common import emit_json, emit_rows, open_warehouse, stderr, text_time
from warehouse.cli.completion import complete_job_ids
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import NotFoundError, UsageError, WarehouseError
from warehouse.jobs.jobrecords import JobRecord
from warehouse.jobs.jobsview import JobsView, LocalJobs, RemoteJobs, jobs_view
from warehouse.jobs.model import FINISHED
from warehouse.manifest import Manifest

__all__ = ["job"]


def _embedded(ctx: click.Context) -> EmbeddedWarehouse:
    wh: object = open_warehouse(ctx)
    if not isinstance(wh, EmbeddedWarehouse):
        raise UsageError("the job manager runs in the controller when WH_URL is set")
    return wh


def _view(ctx: click.Context) -> JobsView:
    """The jobs of $WH_HOME's catalog, or of the controller at $WH_URL."""
    return jobs_view(open_warehouse(ctx))


@click.group()
def job() -> None:
    """Submit batch jobs and follow them (see docs/jobs.md)."""


def _param(values: tuple[str, ...]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in values:
        key, eq, text = item.partition("=")
        if not eq or not key:
            raise click.UsageError(f"--param {item!r} is not KEY=VALUE")
        try:
            # NaN and Infinity are not JSON: such a word stays a string.
            params[key] = json.loads(text, parse_constant=_not_json)
        except ValueError:
            params[key] = text
    return params


def _not_json(word: str) -> Any:
    raise ValueError(word)


def _summary(record: JobRecord) -> str:
    if record.reused_from is not None:
        return f"job {record.id}: reused from {record.reused_from}: {record.output_pdh}"
    return f"job {record.id}: {record.state}" + (
        f": {record.output_pdh}" if record.output_pdh else ""
    )


@job.command()
@click.argument("function")
@click.option(
    "--input",
    "input_key",
    required=True,
    metavar="KEY",
    help="The input collection: a name or a PDH.",
)
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="K=V",
    help="A parameter, repeatable: V as JSON if it is JSON (8, true, [1,2]), else a string.",
)
@click.option("--wait", is_flag=True, help="Run or wait for the job; print its output PDH.")
@click.option("--no-reuse", is_flag=True, help="Run even if an identical job completed.")
@click.option(
    "--executor",
    type=click.Choice(["local", "dask", "slurm"]),
    help="Default local (with WH_URL: the controller's).",
)
@click.option("--dask-scheduler", metavar="ADDR", help="With --executor dask: its scheduler.")
@click.option("--priority", type=int, default=0, help="Higher runs first (default 0).")
@click.option(
    "--cpus", type=click.IntRange(min=1), default=1, help="CPUs each step needs (default 1)."
)
@click.option("--memory", default="0", help="Memory each step needs (512M, 4G).")
@click.option(
    "--attempts", type=click.IntRange(min=1), default=3, help="Attempts per step (default 3)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@click.pass_context
def submit(
    ctx: click.Context,
    function: str,
    input_key: str,
    params: tuple[str, ...],
    wait: bool,
    no_reuse: bool,
    executor: str | None,
    dask_scheduler: str | None,
    priority: int,
    cpus: int,
    memory: str,
    attempts: int,
    as_json: bool,
) -> None:
    """Submit a job running FUNCTION (builtin:NAME, git:REPO@REV:PATH or PDH/PATH)."""
    view = _view(ctx)
    name = f"dask:{dask_scheduler}" if executor == "dask" and dask_scheduler else executor
    if name != executor and isinstance(view, LocalJobs):
        from warehouse.jobs.daskexec import check_address

        # A malformed address is refused before the job is recorded; one where no
        # scheduler answers fails the job (its manager cannot run it).
        check_address(str(dask_scheduler))
    request = jobs.JobRequest(
        function,
        input_key,
        _param(params),
        reuse=not no_reuse,
        priority=priority,
        cpus=cpus,
        memory=jobs.parse_size(memory),
        max_attempts=attempts,
        executor=name or "local",
    )
    if isinstance(view, RemoteJobs):
        record = view.submit(request, executor=name)
        if wait and record.state not in FINISHED:
            record = _wait(view, record.id)
    else:
        record = _submit_here(view.wh, request, wait)
    if as_json:
        emit_json(record.as_dict())
    else:
        click.echo(_summary(record))
    if wait:
        _fail_unless_complete(ctx, record)


def _submit_here(wh: EmbeddedWarehouse, request: jobs.JobRequest, wait: bool) -> JobRecord:
    name = request.executor
    record = jobs.submit(wh, request)
    if record.state not in FINISHED:
        if wait:
            _run_until_finished(wh, name, record.id)
            if _others_active(wh.engine, name):
                jobs.ensure_manager(wh.home, name)
        else:
            jobs.ensure_manager(wh.home, name)
        record = jobs.get_job(wh.engine, record.id)
    return record


def _run_until_finished(wh: EmbeddedWarehouse, executor: str, job_id: int) -> None:
    """Run the manager here until the job is finished. While another process
    runs it, wait on the catalog, and take over when that process is gone
    however it died (its lock goes with it): never wait for a dead manager."""
    from warehouse.jobs.runmanager import ManagerLock

    lock = ManagerLock(wh.home, executor)
    while True:
        try:
            if jobs.run_manager(wh, executor, until_job=job_id):
                return
        except WarehouseError:
            # No executor: the job was failed with the reason, shown as for any failure.
            if jobs.get_job(wh.engine, job_id).state not in FINISHED:
                raise
            return
        # From 10 ms, doubled up to 0.2 s: a short job's end is seen at once.
        delay = 0.01
        while True:
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
            if jobs.get_job(wh.engine, job_id).state in FINISHED:
                return
            if not lock.held_elsewhere():
                break  # that manager is gone: run one here


def _others_active(engine: Any, executor: str) -> bool:
    return any(j.executor == executor for j in jobs.list_jobs(engine, ("queued", "running")))


def _wait(view: JobsView, job_id: int) -> JobRecord:
    # From 10 ms, doubled up to 0.2 s: a short job's end is seen at once, a long one's in few reads.
    delay = 0.01
    while (record := view.get(job_id)).state not in FINISHED:
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
    return record


@job.command()
@click.option(
    "--executor", default="local", help="local, dask, dask:ADDRESS, slurm or slurm:PARTITION."
)
@click.option(
    "--cpus",
    type=click.IntRange(min=1),
    help="Slots (local: default one per core; dask: workers).",
)
@click.pass_context
def manager(ctx: click.Context, executor: str, cpus: int | None) -> None:
    """Run the job manager here until no job is left (one per executor at a time)."""
    wh = _embedded(ctx)
    if not jobs.run_manager(wh, executor, cpus=cpus):
        raise UsageError(f"a manager for executor {executor!r} is already running")


@job.command(name="ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def ls(ctx: click.Context, as_json: bool) -> None:
    """List jobs: running, queued, then finished."""
    found = _view(ctx).all()
    if as_json:
        emit_json([r.as_dict() for r in found])
        return
    order = {"running": 0, "paused": 0, "queued": 1}
    found = sorted(found, key=lambda r: (order.get(r.state, 2), r.id))
    emit_rows(
        ("id", "state", "function", "done", "running", "queued", "output", "created_at"),
        [
            (
                r.id,
                r.state,
                r.function,
                r.steps_done,
                r.steps_running,
                r.steps_queued,
                r.output_pdh,
                text_time(r.created_at),
            )
            for r in found
        ],
    )


@job.command()
@click.argument("job_id", type=int, shell_complete=complete_job_ids)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("--steps", "each_step", is_flag=True, help="Also each step's counters.")
@click.pass_context
def show(ctx: click.Context, job_id: int, as_json: bool, each_step: bool) -> None:
    """A job's function and version, input, output, state, counts, counters and failed steps.

    Counters (records in and out, bytes shuffled...) are those the steps
    reported, added up per level and for the job.
    """
    from warehouse.jobs.counters import format_counters, step_counters, totals

    view = _view(ctx)
    record = view.get(job_id)
    all_steps = view.steps(job_id)
    failed = [s for s in all_steps if s.failures]
    by_level, job_counters = totals(all_steps)
    if as_json:
        emit_json(
            {
                **record.as_dict(),
                "local_fraction": record.local_fraction,
                "failed_steps": [s.as_dict() for s in failed],
                "counters": job_counters,
                "level_counters": {str(k): v for k, v in by_level.items()},
                **(
                    {"step_counters": {str(s.number): step_counters(s) for s in all_steps}}
                    if each_step
                    else {}
                ),
            }
        )
        return
    commit = f" (commit {record.function_commit})" if record.function_commit else ""
    lines = [
        f"job {record.id}: {record.state}",
        f"function: {record.function} = {record.function_pdh}/{record.function_path}{commit}",
        f"input:    {record.input_pdh}"
        + (f" (submitted as {record.input_name})" if record.input_name else ""),
        f"params:   {record.params}",
        f"output:   {record.output_pdh or '-'}",
        f"logs:     {record.log_pdh or '-'}",
        f"steps:    {record.steps_done} done, {record.steps_running} running, "
        f"{record.steps_queued} queued, {record.failed_attempts} failed attempts",
    ]
    if record.local_fraction is not None:
        lines.append(
            f"local:    {record.local_fraction:.0%} of {record.input_bytes} input bytes "
            "on the step's own host"
        )
    lines.append(
        f"times:    submitted {text_time(record.created_at)} by {record.submitted_by}, "
        f"started {text_time(record.started_at)}, finished {text_time(record.finished_at)}"
    )
    if record.reused_from is not None:
        lines.append(f"reused from {record.reused_from}")
    if record.error:
        lines.append(f"error:    {record.error}")
    if job_counters:
        lines.append(f"counters: {format_counters(job_counters)}")
        lines.extend(f"  level {k}: {format_counters(v)}" for k, v in by_level.items())
    if each_step:
        lines.extend(
            f"  step {s.number} (level {s.level}): {format_counters(step_counters(s))}"
            for s in all_steps
            if s.counters
        )
    for s in failed:
        lines.append(
            f"step {s.number} (level {s.level}, input {s.input!r}): {s.state}, "
            f"{s.failures} failed attempts, exit status {s.exit_status}; end of its log:"
        )
        lines.extend("  | " + line for line in (s.log_tail or "").splitlines()[-20:])
    click.echo("\n".join(lines))


@job.command()
@click.argument("job_id", type=int, shell_complete=complete_job_ids)
@click.pass_context
def watch(ctx: click.Context, job_id: int) -> None:
    """A live bar until the job finishes: done, running, queued, failed attempts."""
    view = _view(ctx)
    record = view.get(job_id)
    _ensure_manager(view, record)
    columns = (
        TextColumn("job {task.fields[id]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
    )
    # Drawn only on a terminal; piped, the summary line alone says how it ended.
    drawn = stderr.is_terminal
    with Progress(*columns, console=stderr, transient=False, disable=not drawn) as bar:
        task = bar.add_task("", total=None, id=job_id)
        turns = 0
        while True:
            total = record.steps_done + record.steps_running + record.steps_queued
            if record.state in FINISHED and record.state != "complete":
                # Failed and stopped steps are in no count: the bar must not read "n/n".
                total = max(total, len(view.steps(job_id)))
            reused = f", reused from {record.reused_from}" if record.reused_from else ""
            bar.update(
                task,
                total=max(total, 1),
                completed=record.steps_done,
                description=f"{record.steps_running} running, {record.steps_queued} queued, "
                f"{record.failed_attempts} failed attempts, {record.state}{reused}",
            )
            if record.state in FINISHED:
                break
            time.sleep(0.5)
            record = view.get(job_id)
            turns += 1
            if turns % 20 == 0:  # every 10 s: one killed meanwhile is started again
                _ensure_manager(view, record)
    click.echo(_summary(record))
    _fail_unless_complete(ctx, record)


def _ensure_manager(view: JobsView, record: JobRecord) -> None:
    """On an embedded warehouse, a manager runs while the job is unfinished:
    one that was killed (or never started) would leave it so, and a watch
    waiting for it forever."""
    if isinstance(view, LocalJobs) and record.state not in FINISHED:
        jobs.ensure_manager(view.wh.home, record.executor)


def _fail_unless_complete(ctx: click.Context, record: JobRecord) -> None:
    """Exit 1 for a job that failed or was cancelled (as ``submit --wait`` and ``watch`` do)."""
    if record.state != "complete":
        raise job_failure(ctx, record)


_RAISED = re.compile(r"^(?:[A-Za-z_][\w.]*)?(?:Error|Exception): ")


def step_reason(ctx: click.Context, job_id: int) -> str:
    """The last line a failed step of the job logged: an ``Error: …`` or a
    traceback's exception line (DuckDB's message goes on with the SQL and a
    caret under it) if there is one, else its last line; "" if none."""
    try:
        steps = _view(ctx).steps(job_id, failed=True)
    except WarehouseError:
        return ""
    for s in sorted(steps, key=lambda s: s.state != "failed"):
        lines = [line.rstrip() for line in (s.log_tail or "").splitlines() if line.strip()]
        raised = [line for line in lines if _RAISED.match(line)]
        if raised or lines:
            return _RAISED.sub("", (raised or lines)[-1]).strip()
    return ""


def job_failure(ctx: click.Context, record: JobRecord) -> WarehouseError:
    """The job's failure, with the reason its failed step logged, not only the exit status."""
    reason = step_reason(ctx, record.id)
    said = f"job {record.id} {record.state}"
    # Only the parts there are: a cancelled job has neither reason nor step.
    return WarehouseError(": ".join(p for p in (said, record.error, reason) if p))


@job.command()
@click.argument("job_id", type=int, shell_complete=complete_job_ids)
@click.option("--step", "number", type=int, help="Only this step's log.")
@click.pass_context
def logs(ctx: click.Context, job_id: int, number: int | None) -> None:
    """Print the steps' logs (the last attempt of each), in step order."""
    view = _view(ctx)
    steps = view.steps(job_id, number=number)
    if not steps:
        view.get(job_id)  # no such job: not found, not an empty answer
        if number is not None:
            raise NotFoundError(f"job {job_id} has no step {number}")
    for s in steps:
        if not s.log:
            continue
        if number is None:
            click.echo(f"== step {s.number} ({s.state}, exit status {s.exit_status})")
        for entry in Manifest.parse(s.log).files().values():
            for piece in entry.pieces:
                data = view.wh.store.get(Locator.parse(str(piece.locator)))
                sys.stdout.buffer.write(data[piece.offset : piece.offset + piece.length])
        sys.stdout.flush()


def _control(ctx: click.Context, job_id: int, control: str) -> None:
    _view(ctx).control(job_id, control)
    click.echo(f"job {job_id}: {control} requested")


@job.command()
@click.argument("job_id", type=int, shell_complete=complete_job_ids)
@click.pass_context
def cancel(ctx: click.Context, job_id: int) -> None:
    """Cancel a job: its running steps are killed, nothing more starts."""
    _control(ctx, job_id, "cancel")


@job.command()
@click.argument("job_id", type=int, shell_complete=complete_job_ids)
@click.pass_context
def pause(ctx: click.Context, job_id: int) -> None:
    """Pause a job: running steps finish, no new step starts until resume."""
    _control(ctx, job_id, "pause")


@job.command()
@click.argument("job_id", type=int, shell_complete=complete_job_ids)
@click.pass_context
def resume(ctx: click.Context, job_id: int) -> None:
    """Resume a paused job."""
    _control(ctx, job_id, "resume")
