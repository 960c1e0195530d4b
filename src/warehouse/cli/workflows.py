"""``wh workflow …``: run a DAG of jobs from a YAML file, list, show and cancel runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from warehouse.catalog.values import NAME_LIMIT
from warehouse.cli._common import emit_json, emit_rows, open_warehouse, plural, text_time
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import UsageError, WarehouseError
from warehouse.workflows.spec import MAX_FILE_BYTES, output_name, parse_input_option
from warehouse.workflows.workflowsview import WorkflowsView, workflows_view

__all__ = ["workflow"]


def _view(ctx: click.Context) -> WorkflowsView:
    return workflows_view(open_warehouse(ctx))


@click.group()
def workflow() -> None:
    """Run DAGs of jobs written as YAML files (see docs/workflows.md)."""


class _Lines:
    """One line per job as it starts and as it ends: state, steps done, reused."""

    def __init__(self) -> None:
        self.shown: dict[str, str] = {}

    def __call__(self, view: dict[str, Any]) -> None:
        for node in view["nodes"]:
            state = node["state"]
            if self.shown.get(node["node"]) == state or state in ("waiting", "queued"):
                continue
            self.shown[node["node"]] = state
            click.echo(_node_line(node), err=True)


def _node_line(node: dict[str, Any]) -> str:
    job = f"job {node['job_id']}" if node["job_id"] is not None else "no job"
    how = "reused" if node["reused"] else plural(node["steps_done"], "step")
    error = f": {node['error']}" if node.get("error") else ""
    return f"  {node['node']:<20} {node['state']:<9} {job:<10} {how}{error}"


def _summary(view: dict[str, Any]) -> str:
    nodes = view["nodes"]
    reused = sum(1 for n in nodes if n["reused"])
    ran = [n for n in nodes if not n["reused"] and n["job_id"] is not None]
    steps = sum(n["steps_done"] for n in ran)
    head = f"workflow run {view['id']} ({view['workflow']}): {view['state']}"
    if view["state"] == "complete" and not ran:
        return f"{head}: nothing to run, all {plural(reused, 'job')} reused (0 steps run)"
    counts = f"{plural(len(ran), 'job')} ran ({plural(steps, 'step')})"
    return f"{head}: {counts}, {reused} reused, of {len(nodes)}"


@workflow.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-i", "--input", "inputs", multiple=True, metavar="NAME=VALUE", help="An input.")
@click.option(
    "--name-outputs",
    metavar="PREFIX",
    help=f"Name each output PREFIX.<output> (at most {NAME_LIMIT} characters).",
)
@click.option("--wait", is_flag=True, help="Drive the run here until it ends; print progress.")
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
@click.pass_context
def run(
    ctx: click.Context,
    file: Path,
    inputs: tuple[str, ...],
    name_outputs: str | None,
    wait: bool,
    as_json: bool,
) -> None:
    """Run the workflow in FILE (the same command again resumes it)."""
    try:
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            raise UsageError(f"{file}: over {MAX_FILE_BYTES} bytes")
        # Read at most one byte past the bound: a device or a pipe has no size.
        with file.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise UsageError(f"{file}: over {MAX_FILE_BYTES} bytes")
        text = data.decode("utf-8")
    except OSError as e:
        raise UsageError(f"{file}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{file}: not UTF-8 text") from None
    given = dict(parse_input_option(i) for i in inputs)
    view = _view(ctx)
    started = view.start(
        text, file.name, given, name_outputs=name_outputs, base_dir=file.resolve().parent
    )
    run_id = started["id"]
    if started["resumed"] and not as_json:
        click.echo(f"resuming workflow run {run_id} ({started['state']})", err=True)
    follow = _Lines() if wait and not as_json else None
    final = view.run(run_id, wait=wait, follow=follow)
    if as_json:
        emit_json({**final, "resumed": started["resumed"]})
    elif wait:
        click.echo(_summary(final))
        for out, pdh in sorted(_outputs(final).items()):
            prefix = final.get("name_outputs")
            named = f" ({output_name(prefix, out)})" if prefix else ""
            click.echo(f"{out}: {pdh}{named}")
    else:
        click.echo(f"workflow run {run_id}: {final['state']}")
    if wait and final["state"] != "complete":
        said = f"workflow run {run_id} {final['state']}: {final.get('error') or ''}".rstrip(": ")
        from warehouse.cli.jobs import step_reason  # the jobs commands: loaded when used

        failed = [n for n in final.get("nodes", []) if n["state"] == "failed" and n["job_id"]]
        reason = step_reason(ctx, failed[0]["job_id"]) if failed else ""
        raise WarehouseError(f"{said}: {reason}" if reason else said)


def _outputs(view: dict[str, Any]) -> dict[str, str]:
    import json

    return dict(json.loads(view["outputs"])) if view.get("outputs") else {}


@workflow.command(name="ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def ls(ctx: click.Context, as_json: bool) -> None:
    """List workflow runs, newest first."""
    found = _view(ctx).all()
    if as_json:
        emit_json(found)
        return
    emit_rows(
        ("id", "state", "workflow", "owner", "file_pdh", "created_at"),
        [(r["id"], r["state"], r["workflow"], r["owner"], r["file_pdh"], _when(r)) for r in found],
    )


def _when(view: dict[str, Any]) -> str:
    return text_time(view.get("created_at"))


@workflow.command()
@click.argument("run_id", type=int, metavar="RUN")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def show(ctx: click.Context, run_id: int, as_json: bool) -> None:
    """A run: its file, inputs, state, outputs, and each job's state."""
    view = _view(ctx).get(run_id)
    if as_json:
        emit_json(view)
        return
    lines = [
        _summary(view),
        f"file:    {view['file_pdh']}",
        f"inputs:  {view['inputs']}",
        f"owner:   {view['owner']}",
        f"times:   created {_when(view)}, started {text_time(view.get('started_at'))}, "
        f"finished {text_time(view.get('finished_at'))}",
    ]
    if view.get("outputs"):
        lines.append(f"outputs: {view['outputs']}")
    if view.get("error"):
        lines.append(f"error:   {view['error']}")
    lines.extend(_node_line(n) for n in view["nodes"])
    click.echo("\n".join(lines))


@workflow.command()
@click.argument("run_id", type=int, metavar="RUN")
@click.pass_context
def cancel(ctx: click.Context, run_id: int) -> None:
    """Cancel a run: its running jobs are cancelled, nothing more is submitted."""
    _view(ctx).cancel(run_id)
    click.echo(f"workflow run {run_id}: cancel requested")


@workflow.command(hidden=True)
@click.argument("run_id", type=int, metavar="RUN")
@click.option(
    "--executor",
    default="local",
    show_default=True,
    help="Where the jobs' steps run (as `wh job manager --executor`).",
)
@click.pass_context
def drive(ctx: click.Context, run_id: int, executor: str) -> None:
    """Drive a run in this process (what `wh workflow run` starts in the background)."""
    from warehouse.workflows.embeddeddriving import drive_here

    wh: object = open_warehouse(ctx)
    if not isinstance(wh, EmbeddedWarehouse):
        raise UsageError("a controller drives its own runs")
    run = drive_here(wh, run_id, executor=executor)
    print(f"workflow run {run_id}: {run.state}", file=sys.stderr)
