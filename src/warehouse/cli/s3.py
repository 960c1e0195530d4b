"""``wh s3 credentials create|ls|revoke``: S3 credentials for the S3
gateway of ``wh serve`` (docs/s3-gateway.md), through the controller."""

from __future__ import annotations

import os

import click

from warehouse.catalog.auth import check_label
from warehouse.catalog.s3credentials import check_access_key_id
from warehouse.cli._common import emit_json, emit_rows, text_time
from warehouse.errors import UsageError
from warehouse.remote.api import ApiClient

__all__ = ["s3"]

_PATH = "/s3/credentials"


def _api() -> ApiClient:
    url = os.environ.get("WH_URL")
    if not url:
        raise UsageError(
            "S3 credentials are made by a controller: set WH_URL (and WH_TOKEN) to the "
            "`wh serve` whose S3 gateway they are for"
        )
    api = ApiClient(url, os.environ.get("WH_TOKEN", ""))
    click.get_current_context().call_on_close(api.close)
    return api


@click.group()
def s3() -> None:
    """The S3 gateway of `wh serve`: credentials for S3 clients."""


@s3.group()
def credentials() -> None:
    """S3 access keys: make one for yourself, list and revoke them."""


@credentials.command("create")
@click.option("--label", default="", help="A note to tell credentials apart.")
@click.option("--json", "as_json", is_flag=True, help="Print the credential as JSON.")
def create(label: str, as_json: bool) -> None:
    """Make an access key id and secret for yourself (shown once).

    They act as your $WH_TOKEN's user and live as long as that token: revoking
    the token revokes them. Give them to boto3, `aws` or rclone with the
    gateway's URL (docs/s3-gateway.md).
    """
    check_label(label)
    made = _api().post(_PATH, {"label": label})
    if as_json:
        emit_json(made)
        return
    click.echo(f"aws_access_key_id = {made['access_key_id']}")
    click.echo(f"aws_secret_access_key = {made['secret_access_key']}")


@credentials.command("ls")
@click.option("--user", "whose", help="Only this user's (admins; default: your own).")
@click.option("--json", "as_json", is_flag=True, help="Print the credentials as a JSON list.")
def ls(whose: str | None, as_json: bool) -> None:
    """List the S3 credentials that work now (never their secrets)."""
    rows = list(_api().get(_PATH, **({"whose": whose} if whose else {})))
    if as_json:
        emit_json(rows)
        return
    emit_rows(
        ("access_key_id", "user", "created_at", "token", "label"),
        [
            (r["access_key_id"], r["user"], text_time(r["created_at"]), r["token_id"], r["label"])
            for r in rows
        ],
    )


@credentials.command("revoke")
@click.argument("access_key_id")
def revoke(access_key_id: str) -> None:
    """Revoke an S3 credential: yours; admins: anyone's. It stops at once."""
    check_access_key_id(access_key_id)  # before it becomes part of a URL
    done = _api().call("DELETE", f"{_PATH}/{access_key_id}")
    click.echo(f"revoked S3 credential {access_key_id} of {done['user']}")
