"""``wh copy``: a collection to another cluster (docs/clusters.md)."""

from __future__ import annotations

import click

from warehouse.cli._common import byte_progress, emit_json, open_warehouse
from warehouse.cli.completion import complete_keys
from warehouse.errors import ForbiddenError, UsageError

__all__ = ["copy"]


@click.command()
@click.argument("key", shell_complete=complete_keys)
@click.option("--to", "to", required=True, metavar="CLUSTER", help="A cluster of [clusters.NAME].")
@click.option("--name", metavar="N", help="Also create name N there (or find it already there).")
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@click.pass_context
def copy(ctx: click.Context, key: str, to: str, name: str | None, as_json: bool) -> None:
    """Copy the collection KEY to cluster CLUSTER: the blocks it lacks, then its record.

    KEY (a PDH or a name) is read here, or from another cluster when only that
    one holds it; each block is checked against its MD5 before it is sent, so a
    corrupt copy is never copied. The collection is recorded there under the
    same PDH. A copy cut short resumes where it stopped; a collection already
    there is not copied again. Clusters are configured in the config file
    (docs/clusters.md).
    """
    from warehouse.clusters.copying import copy_collection
    from warehouse.remote.warehouse import RemoteWarehouse

    source = open_warehouse(ctx)
    try:
        if isinstance(source, RemoteWarehouse):
            if to == source.cluster:
                raise UsageError(f"--to {to}: that is this installation's own cluster")
            dest = source.other(to)
        else:
            from warehouse.settings import clusters

            entry = clusters().get(to)
            if entry is None:
                raise UsageError(f"cluster {to!r} is not configured here (see docs/clusters.md)")
            dest = RemoteWarehouse(entry.url, entry.token, wait=False)
            ctx.call_on_close(dest.close)
    except ForbiddenError as e:
        # Two clusters, two tokens: say which one was refused.
        raise ForbiddenError(
            f"cluster {to}: {e} (its token is the one in [clusters.{to}] of the config file)"
        ) from None
    with byte_progress(f"copy to {to}", source.manifest(key).size) as bar:
        result = copy_collection(source, dest, key, name=name, progress=bar)
    if as_json:
        emit_json(result.as_dict())
        return
    if result.already:
        said = f"{result.pdh}: already on {to}, nothing copied"
    else:
        said = (
            f"{result.pdh}: copied {result.copied_blocks} of {result.blocks} blocks "
            f"({result.copied_bytes} of {result.bytes} bytes) to {to}"
        )
    click.echo(said + (f"; name {name}" if name else ""))
