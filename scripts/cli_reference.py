"""Write docs/cli-reference.md from the commands' own --help (``--check`` compares)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from warehouse.cli import cli

TARGET = Path(__file__).resolve().parent.parent / "docs" / "cli-reference.md"


def _walk(cmd: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
    out = [(path, cmd)]
    if isinstance(cmd, click.Group):
        ctx = click.Context(cmd)
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            assert sub is not None
            out += _walk(sub, [*path, name])
    return out


def render() -> str:
    parts = [
        "# `wh` command reference\n\n",
        "Generated from each command's `--help` by `scripts/cli_reference.py`; "
        "a test fails when it is out of date. See `cli.md` for the concepts.\n",
    ]
    for path, cmd in _walk(cli, ["wh"]):
        # With wh's own context settings (its -h), as a user's `--help` shows them.
        ctx = click.Context(
            cmd, info_name=" ".join(path), terminal_width=100, **cli.context_settings
        )
        parts.append(f"\n## `{' '.join(path)}`\n\n```text\n{cmd.get_help(ctx)}\n```\n")
    return "".join(parts)


def main() -> None:
    text = render()
    if "--check" in sys.argv:
        if not TARGET.exists() or TARGET.read_text() != text:
            sys.exit(f"{TARGET.name} is out of date: run python scripts/cli_reference.py")
        return
    TARGET.write_text(text)


if __name__ == "__main__":
    main()
