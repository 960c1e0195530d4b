"""Shared pieces of the CLI: opening the warehouse, errors, progress, JSON."""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from json.encoder import encode_basestring_ascii as _json_string
from typing import TYPE_CHECKING, Any, TypeVar

import click

import warehouse
from warehouse.errors import WarehouseError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from warehouse.interface import Warehouse

    stderr: Console

__all__ = [
    "Failure",
    "LineOut",
    "byte_progress",
    "check_pdh",
    "conventional",
    "emit_json",
    "emit_rows",
    "human_size",
    "iso_time",
    "open_warehouse",
    "plural",
    "server_options",
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


def plural(count: int, word: str) -> str:
    """``1 step``, ``2 steps``: a count and its noun, as a sentence has them."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


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
def byte_progress(
    label: str, total: int | Callable[[], int] | None
) -> Iterator[Callable[[int], None] | None]:
    """A bar with bytes, rate and ETA on a terminal; nothing otherwise.

    ``total`` may be a function, called only when there is a bar to show.
    """
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
        task = bar.add_task(label, total=total() if callable(total) else total)
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


def conventional(value: Any, key: str = "") -> Any:
    """``value`` as every ``--json`` prints it: times ISO 8601 UTC, JSON text as JSON."""
    if isinstance(value, dict):
        return {k: conventional(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [conventional(v) for v in value]
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


def _finite(value: Any) -> Any:
    """A float that is not finite as null, at any depth: strict JSON has no NaN or Infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def emit_json(value: Any) -> None:
    json.dump(_finite(conventional(value)), sys.stdout, indent=2, sort_keys=True, allow_nan=False)
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


class JsonItems:
    """What ``emit_json`` prints of a list of flat objects, byte for byte,
    an item at a time (one held, for the comma after it): a listing of a
    million files is never a list in memory. After a failure the items
    printed are closed into a list (one JSON document); before any, nothing
    is printed."""

    def __init__(self, out: LineOut) -> None:
        self.out = out
        self.held: str | None = None

    def add(self, **fields: str | int) -> None:
        """One item; ``fields`` in key order (``emit_json`` sorts keys)."""
        body = ",\n".join(
            f'    "{key}": {_json_string(v) if isinstance(v, str) else v}'
            for key, v in fields.items()
        )
        self.out.line("[" if self.held is None else self.held + ",")
        self.held = "  {\n" + body + "\n  }"

    def close(self, failed: bool = False) -> None:
        if self.held is None:
            if not failed:
                self.out.line("[]")
        else:
            self.out.line(self.held)
            self.out.line("]")
        self.held = None


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

    def lines(self, text: str) -> None:
        """Several lines at once: ``text`` holds them joined by newlines."""
        self._lines.append(text)
        self._size += len(text) + 1
        if self._size >= self.CHUNK:
            self.flush()

    def flush(self) -> None:
        if self._lines:
            click.echo("\n".join(self._lines) + "\n", nl=False)
            self._lines, self._size = [], 0


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
    print_whole(table)


def print_whole(table: Table) -> None:
    """Print a rich table as wide as its cells: a PDH cut to "799a55cc…" or a
    time folded in two cannot be copied; a narrow terminal wraps the long
    lines instead."""
    from rich.console import Console
    from rich.measure import Measurement

    console = Console()
    wide = Measurement.get(console, console.options.update_width(1 << 16), table).maximum
    if wide > console.width:
        console = Console(width=wide)
    console.print(table, crop=False)
