"""``wh gc [--dry-run]``, ``wh gc settings``, ``wh balance`` and ``wh fsck``.

Embedded: the work runs here on the local volume. Remote ($WH_URL with an
admin $WH_TOKEN): the controller runs it and answers the report.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from warehouse.cli._common import emit_json, plural, stderr
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import UsageError, WarehouseError
from warehouse.gc import GcReport, load_settings, parse_duration, save_settings
from warehouse.gc.local import local_balance, local_fsck, local_gc
from warehouse.gc.settings import FIELDS
from warehouse.remote.api import ApiClient

__all__ = ["balance", "fsck", "gc"]

TIMEOUT = 24 * 3600.0  # a remote run answers when it is done
CORRUPT_EXIT = 5


def _remote() -> ApiClient | None:
    url = os.environ.get("WH_URL")
    return ApiClient(url, os.environ.get("WH_TOKEN", ""), timeout=TIMEOUT) if url else None


@contextmanager
def _progress(label: str) -> Iterator[Callable[[int], None] | None]:
    """A counter on a terminal, nothing otherwise."""
    if not stderr.is_terminal:
        yield None
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description} {task.completed}")) as bar:
        task = bar.add_task(label)
        yield lambda n: bar.advance(task, n)


def _run(
    action: str, body: dict[str, Any] | None, local: Callable[[EmbeddedWarehouse], GcReport]
) -> GcReport:
    api = _remote()
    if api is None:
        with EmbeddedWarehouse() as wh:
            return local(wh)
    try:
        with stderr.status(f"{action} on the controller…") if stderr.is_terminal else _null():
            return GcReport.from_dict(api.post(f"/gc/{action}", body or {}))
    finally:
        api.close()


@contextmanager
def _null() -> Iterator[None]:
    yield


def _show(report: GcReport, as_json: bool) -> None:
    if as_json:
        emit_json(report.to_dict())
        return
    if report.message:
        click.echo(report.message)
    prefix = "would " if report.dry_run else ""
    for line in report.actions if report.dry_run else []:
        click.echo(f"{prefix}{line}")
    for md5 in report.missing:
        click.echo(f"missing {md5}{_where(report, md5)}")
    for md5 in report.under_replicated:
        click.echo(f"under-replicated {md5}{_where(report, md5)}")
    for entry in report.corrupt:
        click.echo(f"corrupt {entry}{_where(report, entry.split()[0])}")
    for pdh in report.unreadable:
        click.echo(f"unreadable manifest of {pdh}")
    for entry in report.unchecked:
        click.echo(f"unchecked {entry}")
    for line in report.repairs:
        click.echo(line)
    if report.action == "balance" and report.servers <= 1:
        return
    parts = [f"{report.roots} root collections", f"{report.marked} blocks marked"]
    if report.action == "fsck":
        parts.append(f"{report.checked} copies verified")
        if report.unchecked:
            parts.append(f"{len(report.unchecked)} servers not checked")
        parts.append("clean" if report.clean else "PROBLEMS")
    else:
        parts += [
            f"{prefix}trash {report.trashed}" if report.dry_run else f"trashed {report.trashed}",
            f"{prefix}pull {report.pulled}" if report.dry_run else f"pulled {report.pulled}",
            f"kept {report.kept}",
            f"{report.young} unreferenced but younger than the TTL",
        ]
        if report.emptied:
            parts.append(f"{report.emptied} removed from the trash")
        if report.collected:
            parts.append(f"{report.collected} collections collected")
    servers = plural(report.servers, "server")
    click.echo(f"{report.action}: " + ", ".join(parts) + f" ({servers})")


def _skipped(report: GcReport) -> None:
    """A gc or balance that skipped a server ends as an error (exit 1), after its report."""
    if report.action == "fsck" or not report.unchecked:
        return
    more = len(report.unchecked) - 1
    also = f" (and {plural(more, 'other')})" if more else ""
    raise WarehouseError(
        f"{report.action} trashed nothing: {report.unchecked[0]}{also}; see docs/gc.md"
    )


def _where(report: GcReport, md5: str) -> str:
    pdhs = report.collections.get(md5)
    return f" in {' '.join(pdhs)}" if pdhs else ""


@click.group(invoke_without_command=True)
@click.option("--dry-run", is_flag=True, help="Print what would be trashed; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="The report as JSON.")
@click.pass_context
def gc(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
    """Trash blocks no root references and older than the signature TTL.

    Roots: what names point to (or pointed to within the history retention),
    recent collections, and jobs within the job retention. Any index error,
    an empty catalog or nothing marked stops the run before it trashes
    anything. See docs/gc.md.
    """
    if ctx.invoked_subcommand is not None:
        return

    def local(wh: EmbeddedWarehouse) -> GcReport:
        with _progress("marking collections") as progress:
            report = local_gc(wh.engine, wh.volume, dry_run=dry_run, progress=progress)
        if not dry_run:  # a run writes the catalog anyway: the usage spool with it
            wh.wrote_catalog = True
        return report

    report = _run("run", {"dry_run": dry_run}, local)
    _show(report, as_json)
    _skipped(report)


@gc.command("settings")
@click.argument("changes", nargs=-1, metavar="[KEY=DURATION]...")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def gc_settings(changes: tuple[str, ...], as_json: bool) -> None:
    """Show or change the retention settings (e.g. history_retention=30d).

    Keys: history_retention, job_retention, and (embedded only)
    signature_ttl, trash_lifetime. Durations: 3600, 90s, 15m, 12h, 30d, 2w.
    """
    values: dict[str, float] = {}
    for change in changes:
        key, eq, value = change.partition("=")
        if not eq:
            raise click.UsageError(f"expected KEY=DURATION, not {change!r}")
        values[key.strip()] = parse_duration(value)
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise UsageError(f"no GC setting {unknown[0]!r} (there are: {', '.join(FIELDS)})")
    api = _remote()
    fixed = sorted(set(values) & {"signature_ttl", "trash_lifetime"})
    if api is not None and fixed:
        api.close()
        raise UsageError(
            f"{fixed[0]} is the controller's and keep servers' configuration on a remote "
            "installation; only history_retention and job_retention can be changed here"
        )
    if api is None:
        with EmbeddedWarehouse() as wh:
            shown = save_settings(wh.engine, values) if values else load_settings(wh.engine)
            out = {k: getattr(shown, k) for k in shown.__slots__}
    else:
        try:
            out = api.put("/gc/settings", values) if values else api.get("/gc/settings")
        finally:
            api.close()
    if as_json:
        emit_json(out)
        return
    for key, seconds in out.items():
        click.echo(f"{key}\t{seconds:.0f}s\t({seconds / 86400:.4g} days)")


@click.command()
@click.option("--dry-run", is_flag=True, help="Print what would be pulled and trashed.")
@click.option("--json", "as_json", is_flag=True, help="The report as JSON.")
def balance(dry_run: bool, as_json: bool) -> None:
    """Give every referenced block the wanted number of copies (remote).

    Under-replicated blocks are pulled to the next servers in their probe
    order; extra copies are trashed only once the wanted count is there.
    """
    report = _run("balance", {"dry_run": dry_run}, lambda wh: local_balance(wh.engine, wh.volume))
    _show(report, as_json)
    _skipped(report)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="The report as JSON.")
@click.pass_context
def fsck(ctx: click.Context, as_json: bool) -> None:
    """Read and verify every stored block; report missing, corrupt and
    under-replicated blocks and the collections they belong to.

    Exits with 5 when it finds a problem.
    """

    def local(wh: EmbeddedWarehouse) -> GcReport:
        with _progress("bytes verified") as progress:
            return local_fsck(wh.engine, wh.volume, progress=progress)

    report = _run("fsck", None, local)
    _show(report, as_json)
    if not report.clean:
        ctx.exit(CORRUPT_EXIT)
