"""``wh regol …``: re-run watched jobs at each commit, show the history, bisect."""

from __future__ import annotations

import click

from warehouse.cli._common import emit_json, emit_rows, open_warehouse, text_time
from warehouse.regol.client import Regol, bisect, regol_view
from warehouse.regol.values import RunRecord

__all__ = ["regol"]


def _view(ctx: click.Context) -> Regol:
    return regol_view(open_warehouse(ctx))


@click.group()
def regol() -> None:
    """Re-run jobs at each commit of their function's branch (see docs/regol.md)."""


@regol.command()
@click.argument("job_id", type=int, metavar="JOB")
@click.option("--branch", help="Branch to follow (default: the revision the job ran at).")
@click.option("--label", help="Name shown in the history (default: PATH on BRANCH).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def watch(
    ctx: click.Context, job_id: int, branch: str | None, label: str | None, as_json: bool
) -> None:
    """Follow completed JOB, whose function is git:, along a branch."""
    w = _view(ctx).watch(job_id, branch, label)
    if as_json:
        emit_json(w.as_dict())
    else:
        click.echo(f"watch {w.id}: job {w.job}, {w.path} on {w.branch} of {w.repository}")


@regol.command(name="ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def ls(ctx: click.Context, as_json: bool) -> None:
    """List the watches."""
    found = _view(ctx).watches()
    if as_json:
        emit_json([w.as_dict() for w in found])
        return
    emit_rows(
        ("id", "label", "job", "branch", "repository", "state"),
        [
            (w.id, w.label, w.job, w.branch, w.repository, "watched" if w.active else "unwatched")
            for w in found
        ],
    )


@regol.command()
@click.argument("watch_id", type=int, metavar="WATCH")
@click.pass_context
def unwatch(ctx: click.Context, watch_id: int) -> None:
    """Stop following WATCH (its history stays)."""
    _view(ctx).unwatch(watch_id)
    click.echo(f"watch {watch_id}: unwatched")


def _when(t: float) -> str:
    return text_time(t)


def _seconds(t: float | None) -> str:
    return "-" if t is None else f"{t:.1f}s"


def _changed(r: RunRecord) -> str:
    return {None: "-", True: "same", False: "CHANGED"}[r.equals_previous]


def _run_line(r: RunRecord) -> str:
    reused = " (reused)" if r.reused else ""
    out = f" {r.output_pdh}" if r.output_pdh else ""
    head = f"watch {r.watch}: {r.commit[:10]} {r.subject[:50]!r}"
    return f"{head}: job {r.job} {r.state}{reused}{out}"


@regol.command()
@click.argument("watch_ids", type=int, nargs=-1, metavar="[WATCH]...")
@click.option("--commits", metavar="REV..REV", help="Each commit of this range (as git log).")
@click.option("--wait", is_flag=True, help="Wait until every run has finished.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def run(
    ctx: click.Context,
    watch_ids: tuple[int, ...],
    commits: str | None,
    wait: bool,
    as_json: bool,
) -> None:
    """Run each watch (default: all) at every commit of its branch not run yet,
    oldest first, at the lowest priority."""
    view = _view(ctx)
    made = view.run(watch_ids, commits, start=not wait)
    if wait and made:
        made = view.wait(made)
    if as_json:
        emit_json([r.as_dict() for r in made])
        return
    for r in made:
        click.echo(_run_line(r))
    if not made and not watch_ids and not any(w.active for w in view.watches()):
        click.echo("nothing to run: no active watch (wh regol watch JOB makes one)")
    elif not made:
        click.echo("nothing to run: every commit has a run")


@regol.command()
@click.argument("watch_id", type=int, metavar="WATCH")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def show(ctx: click.Context, watch_id: int, as_json: bool) -> None:
    """The history of WATCH: one row per commit run, oldest first."""
    view = _view(ctx)
    w = view.get(watch_id)
    runs = view.history(watch_id)
    if as_json:
        emit_json({**w.as_dict(), "runs": [r.as_dict() for r in runs]})
        return
    click.echo(f"watch {w.id}: {w.label} ({w.path} on {w.branch} of {w.repository})")
    header = ("commit", "time (UTC)", "job", "state", "output", "changed", "run time", "CPU")
    rows = [
        (
            r.commit[:10],
            _when(r.commit_time),
            str(r.job) + ("*" if r.reused else ""),
            r.state,
            r.output_pdh or "-",
            _changed(r),
            _seconds(r.run_time),
            _seconds(r.cpu_seconds),
        )
        for r in runs
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    if any(r.reused for r in runs):
        click.echo("* reused an earlier job's output (same function tree, input and params)")


@regol.command(name="bisect")
@click.argument("watch_id", type=int, metavar="WATCH")
@click.option("--good", required=True, metavar="REV", help="A commit whose output is right.")
@click.option("--bad", required=True, metavar="REV", help="A later commit that differs.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def bisect_command(ctx: click.Context, watch_id: int, good: str, bad: str, as_json: bool) -> None:
    """Find the first commit after GOOD whose output differs from GOOD's (or
    that fails), by binary search, reusing every run already made."""
    view = _view(ctx)
    made: list[RunRecord] = []

    def heard(r: RunRecord) -> None:
        made.append(r)
        if not as_json:
            click.echo("ran " + _run_line(r))

    result = bisect(view, watch_id, good, bad, heard)
    if as_json:
        emit_json({**result.as_dict(), "runs_made": [r.as_dict() for r in made]})
        return
    if result.found is None:
        click.echo(f"no commit of {good}..{bad} differs from {good} ({len(made)} runs made)")
        return
    subject = f" {result.run.subject!r}" if result.run else ""
    state = f": {result.run.state}" if result.run else ""
    click.echo(f"first commit that differs: {result.found}{subject}{state} ({len(made)} runs made)")
