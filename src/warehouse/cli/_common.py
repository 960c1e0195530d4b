"""Shared pieces of the CLI: opening the warehouse, errors, progress, JSON."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

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
