"""``wh ls``, ``wh cat``, ``wh manifest``: look inside collections."""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

from warehouse.cli._common import JsonItems, LineOut, emit_json, human_size, open_warehouse
from warehouse.cli.completion import complete_keys
from warehouse.collection.storedtext import StoredText, stored_text_damage
from warehouse.errors import NotFoundError, UsageError
from warehouse.interface import Warehouse
from warehouse.keys import Key, parse_key
from warehouse.manifest.normal import iter_normal_dirs
from warehouse.manifest.parse import Text

__all__ = ["cat", "ls", "manifest"]


@click.command()
@click.argument("key", shell_complete=complete_keys)
@click.option(
    "-l", "long", is_flag=True, help="Show each file's size (KiB, MiB on a terminal, else bytes)."
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.pass_context
def ls(ctx: click.Context, key: str, long: bool, as_json: bool) -> None:
    """List the files of KEY (a PDH or name, optionally /sub/path)."""
    wh = open_warehouse(ctx)
    k = wh.key(key)
    with stored_text_damage(k.head):
        _ls(wh, k, long, as_json)


def _ls(wh: Warehouse, k: Key, long: bool, as_json: bool) -> None:
    # The stored text is listed line by line, with no file table: a million
    # files list in the memory of one stream, a sub-path and --json too.
    text = wh.stored_text(k)
    if text is None:
        _ls_parsed(wh, k, long, as_json)
        return
    try:
        _ls_text(text, k.path.strip("/"), long, as_json, lambda: wh.resolve(k))
    finally:
        if isinstance(text, StoredText):
            text.close()


def _ls_parsed(wh: Warehouse, k: Key, long: bool, as_json: bool) -> None:
    """A collection whose text is not at hand as stored: from its whole table."""
    from warehouse.collection.extract import select  # the extractor: only here

    reader = wh.reader(k)
    chosen, dirs = select(reader, k.path)
    if as_json:
        emit_json(
            [{"path": p, "size": e.size} for p, e in chosen]
            + [{"path": d + "/", "size": 0} for d in dirs]
        )
        return
    # The output convention: sizes for people on a terminal, bytes for scripts.
    size = human_size if sys.stdout.isatty() else str
    with LineOut() as out:
        for path, entry in chosen:
            out.line(f"{size(entry.size):>14}  {_shown(path)}" if long else _shown(path))
        for d in dirs:
            out.line(f"{'-':>14}  {_shown(d)}/" if long else f"{_shown(d)}/")


def _ls_text(text: Text, sub: str, long: bool, as_json: bool, pdh: Callable[[], str]) -> None:
    """What ``_ls_parsed`` prints, from normalized text a stream at a time:
    the files under ``sub`` (all for ``""``) in manifest order, paths below
    it, then the empty directories below it, sorted; one file by its name."""
    under = ""
    if sub:
        from warehouse.collection.extract import path_kind  # a sub-path only

        kind = path_kind(text, sub)
        if kind is None:
            raise NotFoundError(f"no file or directory {sub!r} in collection {pdh()}")
        under = sub + "/"
    size = human_size if sys.stdout.isatty() else str
    cut = len(under)
    empty: list[str] = []
    with LineOut() as out:
        listed = JsonItems(out) if as_json else None
        failed = True
        try:
            if sub and kind:
                _ls_one(text, sub, long, size, out, listed)
                failed = False
                return
            for prefix, names, sizes in iter_normal_dirs(text):
                if not prefix.startswith(under):
                    continue
                if names is None:
                    if len(prefix) > cut:  # not ``sub`` itself
                        empty.append(prefix[cut:-1])
                    continue
                rel = prefix[cut:]
                if listed is not None:
                    for name, length in zip(names, sizes, strict=True):
                        listed.add(path=rel + name, size=length)
                elif long:
                    for name, length in zip(names, sizes, strict=True):
                        out.line(f"{size(length):>14}  {_shown(rel + name)}")
                elif (
                    _plain(rel)
                    and _plain(joined := "\0".join(names))
                    and (rel or "\0\\" not in "\0" + joined)
                ):
                    # A stream's lines at once: a million files list in seconds.
                    out.lines(rel + ("\n" + rel).join(names))
                else:
                    for name in names:
                        out.line(_shown(rel + name))
            for d in sorted(empty):
                if listed is not None:
                    listed.add(path=d + "/", size=0)
                else:
                    out.line(f"{'-':>14}  {_shown(d)}/" if long else f"{_shown(d)}/")
            failed = False
        finally:
            if listed is not None:
                listed.close(failed)


def _ls_one(
    text: Text,
    sub: str,
    long: bool,
    size: Callable[[int], str],
    out: LineOut,
    listed: JsonItems | None,
) -> None:
    """File ``sub``, by its name, from its directory's stream."""
    parent, _, name = sub.rpartition("/")
    parent_prefix = parent + "/" if parent else ""
    for prefix, names, sizes in iter_normal_dirs(text):
        if prefix == parent_prefix and names is not None and name in names:
            length = sizes[names.index(name)]
            if listed is not None:
                listed.add(path=name, size=length)
            else:
                out.line(f"{size(length):>14}  {_shown(name)}" if long else _shown(name))
            return


def _plain(text: str) -> bool:
    """No line break in ``text``, and it does not start with a backslash."""
    return "\n" not in text and "\r" not in text and not text.startswith("\\")


def _shown(path: str) -> str:
    """One line per path: a name is shown as it is, unless it holds a line
    break or starts with a backslash; then, as md5sum does, its backslashes
    and breaks are escaped and the line starts with a backslash to say so
    (so a line starting with one is always escaped: a name ``\\a\\nb`` and
    one of "a", a newline and "b" do not print alike)."""
    if _plain(path):
        return path
    return "\\" + path.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


@click.command()
@click.argument("key", shell_complete=complete_keys)
@click.pass_context
def cat(ctx: click.Context, key: str) -> None:
    """Write one file of a collection (KEY/path) to standard output, verified."""
    if not parse_key(key).path:  # bad input before the warehouse is opened
        raise UsageError("give a file: KEY/path/to/file")
    wh = open_warehouse(ctx)
    k = wh.key(key)
    if not k.path:  # the whole key is a name in a project
        raise UsageError("give a file: KEY/path/to/file")
    out = sys.stdout.buffer
    with stored_text_damage(k.head):
        for chunk in wh.reader(k).iter_file(k.path):
            out.write(chunk)
    out.flush()


@click.command()
@click.argument("key", shell_complete=complete_keys)
@click.pass_context
def manifest(ctx: click.Context, key: str) -> None:
    """Print the manifest of KEY (a PDH or a name)."""
    wh = open_warehouse(ctx)
    k = wh.key(key)
    if k.path:
        # The whole manifest under a sub-path would read as that path's own.
        raise UsageError(
            f"wh manifest prints a whole collection's manifest: give KEY without /{k.path}"
        )
    text = wh.stored_text(k)  # stored as is: printed with no parse, a piece at a time
    if text is not None:
        out = sys.stdout.buffer
        if isinstance(text, StoredText):
            with text:
                for piece in text.pieces(1 << 18):
                    out.write(piece)
        else:
            out.write(text)
        out.flush()
        return
    click.echo(wh.manifest(k).format(), nl=False)
