"""``wh collection ls``: find collections, named or not."""

from __future__ import annotations

import click

from warehouse.cli._common import emit_json, emit_rows, open_warehouse, text_time
from warehouse.lineage.finding import KIND_NAMES, MAX_LIMIT, find

__all__ = ["collection"]


@click.group()
def collection() -> None:
    """Collections: list them, named or not (`wh name` points names at them)."""


@collection.command("ls")
@click.option("--mine", is_flag=True, help="Only the collections you stored.")
@click.option(
    "--kind",
    type=click.Choice(sorted(KIND_NAMES)),
    help="Only this kind: put, a job's output or log, a function's source, "
    "a combined collection, a workflow file.",
)
@click.option(
    "--limit",
    type=click.IntRange(1, MAX_LIMIT),
    default=100,
    show_default=True,
    help="At most this many, newest first.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list (times ISO 8601 UTC).")
@click.pass_context
def collection_ls(
    ctx: click.Context, mine: bool, kind: str | None, limit: int, as_json: bool
) -> None:
    """List collections, newest first: PDH, kind, files, bytes, when, by whom.

    Unnamed ones too (a job's output before it is named, an old put).
    Piped, it prints tab-separated columns under a header line.
    """
    rows = find(open_warehouse(ctx), mine=mine, kind=kind, limit=limit)
    if as_json:
        emit_json(
            [
                {
                    "pdh": r.pdh,
                    "kinds": list(r.kinds),
                    "files": r.file_count,
                    "bytes": r.size,
                    "created_at": r.created_at,
                    "created_by": r.created_by,
                }
                for r in rows
            ]
        )
        return
    header = ("pdh", "kind", "files", "bytes", "created_at", "created_by")
    lines: list[tuple[object, ...]] = [
        (r.pdh, ",".join(r.kinds), r.file_count, r.size, text_time(r.created_at), r.created_by)
        for r in rows
    ]
    emit_rows(header, lines, sizes=("bytes",))
