"""``wh get``: write a collection's files and list their MD5s (the seed's whget)."""

from __future__ import annotations

from pathlib import Path

import click

from warehouse.cli._common import JsonItems, LineOut, byte_progress, open_warehouse
from warehouse.cli.completion import complete_keys
from warehouse.collection.extract import extract, selected_size
from warehouse.collection.reader import stored_text_damage
from warehouse.errors import UsageError
from warehouse.manifest import md5sum_line

__all__ = ["get"]


def _dest(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    # An empty DEST (an unset variable in a script) is not the current
    # directory, which is what Path("") would make of it.
    if value == "":
        raise UsageError("DEST is empty: give a directory or a file name")
    if value == "-":  # as other tools read it, standard output: that is `wh cat`
        raise UsageError("DEST '-': to print a file use `wh cat KEY/PATH`; for a file named -, ./-")
    # Path() drops a trailing "/", which says DEST is a directory: kept aside.
    ctx.meta["wh.get.raw_dest"] = value
    return None if value is None else Path(value)


@click.command()
@click.argument("key", shell_complete=complete_keys)
@click.argument("dest", required=False, type=click.Path(), callback=_dest)
@click.option("--force", is_flag=True, help="Overwrite files that exist in DEST.")
@click.option("--no-write", is_flag=True, help="Only read, verify and list; write nothing.")
@click.option(
    "--rehash",
    is_flag=True,
    help="List MD5s computed from the bytes read, not the ones recorded at put.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead.")
@click.pass_context
def get(
    ctx: click.Context,
    key: str,
    dest: Path | None,
    force: bool,
    no_write: bool,
    rehash: bool,
    as_json: bool,
) -> None:
    """Write the files of KEY (a PDH or a name, optionally /sub/path) into DEST.

    DEST defaults to the current directory. Every block is verified; the
    output is an md5sum-compatible listing, so `md5sum -c` can check the
    written files from inside DEST. Existing files are not overwritten
    without --force; no path may escape DEST.
    """
    raw_dest = ctx.meta.get("wh.get.raw_dest")
    if no_write and dest is not None:
        raise UsageError("--no-write takes no DEST")
    wh = open_warehouse(ctx)
    k = wh.key(key)
    with stored_text_damage(k.head), wh.reader(k, one_pass=True) as reader:
        target = None if no_write else (dest or Path("."))
        # The total is summed only for a bar on a terminal: it is a pass of its own.
        # Each file's line (or JSON item) goes out once it is written: nothing per
        # file is held.
        with (
            byte_progress("get", lambda: selected_size(reader, k.path)) as progress,
            LineOut() as out,
        ):
            listed = JsonItems(out) if as_json else None
            failed = True
            try:
                extract(
                    reader,
                    target,
                    subpath=k.path,
                    force=force,
                    rehash=rehash,
                    into=raw_dest is not None and raw_dest.endswith("/"),
                    progress=progress,
                    on_file=(
                        (lambda f: out.line(md5sum_line(f.md5, f.path)))
                        if listed is None
                        else (lambda f: listed.add(md5=f.md5, path=f.path, size=f.size))
                    ),
                )
                failed = False
            finally:
                if listed is not None:
                    listed.close(failed)
