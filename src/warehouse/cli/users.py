"""``wh user add`` and ``wh token create``: through the API, or on the catalog itself."""

from __future__ import annotations

import os

import click

from warehouse import catalog
from warehouse.cli._common import emit_json
from warehouse.cli.serve import default_db_url
from warehouse.remote.api import ApiClient

__all__ = ["token", "user"]

_DB_HELP = (
    "Work on this catalog directly (default with no $WH_URL: the controller's "
    "catalog in $WH_HOME); with $WH_URL and an admin $WH_TOKEN, the API is used."
)


def _api() -> ApiClient | None:
    url = os.environ.get("WH_URL")
    return ApiClient(url, os.environ.get("WH_TOKEN", "")) if url else None


@click.group()
def user() -> None:
    """Users of a shared installation."""


@user.command("add")
@click.argument("name")
@click.option("--admin", is_flag=True, help="May call admin operations.")
@click.option("--db", "db_url", envvar="WH_DB_URL", help=_DB_HELP)
@click.option("--json", "as_json", is_flag=True)
def user_add(name: str, admin: bool, db_url: str | None, as_json: bool) -> None:
    """Add user NAME and print a first token for it (shown once)."""
    api = None if db_url else _api()
    if api is not None:
        api.post("/users", {"name": name, "admin": admin})
        secret = api.post("/tokens", {"user": name, "label": "first"})["token"]
    else:
        engine = catalog.open_engine(db_url or default_db_url())
        catalog.upgrade(engine)
        catalog.add_user(engine, name, admin=admin)
        secret = catalog.create_token(engine, name, label="first")
        engine.dispose()
    if as_json:
        emit_json({"user": name, "admin": admin, "token": secret})
    else:
        click.echo(secret)


@click.group()
def token() -> None:
    """API tokens."""


@token.command("create")
@click.argument("name")
@click.option("--ttl", type=float, help="Seconds until the token expires (default: never).")
@click.option("--label", default="", help="A note to tell tokens apart.")
@click.option("--db", "db_url", envvar="WH_DB_URL", help=_DB_HELP)
def token_create(name: str, ttl: float | None, label: str, db_url: str | None) -> None:
    """Print a new token for user NAME (shown once; only its hash is kept)."""
    api = None if db_url else _api()
    if api is not None:
        secret = api.post("/tokens", {"user": name, "label": label, "ttl": ttl})["token"]
    else:
        engine = catalog.open_engine(db_url or default_db_url())
        catalog.upgrade(engine)
        secret = catalog.create_token(engine, name, label=label, ttl=ttl)
        engine.dispose()
    click.echo(secret)
