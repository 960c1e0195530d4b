"""``wh lineage KEY``: what made a collection, or what was made from it."""

from __future__ import annotations

import click

from warehouse.cli._common import emit_json, open_warehouse
from warehouse.lineage.render import to_dot, to_text
from warehouse.lineage.tracing import MAX_DEPTH, lineage

__all__ = ["lineage_command"]


@click.command("lineage")
@click.argument("key")
@click.option("--down", is_flag=True, help="What was made from KEY, transitively (default: up).")
@click.option(
    "--depth",
    type=click.IntRange(0, MAX_DEPTH),
    metavar="N",
    help="Follow at most N making links (a job or a combining); default all.",
)
@click.option("--json", "as_json", is_flag=True, help="The graph as JSON (docs/lineage.md).")
@click.option("--dot", "as_dot", is_flag=True, help="The graph as Graphviz dot text.")
@click.pass_context
def lineage_command(
    ctx: click.Context, key: str, down: bool, depth: int | None, as_json: bool, as_dot: bool
) -> None:
    """What made KEY (a name or PDH): jobs, functions, combined collections, back to
    the puts; with --down, every job that read KEY and what it made."""
    if as_json and as_dot:
        raise click.UsageError("--json and --dot: choose one")
    graph = lineage(open_warehouse(ctx), key, down=down, depth=depth)
    if as_json:
        emit_json(graph.as_dict())
    elif as_dot:
        click.echo(to_dot(graph), nl=False)
    else:
        click.echo(to_text(graph), nl=False)
