"""The ``wh`` command: a thin layer over the library (see docs/cli.md)."""

from __future__ import annotations

import importlib
from typing import Any

import click

from warehouse.cli._common import Failure
from warehouse.errors import WarehouseError

__all__ = ["cli", "main"]


# Each command's module is imported only when that command runs: the server,
# web and job modules pull in FastAPI, uvicorn and Dask, which would add most
# of a second to every `wh put`.
_COMMANDS = {
    "put": "warehouse.cli.put:put",
    "get": "warehouse.cli.get:get",
    "ls": "warehouse.cli.browse:ls",
    "cat": "warehouse.cli.browse:cat",
    "manifest": "warehouse.cli.browse:manifest",
    "name": "warehouse.cli.names:name",
    "accounting": "warehouse.cli.names:accounting",
    "serve": "warehouse.cli.serve:serve",
    "user": "warehouse.cli.users:user",
    "token": "warehouse.cli.users:token",
    "keepd": "warehouse.cli.keepd:keepd",
    "job": "warehouse.cli.jobs:job",
    "step": "warehouse.cli.steps:step",
    "gc": "warehouse.cli.gc:gc",
    "balance": "warehouse.cli.gc:balance",
    "fsck": "warehouse.cli.gc:fsck",
    "web": "warehouse.cli.web:web",
}


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attr = target.partition(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        return command

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


def main() -> None:
    cli()
