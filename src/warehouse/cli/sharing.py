"""``wh group add|ls|member``, ``wh share``, ``wh unshare``, ``wh perms`` and
``wh perms-mode`` (docs/permissions.md)."""

from __future__ import annotations

from dataclasses import asdict

import click

from warehouse.cli._common import emit_json, emit_rows, open_warehouse
from warehouse.errors import NotFoundError, UsageError
from warehouse.permissions import Grant, GroupRecord, Perms, parse_level, parse_mode

__all__ = ["group", "perms", "perms_mode", "share", "unshare"]


def _group_json(g: GroupRecord) -> dict[str, object]:
    return {"name": g.name, "owner": g.owner, "members": list(g.members)}


def _grant_json(g: Grant) -> dict[str, object]:
    return {**asdict(g), "level": str(g.level)}


@click.group()
def group() -> None:
    """Groups of users, to share with (docs/permissions.md)."""


@group.command("add")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def group_add(ctx: click.Context, name: str, as_json: bool) -> None:
    """Make group NAME, owned by you: you add and remove its members."""
    made = open_warehouse(ctx).add_group(name)
    if as_json:
        emit_json(_group_json(made))
    else:
        click.echo(f"group {made.name} made, owned by {made.owner}")


@group.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def group_ls(ctx: click.Context, as_json: bool) -> None:
    """List the groups, their owners and members."""
    found = open_warehouse(ctx).list_groups()
    if as_json:
        emit_json([_group_json(g) for g in found])
        return
    emit_rows(
        ("group", "owner", "members"), [(g.name, g.owner, " ".join(g.members)) for g in found]
    )


@group.command("member")
@click.argument("name")
@click.option("--add", "add", metavar="USER", multiple=True, help="Make USER a member.")
@click.option("--remove", "remove", metavar="USER", multiple=True, help="Take USER out.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def group_member(
    ctx: click.Context, name: str, add: tuple[str, ...], remove: tuple[str, ...], as_json: bool
) -> None:
    """List the members of group NAME, after adding (--add) or removing
    (--remove) some: only its owner or an admin may.

    Removing a user who is not a member exits with 4 before anything changes;
    adding one twice changes nothing.
    """
    both = set(add) & set(remove)
    if both:
        raise UsageError(f"user {sorted(both)[0]!r} is given to both --add and --remove")
    wh = open_warehouse(ctx)
    current = {g.name: g for g in wh.list_groups()}.get(name)
    if current is None:
        raise NotFoundError(f"no group {name!r}")
    missing = [u for u in remove if u not in current.members]
    if missing:
        raise NotFoundError(f"{missing[0]!r} is not a member of group {name!r}")
    for user in dict.fromkeys(add):
        wh.add_group_member(name, user)
    for user in dict.fromkeys(remove):
        wh.remove_group_member(name, user)
    after = {g.name: g for g in wh.list_groups()}[name]
    if as_json:
        emit_json(_group_json(after))
        return
    for user in after.members:
        click.echo(user)


_LEVEL = click.Choice(["read", "write", "manage"])


@click.command()
@click.argument("key")
@click.argument("who", metavar="USER|GROUP")
@click.option("--level", type=_LEVEL, default="read", show_default=True, help="What it may do.")
@click.option("--json", "as_json", is_flag=True, help="Print the grant as JSON.")
@click.pass_context
def share(ctx: click.Context, key: str, who: str, level: str, as_json: bool) -> None:
    """Let USER|GROUP read (or write, or manage) KEY.

    KEY is a name or project (lab, lab/run42: a project's grant applies to
    all below it), a PDH, job:ID or run:ID. A group of that name is meant if
    there is one, else a user. You must manage KEY; sharing again changes
    the level."""
    made = open_warehouse(ctx).share(key, who, parse_level(level))
    if as_json:
        emit_json(_grant_json(made))
    else:
        click.echo(f"{made.grantee_kind} {made.grantee} may {made.level} {made.target}")


@click.command()
@click.argument("key")
@click.argument("who", metavar="USER|GROUP")
@click.pass_context
def unshare(ctx: click.Context, key: str, who: str) -> None:
    """Take back the grant of USER|GROUP on KEY.

    Exits with 4 if it has none. Block signatures already given stay good until they expire
    (docs/permissions.md)."""
    open_warehouse(ctx).unshare(key, who)
    click.echo(f"{who} no longer has a grant on {key}")


@click.command()
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.pass_context
def perms(ctx: click.Context, key: str, as_json: bool) -> None:
    """Show who owns KEY, the grants that apply to it, and your own level.

    The grants listed are those on KEY and on the projects above it. A KEY
    you may not read exits with 4, as one that does not exist."""
    found: Perms = open_warehouse(ctx).perms(key)
    if as_json:
        emit_json(
            {
                "key": found.key,
                "owners": [list(o) for o in found.owners],
                "grants": [_grant_json(g) for g in found.grants],
                "level": str(found.level),
                "mode": found.mode.value,
            }
        )
        return
    owners = ", ".join(f"{kind} {name}" for kind, name in found.owners) or "none"
    click.echo(f"{found.key}: owner {owners}; you: {found.level}; mode {found.mode.value}")
    for g in found.grants:
        click.echo(f"{g.grantee_kind} {g.grantee}\t{g.level}\ton {g.target}")


@click.command("perms-mode")
@click.argument("mode", required=False, type=click.Choice(["open", "private"]))
@click.pass_context
def perms_mode(ctx: click.Context, mode: str | None) -> None:
    """Print the installation's permission mode, or set it (admins).

    MODE is open (every user reads everything, the default) or private
    (nothing is readable unless owned or granted)."""
    wh = open_warehouse(ctx)
    if mode is not None:
        wh.set_permission_mode(parse_mode(mode))
    click.echo(wh.permission_mode().value)
