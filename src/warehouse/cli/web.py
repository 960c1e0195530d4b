"""``wh web``: the web pages over the embedded warehouse, on this machine."""

from __future__ import annotations

import logging
import os
import sys

import click

from warehouse import catalog
from warehouse.catalog.auth import revoke_label, revoke_secret
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import NotFoundError, UsageError
from warehouse.server.serving import parse_listen
from warehouse.server.serving import serve as serve_app

__all__ = ["TOKEN_TTL", "sign_in_token", "web"]

# The sign-in token lives while the server runs (revoked when it stops) and a
# day at most; a browser signed in keeps its own session token (12 hours).
TOKEN_TTL = 24 * 3600
_LABEL = "wh web"


def sign_in_token(wh: EmbeddedWarehouse) -> str:
    """A token for the warehouse's own user (made an admin of it on first use).

    One at a time: those of an earlier ``wh web`` (killed before it could
    revoke its own) are revoked first.
    """
    try:
        catalog.get_user(wh.engine, wh.user)
    except NotFoundError:
        catalog.add_user(wh.engine, wh.user, admin=True)
    revoke_label(wh.engine, wh.user, _LABEL)
    return catalog.create_token(wh.engine, wh.user, label=_LABEL, ttl=TOKEN_TTL)


@click.command()
@click.option(
    "--listen", default="127.0.0.1:0", show_default=True, help="HOST:PORT (port 0: any free one)."
)
def web(listen: str) -> None:
    """Serve the web pages for the embedded warehouse ($WH_HOME) until stopped.

    Prints `web pages on URL` and a token to sign in with, valid while it runs
    (a day at most; revoked when it stops).
    A controller (`wh serve`) serves the same pages at /web/ itself.
    """
    from warehouse.web import create_web_app  # FastAPI and Jinja2 load only for this command

    if os.environ.get("WH_URL"):
        raise UsageError("WH_URL is set: the controller there serves these pages at /web/")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    host, port = parse_listen(listen)
    with EmbeddedWarehouse() as wh:
        token = sign_in_token(wh)

        def ready(real_port: int) -> None:
            shown = f"[{host}]" if ":" in host else host
            click.echo(f"web pages on http://{shown}:{real_port}/web/")
            click.echo(f"sign in with token {token}")
            sys.stdout.flush()

        try:
            serve_app(create_web_app(wh), host, port, on_ready=ready)
        finally:
            revoke_secret(wh.engine, token)
