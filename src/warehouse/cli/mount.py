"""``wh mount DIR``: the warehouse as a read-only file system (docs/mount.md)."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from warehouse.cli._common import open_warehouse
from warehouse.errors import UsageError

__all__ = ["mount"]


@click.command()
@click.argument("directory", type=click.Path(path_type=Path))
@click.option(
    "--allow-other",
    is_flag=True,
    help="Let other users (and sandboxed steps) see the mount; needs root or "
    "user_allow_other in /etc/fuse.conf.",
)
@click.pass_context
def mount(ctx: click.Context, directory: Path, allow_other: bool) -> None:
    """Mount the warehouse read-only at DIRECTORY until unmounted.

    DIRECTORY/by_id/PDH/... is a collection, DIRECTORY/by_name/NAME/... a
    name's current collection; `ls DIRECTORY/by_name` lists the names you
    may read. Runs in the foreground: Ctrl-C, SIGTERM or `fusermount3 -u
    DIRECTORY` unmounts. Every block read is verified; a read that fails
    (a dead controller, a block without a good copy) is EIO.
    """
    if not directory.is_dir():
        raise UsageError(f"{directory}: not a directory")
    wh = open_warehouse(ctx)
    logging.basicConfig(format="wh mount: %(message)s", level=logging.WARNING)
    from warehouse.mount import mount as serve

    def ready() -> None:
        click.echo(
            f"mounted at {directory}; Ctrl-C or `fusermount3 -u {directory}` unmounts",
            err=True,
        )

    serve(wh, directory, allow_other=allow_other, ready=ready)
