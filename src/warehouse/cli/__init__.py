"""The ``wh`` command: a thin layer over the library (see docs/cli.md)."""

from __future__ import annotations

from typing import Any

import click

from warehouse.cli._common import Failure
from warehouse.errors import WarehouseError

__all__ = ["cli", "main"]


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except WarehouseError as e:
            raise Failure(e) from e


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="warehouse", prog_name="wh")
def cli() -> None:
    """Free Factory warehouse: content-addressed collections, names and jobs.

    With no server configured, commands work on the embedded warehouse in
    $WH_HOME (default ~/.local/share/warehouse).

    Exit codes: 0 ok, 1 error, 2 usage or bad input, 3 conflict,
    4 not found, 5 corrupt data, 6 permission denied.
    """


def _register() -> None:
    from warehouse.cli import browse, gc, get, jobs, keepd, names, put, serve, users, web

    for module in (put, get, browse, names, serve, users, keepd, jobs, gc, web):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main() -> None:
    cli()
