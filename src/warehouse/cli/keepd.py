"""``wh keepd``: run a keep server over one or more volumes (directories or S3 buckets)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import click

from warehouse.blocks.signing import DEFAULT_SIGNATURE_TTL, MAX_SIGNATURE_TTL
from warehouse.cli._common import server_options
from warehouse.errors import UsageError
from warehouse.server.accesslog import configure_access_log
from warehouse.server.keepd import KeepdOptions, run_keepd
from warehouse.server.serving import Tls, parse_listen
from warehouse.volumes.base import is_s3_spec

__all__ = ["keepd"]


def _read_lines(path: Path | None) -> list[str]:
    if path is None:
        return []
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


# A trashed block's file name holds its deadline in whole seconds.
MAX_TRASH_LIFETIME = 1000 * 365 * 24 * 3600.0


def _lifetime(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not (value > 0 and value <= MAX_TRASH_LIFETIME):  # NaN too
        raise click.BadParameter(
            f"{value} is not a number of seconds above 0 and at most 1000 years"
        )
    return value


def _volumes(
    ctx: click.Context, param: click.Parameter, value: tuple[str, ...]
) -> list[Path | str]:
    """Directories as paths (refused if a file is in the way), S3 specs as given."""
    out: list[Path | str] = []
    for spec in value:
        if is_s3_spec(spec):
            out.append(spec)
            continue
        out.append(click.Path(file_okay=False, path_type=Path).convert(spec, param, ctx))
    return out


def _announce(url: str) -> None:
    click.echo(f"keepd listening on {url}")
    sys.stdout.flush()


@click.command()
@click.option(
    "--volume",
    "volumes",
    multiple=True,
    required=True,
    metavar="DIR|s3://BUCKET/PREFIX?endpoint=URL",
    callback=_volumes,
    help="A directory of blocks (created if missing), or an S3 bucket and prefix "
    "(docs/s3.md); repeat for several.",
)
@click.option("--listen", required=True, help="HOST:PORT to listen on (port 0: any free port).")
@click.option("--controller", metavar="URL", help="The controller; its admin token is $WH_TOKEN.")
@click.option(
    "--admin-token-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Standalone: admin tokens, one per line (also $WH_KEEP_ADMIN_TOKEN).",
)
@click.option(
    "--signing-key-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Standalone: the blob signing key (the file's text, stripped).",
)
@click.option(
    "--signature-ttl",
    type=click.IntRange(min=1, max=MAX_SIGNATURE_TTL),
    default=DEFAULT_SIGNATURE_TTL,
    show_default=True,
    help="Standalone: seconds a signed locator stays valid.",
)
@click.option(
    "--trash-lifetime",
    type=float,
    callback=_lifetime,
    help="Standalone: seconds a trashed block is kept before removal [default: 14 days].",
)
@click.option(
    "--usage-interval",
    type=click.FloatRange(min=0.1),
    default=60.0,
    show_default=True,
    help="With --controller: seconds between reports of the volumes' usage "
    "(requests by kind, bytes stored; also sent at a clean stop).",
)
@server_options()
def keepd(
    volumes: list[Path | str],
    listen: str,
    controller: str | None,
    admin_token_file: Path | None,
    signing_key_file: Path | None,
    signature_ttl: int,
    trash_lifetime: float | None,
    usage_interval: float,
    tls_cert: Path | None,
    tls_key: Path | None,
    access_log: str,
    body_timeout: float,
    header_timeout: float,
) -> None:
    """Serve blocks over HTTP from local or S3 volumes (the keep server).

    Prints `keepd listening on http://HOST:PORT` (https with --tls-cert) once
    it accepts requests, then serves until SIGTERM or SIGINT, logging one
    line per request. See docs/keepd.md and docs/security.md.
    """
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("botocore").setLevel(logging.WARNING)  # an S3 volume's client
    host, port = parse_listen(listen)
    tls = Tls.from_options(tls_cert, tls_key)
    configure_access_log(access_log)
    admin_tokens = _read_lines(admin_token_file)
    env_admin = os.environ.get("WH_KEEP_ADMIN_TOKEN", "").strip()
    if env_admin:
        admin_tokens.append(env_admin)
    key = signing_key_file.read_text().strip().encode() if signing_key_file else None
    if signing_key_file and not key:
        raise UsageError(f"the signing key file {signing_key_file} is empty")
    options = KeepdOptions(
        volumes=volumes,
        host=host,
        port=port,
        controller=controller,
        admin_tokens=admin_tokens,
        controller_token=os.environ.get("WH_TOKEN") or None,
        signing_key=key,
        signature_ttl=signature_ttl,
        trash_lifetime=trash_lifetime,
        tls=tls,
        body_timeout=body_timeout,
        header_timeout=header_timeout,
        usage_interval=usage_interval,
    )
    run_keepd(options, _announce)
