"""``wh usage`` (what steps used, summed) and ``wh cost`` (priced by a table)."""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import click

from warehouse.cli._common import emit_json, emit_rows, open_warehouse
from warehouse.errors import UsageError
from warehouse.jobs.jobsview import jobs_view
from warehouse.usage import JobUsage, Selection, Usage, parse_prices, parse_since, price, total
from warehouse.usage.model import BLOCK_SOURCES
from warehouse.usage.volumes import VolumeUsage, price_volumes, summarize

__all__ = ["cost", "usage"]

F = TypeVar("F", bound=Callable[..., Any])

_SIZES = ("peak_memory", "read", "written", "input")
# Blocks read per source (their bytes: --json).
_BLOCKS = tuple(f"blocks_{s}" for s in BLOCK_SOURCES)

# A price table is a few hundred bytes; a bigger file is no price table.
_MAX_TABLE = 1024 * 1024


def _selection_options(command: F) -> F:
    for option in reversed(
        [
            click.option("--job", type=click.IntRange(1), help="Only this job's steps."),
            click.option(
                "--workflow", type=click.IntRange(1), help="Only the jobs of this workflow run."
            ),
            click.option("--user", help="Only the jobs this user submitted."),
            click.option(
                "--since",
                help="Only steps finished since T: 2026-12-01, an ISO time (UTC unless "
                "it says), seconds since 1970, or a span back (12h, 7d).",
            ),
            click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text."),
            click.option(
                "--volumes",
                is_flag=True,
                help="Per volume: requests by kind and GB-months stored since --since "
                "(an admin's, through a controller).",
            ),
        ]
    ):
        command = option(command)
    return command


def _found(
    ctx: click.Context, job: int | None, workflow: int | None, user: str | None, since: str | None
) -> tuple[Selection, list[JobUsage]]:
    when = parse_since(since) if since is not None else None
    selection = Selection(job, workflow, user, when)
    return selection, jobs_view(open_warehouse(ctx)).usage(selection)


def _volume_usage(ctx: click.Context, since: str | None) -> tuple[float | None, list[VolumeUsage]]:
    """The volumes' usage from ``since`` (all recorded if None) to now."""
    from warehouse.embedded import EmbeddedWarehouse
    from warehouse.remote.warehouse import RemoteWarehouse

    when = parse_since(since) if since is not None else None
    wh = open_warehouse(ctx)
    if isinstance(wh, RemoteWarehouse):
        found = wh.api.get("/usage/volumes", **({} if when is None else {"since": when}))
        return when, [VolumeUsage.from_dict(r) for r in found["volumes"]]
    if not isinstance(wh, EmbeddedWarehouse):
        raise UsageError("volume usage needs an embedded warehouse or a controller")
    from warehouse.catalog.volumeusage import volume_rows

    # This process's own reads so far are counted too, and the spool folded.
    wh.record_volume_usage()
    wh.fold_volume_usage()
    return when, summarize(volume_rows(wh.engine, when), when, time.time())


def _only_since(job: int | None, workflow: int | None, user: str | None) -> None:
    if job is not None or workflow is not None or user is not None:
        raise UsageError("--volumes takes --since only: volumes are no job's or user's")


def _volume_total(found: list[VolumeUsage]) -> VolumeUsage:
    stored = [u.stored_bytes for u in found if u.stored_bytes is not None]
    return VolumeUsage(
        "total",
        sum(u.gets for u in found),
        sum(u.puts for u in found),
        sum(u.lists for u in found),
        sum(u.deletes for u in found),
        sum(u.byte_seconds for u in found),
        sum(stored) if stored else None,
    )


def _show_volumes(since: float | None, found: list[VolumeUsage], as_json: bool) -> None:
    summed = _volume_total(found)
    if as_json:
        emit_json(
            {
                "since": since,
                "volumes": [u.as_dict() for u in found],
                "total": summed.as_dict(),
            }
        )
        return
    header = ("volume", "gets", "puts", "lists", "deletes", "stored_bytes", "gb_months")
    rows: list[tuple[object, ...]] = [
        (u.volume, u.gets, u.puts, u.lists, u.deletes, u.stored_bytes, f"{u.gb_months:.6g}")
        for u in [*found, summed]
    ]
    emit_rows(header, rows, sizes=("stored_bytes",))


def _text(u: Usage) -> tuple[object, ...]:
    return (
        u.steps,
        u.attempts,
        f"{u.cpu_seconds:.2f}",
        f"{u.wall_seconds:.2f}",
        u.peak_memory,
        u.read_bytes,
        u.written_bytes,
        u.input_bytes,
        *(getattr(u, c) for c in _BLOCKS),
    )


@click.command()
@_selection_options
@click.pass_context
def usage(
    ctx: click.Context,
    job: int | None,
    workflow: int | None,
    user: str | None,
    since: str | None,
    as_json: bool,
    volumes: bool,
) -> None:
    """What the steps of jobs used: CPU and wall seconds, peak memory, bytes,
    blocks read by where they came from. With --volumes: what each volume
    was asked (GET, PUT, LIST, DELETE) and stored (GB-months)."""
    if volumes:
        _only_since(job, workflow, user)
        _show_volumes(*_volume_usage(ctx, since), as_json)
        return
    selection, found = _found(ctx, job, workflow, user, since)
    summed = total(r.usage for r in found)
    if as_json:
        emit_json(
            {
                "selection": selection.as_dict(),
                "jobs": [r.as_dict() for r in found],
                "total": summed.as_dict(),
            }
        )
        return
    header = ("job", "user", "state", "steps", "attempts", "cpu_s", "wall_s", *_SIZES, *_BLOCKS)
    rows = [(r.job, r.user, r.state, *_text(r.usage)) for r in found]
    rows.append(("total", "-", "-", *_text(summed)))
    emit_rows(header, rows, sizes=_SIZES)


def _money(amount: Decimal) -> str:
    """Cents, or more digits where a cent would hide the amount."""
    if amount == 0 or abs(amount) >= Decimal("0.01"):
        return f"{amount:.2f}"
    return f"{amount:.6f}"


@click.command()
@click.option(
    "--prices",
    "prices_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The price table (TOML; examples/prices/, docs/usage.md).",
)
@click.option("--node", help="The table's node kind to price on (default: its default_node).")
@click.option(
    "--months",
    type=click.FloatRange(0),
    default=0.0,
    show_default=True,
    help="Also price the bytes the steps wrote, stored this many months.",
)
@_selection_options
@click.pass_context
def cost(
    ctx: click.Context,
    prices_file: Path,
    node: str | None,
    months: float,
    job: int | None,
    workflow: int | None,
    user: str | None,
    since: str | None,
    as_json: bool,
    volumes: bool,
) -> None:
    """What the steps of jobs cost by a price table (node time, storage).
    With --volumes, also the volumes' storage and requests since --since."""
    if volumes and months:
        raise UsageError("--volumes prices what the volumes stored: give no --months")
    try:
        with open(prices_file, "rb") as f:
            data = f.read(_MAX_TABLE + 1)
    except OSError as e:
        raise UsageError(f"{prices_file}: cannot read the price table: {e.strerror}") from None
    if len(data) > _MAX_TABLE:
        raise UsageError(f"{prices_file}: over {_MAX_TABLE} bytes: no price table")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise UsageError(f"{prices_file}: not UTF-8 text: no price table") from None
    table = parse_prices(text, str(prices_file))
    selection, found = _found(ctx, job, workflow, user, since)
    summed = total(r.usage for r in found)
    priced = price(summed, table, node, months=months)
    extra: dict[str, Any] = {}
    if volumes:
        _, used = _volume_usage(ctx, since)
        priced.lines.extend(price_volumes(used, table))
        extra["volumes"] = [u.as_dict() for u in used]
    if as_json:
        emit_json(
            {
                "selection": selection.as_dict(),
                "usage": summed.as_dict(),
                **extra,
                **priced.as_dict(),
            }
        )
        return
    click.echo(f"{priced.table}: {priced.billing} billing, node {priced.node}")
    emit_rows(
        ("item", "quantity", "unit", "unit_price", "amount"),
        [
            (x.item, f"{x.quantity:.6g}", x.unit, str(x.unit_price), _money(x.amount))
            for x in priced.lines
        ],
    )
    click.echo(f"total: {_money(priced.total)} {priced.currency}")
