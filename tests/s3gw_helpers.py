"""A controller with its S3 gateway on 127.0.0.1, for the S3 gateway tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner, Result

from cluster import KeepPool
from warehouse import catalog
from warehouse.cli import cli
from warehouse.gateways.s3app import with_s3
from warehouse.server.controller import ControllerConfig, ControllerState, create_app
from warehouse.server.serving import ServerThread, Tls


@dataclass
class Gateway:
    url: str  # the controller's; the S3 endpoint is url + "/s3"
    state: ControllerState
    admin: str

    @property
    def endpoint(self) -> str:
        return self.url + "/s3"

    def user(self, name: str) -> str:
        catalog.add_user(self.state.engine, name)
        return catalog.create_token(self.state.engine, name)

    def credential(self, token: str) -> tuple[str, str]:
        """An S3 access key id and secret made with ``token`` (through the API)."""
        reply = httpx.post(
            self.url + "/api/v1/s3/credentials",
            json={"label": "test"},
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
        made = reply.json()
        return made["access_key_id"], made["secret_access_key"]

    def wh(self, token: str, *args: str, code: int = 0) -> Result:
        env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("WH_")}
        env.update(WH_URL=self.url, WH_TOKEN=token)
        result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
        assert result.exit_code == code, (args, result.exit_code, result.output, result.stderr)
        return result

    def boto3(self, key_id: str, secret: str, **config: Any) -> Any:
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 1}, **config),
        )


@contextmanager
def gateway(db: Path, pool: KeepPool) -> Iterator[Gateway]:
    config = ControllerConfig(db_url=f"sqlite:///{db}", signing_key=pool.signing_key, replication=1)
    state = ControllerState.open(config)
    for s in pool.servers:
        catalog.register_keep_service(state.engine, s.url)
    catalog.add_user(state.engine, "root", admin=True)
    admin = catalog.create_token(state.engine, "root")
    server = ServerThread(with_s3(create_app(config, state), state)).start()
    try:
        yield Gateway(server.url, state, admin)
    finally:
        server.stop()
        state.close()


@contextmanager
def tls_server(gw: Gateway, cert: Path, key: Path) -> Iterator[str]:
    """The same controller and gateway over HTTPS too; yields its URL."""
    state = gw.state
    server = ServerThread(with_s3(create_app(state.config, state), state), tls=Tls(cert, key))
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def aws_env(gw: Gateway, key_id: str, secret: str, home: Path) -> dict[str, str]:
    """An environment for the `aws` command against the gateway, with no
    configuration of the machine's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "WH_"))}
    env.update(
        AWS_ACCESS_KEY_ID=key_id,
        AWS_SECRET_ACCESS_KEY=secret,
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=str(home / "aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(home / "aws-credentials"),
        HOME=str(home),
    )
    return env


def rclone_config(gw: Gateway, key_id: str, secret: str, path: Path) -> Path:
    path.write_text(
        "[gw]\ntype = s3\nprovider = Other\n"
        f"access_key_id = {key_id}\nsecret_access_key = {secret}\n"
        f"endpoint = {gw.endpoint}\nregion = us-east-1\n"
    )
    return path
