"""``wh config``: the effective settings and where each came from."""

from __future__ import annotations

import click

from warehouse.cli._common import emit_json, emit_rows
from warehouse.settings import FIELDS, config_path, load

__all__ = ["config"]


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def config(as_json: bool) -> None:
    """Print the effective settings and where each came from.

    Each comes from $WH_<NAME>, else from the config file
    ($XDG_CONFIG_HOME/warehouse/config.toml, key <name>), else its default.
    The token is never shown; a catalog URL's password neither.
    """
    rows = load()
    if as_json:
        emit_json(
            {
                "config_file": str(config_path()),
                "settings": [
                    {
                        "name": r.name,
                        "variable": r.variable,
                        "value": r.shown() or None,
                        "origin": r.origin,
                        "about": FIELDS[r.name],
                    }
                    for r in rows
                ],
            }
        )
        return
    click.echo(f"# config file: {config_path()}")
    emit_rows(
        ("variable", "value", "origin"), [(r.variable, r.shown() or None, r.origin) for r in rows]
    )
