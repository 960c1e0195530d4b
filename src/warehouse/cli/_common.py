"""Shared pieces of the CLI: opening the warehouse, errors, progress, JSON."""

from __future__ import annotations

import datetime as dt
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
    "byte_progress",
    "check_pdh",
    "emit_json",
    "emit_rows",
    "iso_time",
    "open_warehouse",
    "stderr",
    "text_time",
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


# JSON output convention (docs/cli.md, "Output"): a time (a key "at", ending
# in "_at", or "last_seen") is ISO 8601 UTC, whatever the command read it as;
# a value kept as JSON text (a job's params, a run's inputs, counters) is
# given as the JSON value itself, not a string holding JSON.
_TIME_KEYS = frozenset({"at", "last_seen"})
_JSON_TEXT_KEYS = frozenset({"params", "inputs", "outputs", "counters"})


def iso_time(t: float) -> str:
    """A catalog time (Unix seconds) as ISO 8601 UTC: 2026-01-02T03:04:05.678Z."""
    when = dt.datetime.fromtimestamp(t, dt.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def text_time(t: float | None, never: str = "-") -> str:
    """A catalog time for people: to the second, with its zone."""
    if t is None:
        return never
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _conventional(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _conventional(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_conventional(v) for v in value]
    is_time = key in _TIME_KEYS or key.endswith("_at")
    if is_time and isinstance(value, int | float) and not isinstance(value, bool):
        return iso_time(float(value))
    if key in _JSON_TEXT_KEYS and isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        return parsed if isinstance(parsed, dict | list) else value
    return value


def emit_json(value: Any) -> None:
    json.dump(_conventional(value), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def _cell(value: object) -> str:
    # One row per line, whatever a name holds.
    text = "-" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def human_size(n: int) -> str:
    """Bytes for people, in powers of 1024 (as the pages show them)."""
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        size /= 1024
        if size < 1024 or unit == "PiB":
            return f"{size:.1f} {unit}"
    raise AssertionError("unreachable")


def emit_rows(
    header: tuple[str, ...], rows: list[tuple[object, ...]], sizes: tuple[str, ...] = ()
) -> None:
    """A table on a terminal (rich; sizes in KiB/MiB...), else tab-separated
    values under a header line (sizes in bytes), for scripts."""
    if not sys.stdout.isatty():
        click.echo("\t".join(header))
        for row in rows:
            click.echo("\t".join(map(_cell, row)))
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(*header, box=None)
    at = {header.index(c) for c in sizes}
    for row in rows:
        table.add_row(
            *(
                human_size(v)
                if i in at and isinstance(v, int)
                else escape("-" if v is None else str(v))
                for i, v in enumerate(row)
            )
        )
    Console().print(table)
