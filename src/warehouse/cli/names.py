"""``wh name set|get|ls|log|rm|writers`` and ``wh accounting``."""

from __future__ import annotations

import click

from warehouse.catalog.values import check_writer
from warehouse.cli._common import check_pdh, emit_json, emit_rows, open_warehouse, text_time
from warehouse.cli.completion import complete_names
from warehouse.errors import NotFoundError, UsageError
from warehouse.keys import is_pdh

__all__ = ["accounting", "name"]


@click.group()
def name() -> None:
    """Names: compare-and-swap pointers to collections, with history."""


@name.command("set")
@click.argument("name_", metavar="NAME", shell_complete=complete_names)
@click.argument("pdh")
@click.option("--expect", metavar="PDH", callback=check_pdh, help="The PDH the name must hold now.")
@click.option("--create", is_flag=True, help="The name must not exist yet, even holding PDH.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def name_set(
    ctx: click.Context, name_: str, pdh: str, expect: str | None, create: bool, as_json: bool
) -> None:
    """Point NAME at PDH if it holds --expect now (or does not exist).

    Exits with 3 (conflict) and changes nothing if the name holds anything else.
    """
    if expect and create:
        raise click.UsageError("give --expect or --create, not both")
    if not is_pdh(pdh):
        # Bad input (exit 2), as --expect is, through a controller or not.
        raise UsageError(f"PDH: {pdh!r} is not a portable data hash")
    rec = open_warehouse(ctx).set_name(name_, pdh, expect=expect, create=create)
    if as_json:
        emit_json({"name": rec.name, "pdh": rec.pdh, "version": rec.version})
    else:
        click.echo(f"{rec.name} {rec.pdh} version {rec.version}")


@name.command("get")
@click.argument("name_", metavar="NAME", shell_complete=complete_names)
@click.pass_context
def name_get(ctx: click.Context, name_: str) -> None:
    """Print the PDH NAME points at."""
    click.echo(open_warehouse(ctx).get_name(name_).pdh)


@name.command("ls")
@click.argument("prefix", default="")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def name_ls(ctx: click.Context, prefix: str, as_json: bool) -> None:
    """List names (starting with PREFIX) with their PDH, version and last change."""
    records = open_warehouse(ctx).list_names(prefix)
    if as_json:
        emit_json([_record(r) for r in records])
        return
    emit_rows(
        ("name", "pdh", "version", "updated_at", "updated_by"),
        [(r.name, r.pdh, r.version, text_time(r.updated_at), r.updated_by) for r in records],
    )


def _record(r: object) -> dict[str, object]:
    return {f: getattr(r, f) for f in r.__slots__}  # type: ignore[attr-defined]


@name.command("log")
@click.argument("name_", metavar="NAME", shell_complete=complete_names)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def name_log(ctx: click.Context, name_: str, as_json: bool) -> None:
    """Show every change of NAME: version, old PDH, new PDH, who, when."""
    changes = open_warehouse(ctx).name_log(name_)
    if as_json:
        emit_json([_record(c) for c in changes])
        return
    emit_rows(
        ("version", "old_pdh", "new_pdh", "by", "at"),
        [(c.version, c.old_pdh, c.new_pdh, c.by, text_time(c.at)) for c in changes],
    )


@name.command("rm")
@click.argument("name_", metavar="NAME", shell_complete=complete_names)
@click.option("--expect", metavar="PDH", callback=check_pdh, help="The PDH the name must hold now.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def name_rm(ctx: click.Context, name_: str, expect: str | None, as_json: bool) -> None:
    """Remove NAME if it holds --expect now (required); its owner or an admin.

    Exits with 3 (conflict) and changes nothing if the name holds anything
    else (nothing, if it was removed meanwhile), 4 if it never existed. The
    removal is kept in `wh name log`; the collection stays stored, and GC
    may collect it once the history retention has passed and nothing else
    keeps it.
    """
    if expect is None:
        # Bad input in one line (not click's usage text): the check is the point.
        raise UsageError("give --expect PDH, the PDH the name holds now (wh name get NAME)")
    change = open_warehouse(ctx).remove_name(name_, expect=expect)
    if as_json:
        emit_json(_record(change))
    else:
        click.echo(f"{change.name} removed (held {change.old_pdh}) version {change.version}")


@name.command("writers")
@click.argument("name_", metavar="NAME", shell_complete=complete_names)
@click.option("--add", "add", metavar="USER", multiple=True, help="Let USER change NAME.")
@click.option(
    "--remove", "remove", metavar="USER", multiple=True, help="No longer let USER change NAME."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def name_writers(
    ctx: click.Context, name_: str, add: tuple[str, ...], remove: tuple[str, ...], as_json: bool
) -> None:
    """List the users who may change NAME besides its owner (and admins), after
    adding (--add) or removing (--remove) some: only the owner or an admin may.

    Removing a user who is not a writer exits with 4; adding one twice changes
    nothing.
    """
    both = set(add) & set(remove)
    if both:
        raise UsageError(f"user {sorted(both)[0]!r} is given to both --add and --remove")
    for user in (*add, *remove):
        check_writer(user)  # bad input changes nothing
    wh = open_warehouse(ctx)
    add, remove = tuple(dict.fromkeys(add)), tuple(dict.fromkeys(remove))  # each once
    if remove:
        # A user who is no writer is refused before anything is added or
        # removed, not after the changes given before it.
        current = wh.name_writers(name_)
        missing = [user for user in remove if user not in current]
        if missing:
            raise NotFoundError(f"user {missing[0]!r} is not a writer of name {name_!r}")
    for user in add:
        wh.add_name_writer(name_, user)
    for user in remove:
        wh.remove_name_writer(name_, user)
    writers = wh.name_writers(name_)
    if as_json:
        emit_json({"name": name_, "owner": wh.get_name(name_).owner, "writers": writers})
        return
    for user in writers:
        click.echo(user)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def accounting(ctx: click.Context, as_json: bool) -> None:
    """Block writes per user: how many, how many new, bytes sent and newly stored."""
    rows = open_warehouse(ctx).accounting()
    if as_json:
        emit_json([_record(r) for r in rows])
        return
    emit_rows(
        ("user", "writes", "new_blocks", "bytes_written", "bytes_new"),
        [(r.user, r.writes, r.new_blocks, r.bytes_written, r.bytes_new) for r in rows],
        sizes=("bytes_written", "bytes_new"),
    )
