"""``wh put``: store files and directories as a collection."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

import click

from warehouse.cli._common import byte_progress, check_pdh, emit_json, open_warehouse
from warehouse.manifest import Manifest

# A manifest text is read into memory; 1 GiB lists tens of millions of files.
MAX_MANIFEST_BYTES = 1 << 30

__all__ = ["put"]


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path, readable=False))
@click.option(
    "--manifest",
    "manifest_file",
    type=click.File("rb"),
    help="Store a collection from this manifest text ('-': standard input) instead of "
    "files; every block it lists must already be stored.",
)
@click.option("--name", help="Point this name at the new collection.")
@click.option(
    "--expect",
    metavar="PDH",
    callback=check_pdh,
    help="With --name: the PDH the name must hold now.",
)
@click.option("--create", is_flag=True, help="With --name: the name must not exist yet.")
@click.option(
    "--replication",
    type=click.IntRange(1, 8),
    help="Remote: copies of each block to write (default $WH_REPLICATION or 2).",
)
@click.option(
    "--min-copies",
    type=click.IntRange(1, 8),
    help="Remote: fail if any block gets fewer copies (default: the replication).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object instead of the PDH.")
@click.pass_context
def put(
    ctx: click.Context,
    paths: tuple[Path, ...],
    manifest_file: BinaryIO | None,
    name: str | None,
    expect: str | None,
    create: bool,
    replication: int | None,
    min_copies: int | None,
    as_json: bool,
) -> None:
    """Store PATHS as one collection and print its portable data hash.

    One directory stores its contents; several paths (or one file) are stored
    under their base names. Blocks already stored are not written again.

    With --name, the name is created (or, with --expect PDH, moved from PDH)
    by compare-and-swap; a name already holding other data is a conflict.
    """
    if (expect or create) and not name:
        raise click.UsageError("--expect and --create need --name")
    if expect and create:
        raise click.UsageError("give --expect or --create, not both")
    if bool(paths) == bool(manifest_file):
        raise click.UsageError("give PATHS or --manifest FILE")
    wh = open_warehouse(ctx, replication=replication, min_copies=min_copies)
    if manifest_file is not None:
        text = manifest_file.read(MAX_MANIFEST_BYTES + 1)
        if len(text) > MAX_MANIFEST_BYTES:
            raise click.UsageError(f"manifest is over {MAX_MANIFEST_BYTES} bytes")
        record = wh.put_manifest(Manifest.parse(text), name=name, expect=expect, create=create)
        if as_json:
            emit_json({"pdh": record.pdh, "files": record.file_count, "bytes": record.size})
        else:
            click.echo(record.pdh)
        return
    tree = wh.scan(list(paths))
    with byte_progress("put", tree.total_size) as progress:
        result = wh.put(tree, name=name, expect=expect, create=create, progress=progress)
    w = result.write
    if as_json:
        emit_json(
            {
                "pdh": result.pdh,
                "files": w.file_count,
                "bytes": w.bytes_read,
                "blocks": len(w.blocks),
                "blocks_new": w.blocks_new,
                "bytes_new": w.bytes_new,
                "copies": result.copies,
                "name": None if result.name is None else result.name.name,
                "name_version": None if result.name is None else result.name.version,
            }
        )
    else:
        click.echo(result.pdh)
