"""``wh keep ls|retire``: the keep servers a controller knows (admins retire)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import click

from warehouse.cli._common import emit_json, emit_rows, text_time
from warehouse.remote.api import ApiClient

__all__ = ["keep"]


@contextmanager
def _api() -> Iterator[ApiClient]:
    url = os.environ.get("WH_URL")
    if not url:
        raise click.UsageError(
            "wh keep needs $WH_URL (and $WH_TOKEN): the embedded warehouse has no keep servers"
        )
    api = ApiClient(url, os.environ.get("WH_TOKEN", ""))
    try:
        yield api
    finally:
        api.close()


@click.group()
def keep() -> None:
    """The keep servers registered with the controller."""


@keep.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
def keep_ls(as_json: bool) -> None:
    """List keep servers: id, URL and when each last registered."""
    with _api() as api:
        services = api.get("/keep_services")
    if as_json:
        emit_json(services)
        return
    emit_rows(
        ("id", "url", "last_seen"),
        [(s["id"], s["url"], text_time(s["last_seen"])) for s in services],
    )


@keep.command("retire")
@click.argument("server")
def keep_retire(server: str) -> None:
    """Forget keep server SERVER (its id or URL; admins only).

    GC, balance, fsck and clients stop using it; its blocks are not moved,
    so run `wh balance` afterwards to restore the wanted copies. A server
    that is still running registers itself again when it restarts.
    """
    with _api() as api:
        gone = api.call("DELETE", f"/keep_services/{quote(server, safe='')}")
    click.echo(f"retired {gone['id']} {gone['url']}")
