"""From ``wh keepd`` options to a running keep server.

Standalone, the signing key, TTL and admin tokens come from the options;
with a controller, the key and lifetimes come from the controller, tokens
are checked by it, and the server registers its URL once it listens.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from warehouse.blocks.signing import DEFAULT_SIGNATURE_TTL
from warehouse.blocks.volume import DEFAULT_TRASH_LIFETIME
from warehouse.errors import UsageError
from warehouse.server.bodytimeout import DEFAULT_BODY_TIMEOUT
from warehouse.server.headertimeout import DEFAULT_HEADER_TIMEOUT
from warehouse.server.keepd.app import create_app
from warehouse.server.keepd.auth import ControllerTokenChecker, StaticTokenChecker, TokenChecker
from warehouse.server.keepd.config import KeepConfig
from warehouse.server.keepd.controller import fetch_keep_config, register_keep_service
from warehouse.server.lifeline import PARENT_ENV, die_with_parent, server_id
from warehouse.server.serving import Tls, serve
from warehouse.volumes.base import is_s3_spec, open_volume

__all__ = ["KeepdOptions", "build_config", "run_keepd", "service_url"]

log = logging.getLogger("warehouse.keepd")


@dataclass
class KeepdOptions:
    volumes: list[Path | str]  # directories, or s3://BUCKET/PREFIX?endpoint=URL specs
    host: str
    port: int
    controller: str | None = None
    # Standalone: tokens that may use the admin requests.
    admin_tokens: list[str] = field(default_factory=list)
    # With a controller: this server's own (admin) token.
    controller_token: str | None = None
    signing_key: bytes | None = None
    signature_ttl: int | None = None
    trash_lifetime: float | None = None
    tls: Tls | None = None
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    # Seconds between reports of volume usage to the controller.
    usage_interval: float = 60.0


def service_url(host: str, port: int, https: bool = False) -> str:
    """The URL others reach this server at; a wildcard address means this host."""
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    scheme = "https" if https else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def build_config(options: KeepdOptions) -> KeepConfig:
    """The server's configuration; with a controller, this asks it for the keep settings."""
    if not options.volumes:
        raise UsageError("keepd needs at least one --volume")
    if options.controller and is_s3_spec(options.volumes[0]):
        raise UsageError(
            "with --controller, the first --volume must be a directory: "
            "it keeps the server's id (docs/keepd.md)"
        )
    ttl = options.signature_ttl or DEFAULT_SIGNATURE_TTL
    lifetime = options.trash_lifetime or DEFAULT_TRASH_LIFETIME
    tokens: TokenChecker
    if options.controller:
        if not options.controller_token:
            raise UsageError("with --controller, keepd needs its admin token in WH_TOKEN")
        cluster = fetch_keep_config(options.controller, options.controller_token)
        key, ttl, lifetime = cluster.blob_signing_key, cluster.signature_ttl, cluster.trash_lifetime
        tokens = ControllerTokenChecker(options.controller)
        service_token: str | None = options.controller_token
    else:
        if options.signing_key:
            key = options.signing_key
        else:
            log.warning("no --signing-key-file: signatures will not survive a restart")
            key = secrets.token_hex(32).encode()
        tokens = StaticTokenChecker(options.admin_tokens)
        service_token = options.admin_tokens[0] if options.admin_tokens else None
    # An S3 volume's bucket is asked now: a missing one, or refused
    # credentials, stop the start with one line.
    volumes = [open_volume(v, trash_lifetime=lifetime) for v in options.volumes]
    return KeepConfig(
        volumes=volumes,
        signing_key=key,
        tokens=tokens,
        signature_ttl=ttl,
        service_token=service_token,
        body_timeout=options.body_timeout,
        controller=options.controller or None,
        usage_interval=options.usage_interval,
    )


def run_keepd(options: KeepdOptions, announce: Callable[[str], None]) -> None:
    """Serve until SIGTERM/SIGINT; ``announce(url)`` once listening (and registered)."""
    parent = os.environ.get(PARENT_ENV, "")
    if parent.isdigit():
        die_with_parent(int(parent))
    app = create_app(build_config(options))

    def ready(port: int) -> None:
        url = service_url(options.host, port, https=options.tls is not None)
        if options.controller and options.controller_token:
            sid = server_id(Path(options.volumes[0]))
            register_keep_service(options.controller, options.controller_token, url, sid)
            log.info("registered %s with %s", url, options.controller)
        announce(url)

    timeout = options.header_timeout
    serve(app, options.host, options.port, ready, tls=options.tls, header_timeout=timeout)
