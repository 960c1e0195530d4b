"""The ``wh`` command: a thin layer over the library (see docs/cli.md)."""

from __future__ import annotations

import importlib
import os
import select
import sys
from typing import Any

import click

from warehouse.cli._common import Failure
from warehouse.errors import WarehouseError, os_error

__all__ = ["cli", "main"]


# Each command's module is imported only when that command runs: the server,
# web and job modules pull in FastAPI, uvicorn and Dask, which would add most
# of a second to every `wh put`. The one-line help is kept here too, so that
# `wh --help` lists the commands without importing them (a test keeps it
# equal to each command's own).
_COMMANDS = {
    "put": (
        "warehouse.cli.put:put",
        "Store PATHS as one collection and print its portable data hash.",
    ),
    "get": (
        "warehouse.cli.get:get",
        "Write the files of KEY (a PDH or a name, optionally /sub/path) into DEST.",
    ),
    "ls": (
        "warehouse.cli.browse:ls",
        "List the files of KEY (a PDH or name, optionally /sub/path).",
    ),
    "cat": (
        "warehouse.cli.browse:cat",
        "Write one file of a collection (KEY/path) to standard output, verified.",
    ),
    "cache": (
        "warehouse.cli.cache:cache",
        "The node's disk cache of blocks read from keep servers or S3 volumes.",
    ),
    "collection": (
        "warehouse.cli.collections:collection",
        "Collections: list them, named or not (`wh name` points names at them).",
    ),
    "config": (
        "warehouse.cli.config:config",
        "Print the effective settings and where each came from.",
    ),
    "copy": (
        "warehouse.cli.copy:copy",
        "Copy the collection KEY to cluster CLUSTER: the blocks it lacks, then its record.",
    ),
    "manifest": ("warehouse.cli.browse:manifest", "Print the manifest of KEY (a PDH or a name)."),
    "mount": (
        "warehouse.cli.mount:mount",
        "Mount the warehouse read-only at DIRECTORY until unmounted.",
    ),
    "name": (
        "warehouse.cli.names:name",
        "Names: compare-and-swap pointers to collections, with history.",
    ),
    "accounting": (
        "warehouse.cli.names:accounting",
        "Block writes per user: how many, how many new, bytes sent and newly stored.",
    ),
    "usage": (
        "warehouse.cli.usage:usage",
        "What the steps of jobs used: CPU and wall seconds, peak memory, bytes, "
        "blocks read by where they came from.",
    ),
    "cost": (
        "warehouse.cli.usage:cost",
        "What the steps of jobs cost by a price table (node time, storage).",
    ),
    "serve": (
        "warehouse.cli.serve:serve",
        "Run the controller: the JSON API (OpenAPI at /openapi.json) over the catalog.",
    ),
    "s3": ("warehouse.cli.s3:s3", "The S3 gateway of `wh serve`: credentials for S3 clients."),
    "user": ("warehouse.cli.users:user", "Users of a shared installation."),
    "token": (
        "warehouse.cli.users:token",
        "API tokens: create, list (ids, never secrets) and revoke.",
    ),
    "keep": ("warehouse.cli.keep:keep", "The keep servers registered with the controller."),
    "keepd": (
        "warehouse.cli.keepd:keepd",
        "Serve blocks over HTTP from local or S3 volumes (the keep server).",
    ),
    "job": ("warehouse.cli.jobs:job", "Submit batch jobs and follow them (see docs/jobs.md)."),
    "step": ("warehouse.cli.steps:step", "Report from inside a running step (uses $WH_RESULT)."),
    "gc": (
        "warehouse.cli.gc:gc",
        "Trash blocks no root references and older than the signature TTL.",
    ),
    "balance": (
        "warehouse.cli.gc:balance",
        "Give every referenced block the wanted number of copies (remote).",
    ),
    "fsck": (
        "warehouse.cli.gc:fsck",
        "Read and verify every stored block; report missing, corrupt and under-replicated "
        "blocks and the collections they belong to.",
    ),
    "regol": (
        "warehouse.cli.regol:regol",
        "Re-run jobs at each commit of their function's branch (see docs/regol.md).",
    ),
    "lineage": (
        "warehouse.cli.lineage:lineage_command",
        "What made KEY (a name or PDH): jobs, functions, combined collections, back to the "
        "puts; with --down, every job that read KEY and what it made.",
    ),
    "workflow": (
        "warehouse.cli.workflows:workflow",
        "Run DAGs of jobs written as YAML files (see docs/workflows.md).",
    ),
    "cwl": (
        "warehouse.cli.cwl:cwl",
        "Run CWL v1.2 workflows and tools as warehouse jobs (see docs/cwl.md).",
    ),
    "query": (
        "warehouse.cli.tables:query",
        "Run SQL over tables (names resolve through the catalog), here or as a job.",
    ),
    "sql": (
        "warehouse.cli.sql:sql",
        "Run one SELECT over the catalog, read-only (admins; tables in docs/sql.md).",
    ),
    "table": (
        "warehouse.cli.tables:table",
        "Tables: partitioned Parquet or CSV collections that `wh query` reads.",
    ),
    "group": (
        "warehouse.cli.sharing:group",
        "Groups of users, to share with (docs/permissions.md).",
    ),
    "share": ("warehouse.cli.sharing:share", "Let USER|GROUP read (or write, or manage) KEY."),
    "unshare": ("warehouse.cli.sharing:unshare", "Take back the grant of USER|GROUP on KEY."),
    "perms": (
        "warehouse.cli.sharing:perms",
        "Show who owns KEY, the grants that apply to it, and your own level.",
    ),
    "perms-mode": (
        "warehouse.cli.sharing:perms_mode",
        "Print the installation's permission mode, or set it (admins).",
    ),
    "web": (
        "warehouse.cli.web:web",
        "Serve the web pages for the embedded warehouse ($WH_HOME) until stopped.",
    ),
}


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = _COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module, _, attr = entry[0].partition(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # As click lays the list out, from the help kept above.
        width = max(len(name) for name in _COMMANDS)
        limit = formatter.width - 6 - width
        rows = [
            (n, click.Command(n, help=_COMMANDS[n][1]).get_short_help_str(limit))
            for n in sorted(_COMMANDS)
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as e:
            if (failure := _missing_extra(e)) is not None:
                raise failure from None
            raise
        except KeyboardInterrupt:
            # As shells expect of an interrupted command: 128 + SIGINT, no message.
            raise click.exceptions.Exit(130) from None
        except WarehouseError as e:
            if _reader_gone():
                raise click.exceptions.Exit(_SIGPIPE_EXIT) from None
            raise Failure(e) from e
        except OSError as e:
            if _reader_gone():
                raise click.exceptions.Exit(_SIGPIPE_EXIT) from None
            # What the library did not name itself: a full disk, a read error…
            where = e.filename if e.filename is not None else "the operating system refused"
            raise Failure(os_error(e, str(where))) from e
        except Exception as e:
            if (failure := _catalog_failure(e)) is not None:
                raise failure from e
            raise


# As a command killed by SIGPIPE exits in a shell (128 + 13).
_SIGPIPE_EXIT = 141


def _reader_gone() -> bool:
    """Whether standard output is a pipe whose reader has gone (``wh ls |
    head``): the command then stops quietly, as other tools do, not with an
    error. Its output is sent nowhere from here on, so that the final flush
    of what is left does not fail again."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        gone = any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False
    if gone:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return gone


# The optional parts of an install, by the top-level module each brings.
_EXTRAS = {
    "fastapi": "server",
    "starlette": "server",
    "uvicorn": "server",
    "uvloop": "server",
    "jinja2": "server",
    "dask": "dask",
    "distributed": "dask",
    "psycopg": "postgres",
    "pyfuse3": "mount",
    "trio": "mount",
}


def _missing_extra(error: ModuleNotFoundError) -> Failure | None:
    """A client-only install running a server command: say what to install."""
    extra = _EXTRAS.get((error.name or "").split(".")[0])
    if extra is None:
        return None
    return Failure(
        WarehouseError(
            f"this needs {error.name}, part of the [{extra}] extra: "
            f"pip install 'warehouse[{extra}]'"
        )
    )


def _catalog_failure(error: Exception) -> Failure | None:
    """The catalog's database refusing a statement (a full disk, a lost server) as one line."""
    # Looked up, not imported: most commands never load SQLAlchemy.
    exc = sys.modules.get("sqlalchemy.exc")
    # psycopg's own: `wh sql` talks to PostgreSQL through the driver itself.
    psycopg = sys.modules.get("psycopg")
    if not (
        (exc is not None and isinstance(error, exc.OperationalError))
        or (psycopg is not None and isinstance(error, psycopg.OperationalError))
    ):
        return None
    reason = str(getattr(error, "orig", None) or error).splitlines()[0]
    return Failure(WarehouseError(f"the catalog failed: {reason}"))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="warehouse", prog_name="wh")
def cli() -> None:
    """Free Factory warehouse: content-addressed collections, names and jobs.

    With no server configured, commands work on the embedded warehouse in
    $WH_HOME (default ~/.local/share/warehouse).

    Exit codes: 0 ok, 1 error, 2 usage or bad input, 3 conflict,
    4 not found, 5 corrupt data, 6 permission denied, 130 interrupted.
    """
    from warehouse.settings import apply

    # Every bad setting is refused before any command runs (`wh config`).
    apply()


def main() -> None:
    cli()
