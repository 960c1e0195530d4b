"""``wh ls``, ``wh cat``, ``wh manifest``: look inside collections."""

from __future__ import annotations

import sys

import click

from warehouse.cli._common import LineOut, emit_json, human_size, open_warehouse
from warehouse.cli.completion import complete_keys
from warehouse.collection.extract import select
from warehouse.collection.reader import stored_text_damage
from warehouse.errors import UsageError
from warehouse.interface import Warehouse
from warehouse.keys import Key, parse_key
from warehouse.manifest.normal import iter_normal_dirs

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
    k = parse_key(key)
    wh = open_warehouse(ctx)
    with stored_text_damage(k.head):
        _ls(wh, k, long, as_json)


def _ls(wh: Warehouse, k: Key, long: bool, as_json: bool) -> None:
    # The stored text is listed line by line, with no file table: a million
    # files list in the memory of one stream.
    text = None if as_json or k.path else wh.manifest_text(k)
    if text is not None:
        _ls_text(text, long)
        return
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


def _ls_text(text: bytes, long: bool) -> None:
    size = human_size if sys.stdout.isatty() else str
    empty: list[str] = []
    with LineOut() as out:
        for prefix, names, sizes in iter_normal_dirs(text):
            if names is None:
                empty.append(prefix[:-1])
            elif long:
                for name, length in zip(names, sizes, strict=True):
                    out.line(f"{size(length):>14}  {_shown(prefix + name)}")
            elif (
                _plain(prefix)
                and _plain(joined := "\0".join(names))
                and (prefix or "\0\\" not in "\0" + joined)
            ):
                # A stream's lines at once: a million files list in seconds.
                out.lines(prefix + ("\n" + prefix).join(names))
            else:
                for name in names:
                    out.line(_shown(prefix + name))
        for d in sorted(empty):
            out.line(f"{'-':>14}  {_shown(d)}/" if long else f"{_shown(d)}/")


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
    k = parse_key(key)
    if not k.path:
        raise UsageError("give a file: KEY/path/to/file")
    out = sys.stdout.buffer
    with stored_text_damage(k.head):
        for chunk in open_warehouse(ctx).reader(k).iter_file(k.path):
            out.write(chunk)
    out.flush()


@click.command()
@click.argument("key", shell_complete=complete_keys)
@click.pass_context
def manifest(ctx: click.Context, key: str) -> None:
    """Print the manifest of KEY (a PDH or a name)."""
    k = parse_key(key)
    if k.path:
        # The whole manifest under a sub-path would read as that path's own.
        raise UsageError(
            f"wh manifest prints a whole collection's manifest: give KEY without /{k.path}"
        )
    wh = open_warehouse(ctx)
    text = wh.manifest_text(k)  # stored as is: printed with no parse
    if text is not None:
        out = sys.stdout.buffer
        out.write(text)
        out.flush()
        return
    click.echo(wh.manifest(k).format(), nl=False)
