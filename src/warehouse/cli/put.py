"""``wh put``: store files and directories as a collection."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import tempfile
from json.encoder import encode_basestring_ascii as _json_string
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from warehouse.base import NameConflictAfterPut, PutResult
from warehouse.cli._common import (
    Failure,
    LineOut,
    byte_progress,
    check_pdh,
    emit_json,
    open_warehouse,
)
from warehouse.collection.scan import DirNode, Filter, LazyTree
from warehouse.collection.writer import WriteResult
from warehouse.errors import UsageError
from warehouse.interface import Warehouse

if TYPE_CHECKING:
    from warehouse.putcache import PutCache

# The most manifest text a put takes: normalized text is read a line at a
# time, other text into memory whole; 1 GiB lists tens of millions of files.
MAX_MANIFEST_BYTES = 1 << 30

__all__ = ["put"]


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path, readable=False))
@click.option(
    "--manifest",
    "manifest_file",
    type=click.File("rb"),
    help="Store a collection from this manifest text ('-': standard input) instead of "
    "files; every block it lists must already be stored.",
)
@click.option("--name", help="Point this name at the new collection.")
@click.option(
    "--expect",
    metavar="PDH",
    callback=check_pdh,
    help="With --name: the PDH the name must hold now.",
)
@click.option("--create", is_flag=True, help="With --name: the name must not exist yet.")
@click.option(
    "--replace",
    is_flag=True,
    help="With --name: move the name from whatever it held when the put started.",
)
@click.option(
    "--allow-changing",
    is_flag=True,
    help="Store a file that changes while it is read as it was read (default: fail).",
)
@click.option(
    "--replication",
    type=click.IntRange(1, 8),
    help="Remote: copies of each block to write (default $WH_REPLICATION or 2).",
)
@click.option(
    "--min-copies",
    type=click.IntRange(1, 8),
    help="Remote: fail if any block gets fewer copies (default: the replication).",
)
@click.option(
    "--exclude",
    "excludes",
    metavar="PATTERN",
    multiple=True,
    help="Leave out what matches PATTERN, a .gitignore line matched against the path "
    "inside the collection ('*.tmp', 'cache/', '/top-only'); repeatable.",
)
@click.option(
    "--skip-unreadable",
    is_flag=True,
    help="Leave out what cannot be read (a dangling symbolic link, a file or directory "
    "without read permission, a special file) instead of failing; each is listed.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what would be stored (path and size) and the total; store nothing.",
)
@click.option(
    "--no-cache",
    is_flag=True,
    help="Read every file, even those the resume cache knows unchanged (by path, size, "
    "mtime, ctime and inode) since they were last stored.",
)
@click.option("--no-progress", is_flag=True, help="Draw no progress bar.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar and no warnings; errors only.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object instead of the PDH.")
@click.pass_context
def put(
    ctx: click.Context,
    paths: tuple[Path, ...],
    manifest_file: BinaryIO | None,
    name: str | None,
    expect: str | None,
    create: bool,
    replace: bool,
    allow_changing: bool,
    replication: int | None,
    min_copies: int | None,
    excludes: tuple[str, ...],
    skip_unreadable: bool,
    dry_run: bool,
    no_cache: bool,
    no_progress: bool,
    quiet: bool,
    as_json: bool,
) -> None:
    """Store PATHS as one collection and print its portable data hash.

    One directory stores its contents; several paths (or one file) are stored
    under their base names. Blocks already stored are not written again.

    With --name, the name is created (or, with --expect PDH, moved from PDH;
    with --replace, from whatever it holds now) by compare-and-swap; a name
    already holding other data is a conflict, found before the files are
    read where it can be. A conflict found after the data is stored still
    prints the stored PDH, so it can be named.

    A file stored before from the same path, with the same size, mtime,
    ctime and inode, in a directory whose files average 32 KiB or more, is
    not read again: its blocks are checked to be still stored and reused
    (the resume cache, under $XDG_CACHE_HOME/warehouse; --no-cache reads
    everything).

    A file whose size or mtime changes while it is read fails the put
    (exit 1, nothing named) unless --allow-changing is given. Ctrl-C stops it
    (exit 130) with nothing named.
    """
    if (expect or create or replace) and not name:
        raise UsageError("--expect, --create and --replace need --name")
    if sum(map(bool, (expect, create, replace))) > 1:
        raise UsageError("give one of --expect, --create or --replace")
    if bool(paths) == bool(manifest_file):
        raise UsageError("give PATHS or --manifest FILE")
    if manifest_file is not None and (excludes or skip_unreadable or dry_run):
        raise UsageError("--exclude, --skip-unreadable and --dry-run go with PATHS")
    if dry_run and name:
        raise UsageError("--dry-run names nothing: leave out --name")
    keep = Filter(exclude=excludes, skip_unreadable=skip_unreadable)
    if dry_run:
        _dry_run(LazyTree(list(paths), keep), keep, as_json)
        return
    wh = open_warehouse(ctx, replication=replication, min_copies=min_copies)
    if manifest_file is not None:
        if replace or allow_changing:
            raise UsageError("--replace and --allow-changing go with PATHS")
        record = wh.put_manifest_file(
            manifest_file, MAX_MANIFEST_BYTES, name=name, expect=expect, create=create
        )
        if as_json:
            emit_json(_keys(pdh=record.pdh, files=record.file_count, bytes=record.size))
        else:
            click.echo(record.pdh)
        return
    # Read as the put walks it: what it leaves out is known once it is done.
    tree = wh.scan(list(paths), keep)
    cache = None if no_cache else _open_cache(wh, quiet)
    # The bar's total is a walk of its own (sizes only), made only for a bar.
    total = None if quiet or no_progress else (lambda: tree.total_size)
    with byte_progress("put", total) as progress:
        try:
            result = wh.put(
                tree,
                name=name,
                expect=expect,
                create=create,
                replace=replace,
                allow_changing=allow_changing,
                progress=progress,
                cache=cache,
            )
        except NameConflictAfterPut as e:
            # Stored and recorded, only not named: say what it is stored as.
            _show(e.result, None, as_json, keep, conflict=str(e))
            raise Failure(e) from None
        finally:
            if cache is not None:
                cache.close()
    if not quiet:
        for _path, reason in keep.skipped:
            click.echo(f"Skipped: {reason}", err=True)
        for path in result.write.changed:
            click.echo(f"Warning: {path} changed while it was read; stored as read", err=True)
    _show(result.write, result, as_json, keep)


def _open_cache(wh: Warehouse, quiet: bool) -> PutCache | None:
    """The resume cache of this store; a put goes on without one it cannot open."""
    from warehouse.putcache import PutCache

    try:
        return PutCache(wh.cache_identity())
    except (OSError, sqlite3.Error) as e:
        if not quiet:
            click.echo(f"Warning: no resume cache ({e}); every file is read", err=True)
        return None


def _keys(**values: Any) -> dict[str, Any]:
    """Every `wh put --json` answers with the same keys, whatever path made it."""
    out: dict[str, Any] = {
        "pdh": None,
        "files": None,
        "bytes": None,
        "bytes_read": None,
        "cached_files": None,
        "cached_bytes": None,
        "blocks": None,
        "blocks_new": None,
        "bytes_new": None,
        "copies": None,
        "name": None,
        "name_version": None,
        "changed": [],
        "skipped": [],
        "excluded": 0,
        "conflict": None,
    }
    assert set(values) <= set(out), set(values) - set(out)
    out.update(values)
    return out


def _show(
    w: WriteResult,
    result: PutResult | None,
    as_json: bool,
    keep: Filter,
    conflict: str | None = None,
) -> None:
    if not as_json:
        click.echo(w.pdh)
        return
    named = None if result is None else result.name
    cached = None if result is None else result.cached
    emit_json(
        _keys(
            pdh=w.pdh,
            files=w.file_count,
            bytes=w.size,
            bytes_read=w.bytes_read,
            cached_files=None if cached is None else cached.files,
            cached_bytes=None if cached is None else cached.bytes,
            blocks=len(w.blocks),
            blocks_new=w.blocks_new,
            bytes_new=w.bytes_new,
            copies=None if result is None else result.copies,
            name=None if named is None else named.name,
            name_version=None if named is None else named.version,
            changed=list(w.changed),
            skipped=[{"path": p, "reason": r} for p, r in keep.skipped],
            excluded=keep.excluded,
            conflict=conflict,
        )
    )


def _dry_run(tree: DirNode, keep: Filter, as_json: bool) -> None:
    """What a put would store, printed as the tree is walked in the put's
    own order (a directory at a time: nothing per file is held)."""
    if as_json:
        _dry_run_json(tree, keep)
        return
    shown_skips = 0
    files = size = 0
    with LineOut() as out:
        out.line("path\tsize")
        for d in tree.walk():
            # What the walk left out so far, told as it is met.
            for _path, reason in keep.skipped[shown_skips:]:
                click.echo(f"Skipped: {reason}", err=True)
            shown_skips = len(keep.skipped)
            prefix = d.rel + "/" if d.rel else ""
            for n, _, length in d.files:
                # One line per file, whatever its name holds.
                path = prefix + n
                shown = path.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
                out.line(f"{shown}\t{length}")
                files += 1
                size += length
    for _path, reason in keep.skipped[shown_skips:]:
        click.echo(f"Skipped: {reason}", err=True)
    click.echo(
        f"would store {files} files, {size} bytes"
        f" ({keep.excluded} excluded, {len(keep.skipped)} skipped); nothing stored",
        err=True,
    )


def _dry_run_json(tree: DirNode, keep: Filter) -> None:
    """``--json``: the counts come before the list (the keys are sorted), so
    the list goes to an unnamed scratch file as the tree is walked."""
    files = size = 0
    with tempfile.TemporaryFile("w+", encoding="ascii", prefix="wh-dry-run-") as items:
        for d in tree.walk():
            prefix = d.rel + "/" if d.rel else ""
            for n, _, length in d.files:
                # An item as emit_json prints it inside the "would_store" list.
                items.write(
                    f'{"," if files else ""}\n    {{\n      "path": {_json_string(prefix + n)},'
                    f'\n      "size": {length}\n    }}'
                )
                files += 1
                size += length
        head = json.dumps(
            _keys(
                files=files,
                bytes=size,
                skipped=[{"path": p, "reason": r} for p, r in keep.skipped],
                excluded=keep.excluded,
            ),
            indent=2,
            sort_keys=True,
        )
        # "would_store" sorts after every other key: it closes the object.
        out = sys.stdout
        out.write(head[: -len("\n}")] + ',\n  "would_store": [')
        items.seek(0)
        shutil.copyfileobj(items, out)
        out.write("\n  ]\n}\n" if files else "]\n}\n")
        out.flush()
