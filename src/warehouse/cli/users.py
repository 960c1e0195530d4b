"""``wh user add|ls`` and ``wh token create|ls|revoke``: through the API, or on the
catalog itself."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import click

from warehouse import catalog
from warehouse.catalog import auth
from warehouse.cli._common import emit_json, emit_rows, text_time
from warehouse.cli.serve import default_db_url
from warehouse.errors import ConflictError, UsageError
from warehouse.remote.api import ApiClient, AuthError

__all__ = ["token", "user"]

_DB_HELP = (
    "Work on this catalog directly (default with no $WH_URL: the controller's "
    "catalog in $WH_HOME); with $WH_URL and an admin $WH_TOKEN, the API is used."
)


def _api() -> ApiClient | None:
    url = os.environ.get("WH_URL")
    if not url:
        return None
    api = ApiClient(url, os.environ.get("WH_TOKEN", ""))
    click.get_current_context().call_on_close(api.close)
    return api


def _engine(db_url: str | None) -> Any:
    engine = catalog.open_engine(db_url or default_db_url())
    catalog.upgrade(engine)
    return engine


def _when(t: float | None) -> str:
    return text_time(t, never="never")


@click.group()
def user() -> None:
    """Users of a shared installation."""


@user.command("add")
@click.argument("name")
@click.option("--admin", is_flag=True, help="May call admin operations.")
@click.option("--db", "db_url", envvar="WH_DB_URL", help=_DB_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print user, admin and token as JSON.")
def user_add(name: str, admin: bool, db_url: str | None, as_json: bool) -> None:
    """Add user NAME and print a first token for it (shown once).

    With $WH_URL but no $WH_TOKEN (the first user of a new installation), it
    waits for the controller to have started (at most $WH_WAIT seconds), then
    adds the user on the catalog itself, the one `wh serve` on this machine
    uses ($WH_DB_URL, else controller.db in $WH_HOME), and checks that the
    controller knows the token: one given another catalog (`wh serve --db`)
    is refused, and --db must name that catalog.
    """
    url = os.environ.get("WH_URL")
    if not db_url and url and not os.environ.get("WH_TOKEN", "").strip():
        from warehouse.remote.wait import wait_until_ready

        # The controller creates and migrates the catalog before it listens.
        wait_until_ready(url)
        click.echo(
            f"no $WH_TOKEN: adding {name} on this machine's catalog, not through {url}",
            err=True,
        )
        api = None
        check = url
    else:
        api = None if db_url else _api()
        check = None
    try:
        if api is not None:
            api.post("/users", {"name": name, "admin": admin})
            secret = api.post("/tokens", {"user": name, "label": "first"})["token"]
        else:
            where = db_url or default_db_url()
            engine = catalog.open_engine(where)
            catalog.upgrade(engine)
            try:
                catalog.add_user(engine, name, admin=admin)
                secret = catalog.create_token(engine, name, label="first")
                if check is not None:
                    _check_known(check, engine, where, name, secret)
            finally:
                engine.dispose()
    except ConflictError as e:
        # A recipe pasted twice: say how to get a token for the user there is.
        raise ConflictError(f"{e}: `wh token create {name}` prints a new token for it") from e
    if as_json:
        emit_json({"user": name, "admin": admin, "token": secret})
    else:
        click.echo(secret)


def _check_known(url: str, engine: Any, where: str, name: str, secret: str) -> None:
    """The controller at ``url`` must know the token just made on this machine's
    catalog: one started with another catalog (`wh serve --db`) would not, and a
    token printed there would only fail later, with a less telling error."""
    api = ApiClient(url, secret)
    try:
        api.get("/users/current")
    except AuthError:
        auth.revoke_token(engine, auth.token_id(secret))
        raise UsageError(
            f"the controller at {url} does not use the catalog {name} was added to "
            f"({where}; its token is revoked): give `wh user add` the catalog "
            "`wh serve` was given, with --db URL or $WH_DB_URL"
        ) from None
    finally:
        api.close()


@user.command("ls")
@click.option("--db", "db_url", envvar="WH_DB_URL", help=_DB_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the users as a JSON list.")
def user_ls(db_url: str | None, as_json: bool) -> None:
    """List the users: through the API (admins only), else on the catalog itself."""
    api = None if db_url else _api()
    if api is not None:
        # The same keys as from the catalog (the API's `cluster` is for /users/current).
        rows = [{"name": r["name"], "admin": r["admin"]} for r in api.get("/users")]
    else:
        engine = _engine(db_url)
        rows = [{"name": u.name, "admin": u.admin} for u in catalog.list_users(engine)]
        engine.dispose()
    if as_json:
        emit_json(rows)
        return
    emit_rows(("name", "admin"), [(r["name"], "yes" if r["admin"] else "no") for r in rows])


@click.group()
def token() -> None:
    """API tokens: create, list (ids, never secrets) and revoke."""


@token.command("create")
@click.argument("name", required=False)
@click.option("--ttl", type=float, help="Seconds until the token expires (default: never).")
@click.option("--label", default="", help="A note to tell tokens apart.")
@click.option("--db", "db_url", envvar="WH_DB_URL", help=_DB_HELP)
def token_create(name: str | None, ttl: float | None, label: str, db_url: str | None) -> None:
    """Print a new token for user NAME (default: yourself; others: admins only).

    The secret is shown once; only its hash is kept. `wh token ls` shows its id.
    """
    if ttl is not None and ttl <= 0:
        raise UsageError(f"--ttl must be more than 0 seconds, not {ttl:g}")
    auth.check_label(label)
    api = None if db_url else _api()
    if api is not None:
        secret = api.post("/tokens", {"user": name, "label": label, "ttl": ttl})["token"]
    else:
        if name is None:
            raise UsageError("NAME is needed when working on the catalog directly")
        engine = _engine(db_url)
        secret = catalog.create_token(engine, name, label=label, ttl=ttl)
        engine.dispose()
    click.echo(secret)


@token.command("ls")
@click.option("--user", "whose", help="Only this user's tokens (admins; default: your own).")
@click.option("--db", "db_url", envvar="WH_DB_URL", help=_DB_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the tokens as a JSON list.")
def token_ls(whose: str | None, db_url: str | None, as_json: bool) -> None:
    """List unexpired tokens by id (a prefix of their hash), never their secrets.

    Your own; an admin sees everyone's, or --user's.
    """
    api = None if db_url else _api()
    if api is not None:
        rows = list(api.get("/tokens", **({"whose": whose} if whose else {})))
    else:
        engine = _engine(db_url)
        rows = [asdict(t) for t in auth.list_tokens(engine, whose)]
        engine.dispose()
    if as_json:
        emit_json(rows)
        return
    emit_rows(
        ("id", "user", "created_at", "expires_at", "label"),
        [
            (r["id"], r["user"], _when(r["created_at"]), _when(r["expires_at"]), r["label"])
            for r in rows
        ],
    )


@token.command("revoke")
@click.argument("token_id", metavar="ID")
@click.option("--db", "db_url", envvar="WH_DB_URL", help=_DB_HELP)
def token_revoke(token_id: str, db_url: str | None) -> None:
    """Revoke token ID (as `wh token ls` shows it): yours; admins: anyone's.

    It stops working at once.
    """
    auth.check_token_id(token_id)  # before it becomes part of a URL
    api = None if db_url else _api()
    if api is not None:
        done = api.call("DELETE", f"/tokens/{token_id}")
        whose = done["user"]
    else:
        engine = _engine(db_url)
        whose = auth.revoke_token(engine, token_id).user
        engine.dispose()
    click.echo(f"revoked token {token_id} of {whose}")
