"""Shared pieces of the CLI: opening the warehouse, errors, progress, JSON."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

import warehouse
from warehouse.errors import WarehouseError
from warehouse.interface import Warehouse

if TYPE_CHECKING:
    from rich.console import Console

    stderr: Console

__all__ = [
    "Failure",
    "LineOut",
    "byte_progress",
    "check_pdh",
    "emit_json",
    "open_warehouse",
    "server_options",
    "stderr",
]


@functools.cache
def _stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def __getattr__(name: str) -> Any:
    # rich loads only for the commands that draw on a terminal: a scripted
    # `wh put --json` starts a few hundredths of a second sooner.
    if name == "stderr":
        return _stderr()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Failure(click.ClickException):
    """A library error shown as ``Error: …`` with the error's own exit code."""

    def __init__(self, error: WarehouseError) -> None:
        super().__init__(str(error))
        # click declares exit_code on the class; each failure carries its own.
        object.__setattr__(self, "exit_code", error.exit_code)


def check_pdh(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An option's value must be a portable data hash (``--expect``): else exit 2."""
    from warehouse.errors import UsageError
    from warehouse.keys import is_pdh

    if value is not None and not is_pdh(value):
        raise UsageError(f"--{param.name}: {value!r} is not a portable data hash")
    return value


def open_warehouse(ctx: click.Context, **options: int | None) -> Warehouse:
    """The warehouse for this command ($WH_URL, else $WH_HOME), opened once."""
    obj = ctx.ensure_object(dict)
    if "warehouse" not in obj:
        wh = warehouse.open(**options)  # type: ignore[arg-type]
        ctx.call_on_close(wh.close)
        obj["warehouse"] = wh
    opened: Warehouse = obj["warehouse"]
    return opened


@contextmanager
def byte_progress(label: str, total: int | None) -> Iterator[Callable[[int], None] | None]:
    """A bar with bytes, rate and ETA on a terminal; nothing otherwise."""
    # sys.stderr is None when the process started with its stderr closed.
    isatty = getattr(sys.stderr, "isatty", None)
    if not (isatty and isatty()) or not (stderr := _stderr()).is_terminal:
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=stderr, transient=False) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)


def emit_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


F = TypeVar("F", bound=Callable[..., Any])


def server_options(*, with_keep: bool = False) -> Callable[[F], F]:
    """The options every HTTP server command takes (``wh serve``, ``wh keepd``):
    ``--tls-cert``, ``--tls-key``, ``--access-log``, ``--body-timeout`` and
    ``--header-timeout``; ``with_keep``: say that ``wh serve --keep``'s
    servers share them."""
    from pathlib import Path

    # Here, not at the top: only the server commands load the server modules.
    from warehouse.server.bodytimeout import DEFAULT_BODY_TIMEOUT
    from warehouse.server.headertimeout import DEFAULT_HEADER_TIMEOUT

    cert_note = " The --keep servers use it too." if with_keep else ""
    log_note = "; the --keep servers log to the same place" if with_keep else ""
    seconds = click.FloatRange(min=0, min_open=True)
    options = [
        click.option(
            "--tls-cert",
            type=click.Path(dir_okay=False, exists=True, path_type=Path),
            help="Serve HTTPS with this certificate (PEM, with its chain); needs --tls-key."
            + cert_note,
        ),
        click.option(
            "--tls-key",
            type=click.Path(dir_okay=False, exists=True, path_type=Path),
            help="The certificate's private key (PEM).",
        ),
        click.option(
            "--access-log",
            envvar="WH_ACCESS_LOG",
            default="-",
            show_default=True,
            help="Where one line per request goes: - (standard error), a file, or off "
            f"(env WH_ACCESS_LOG){log_note}.",
        ),
        click.option(
            "--body-timeout",
            type=seconds,
            default=DEFAULT_BODY_TIMEOUT,
            show_default=True,
            help="Seconds a request body may send nothing before it is cut off (408).",
        ),
        click.option(
            "--header-timeout",
            type=seconds,
            default=DEFAULT_HEADER_TIMEOUT,
            show_default=True,
            help="Seconds a request's headers may take, from the connection or the "
            "request's first byte, before the connection is closed (408).",
        ),
    ]

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate
class LineOut:
    """Lines written to standard output in large chunks: one write per line
    was a third of the time of listing a million files."""

    CHUNK = 1 << 18

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._size = 0

    def __enter__(self) -> LineOut:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()

    def line(self, text: str) -> None:
        self._lines.append(text)
        self._size += len(text) + 1
        if self._size >= self.CHUNK:
            self.flush()

    def flush(self) -> None:
        if self._lines:
            click.echo("\n".join(self._lines) + "\n", nl=False)
            self._lines, self._size = [], 0
