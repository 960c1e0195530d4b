"""A user's `wh` and API client against a test controller, for the tests of
who may do what (permissions, quotas, job tokens, CWL through a controller)."""

from __future__ import annotations

import os

import httpx
from click.testing import CliRunner, Result

from cluster import Controller
from warehouse.cli import cli


def wh_as(ctl: Controller, token: str, *args: str, code: int = 0) -> Result:
    """`wh ARGS` as the holder of ``token`` (no other WH_ setting leaks in);
    its exit code must be ``code``."""
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("WH_")}
    env.update(WH_URL=ctl.url, WH_TOKEN=token)
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == code, (args, result.exit_code, result.output, result.stderr)
    return result


def api_as(ctl: Controller, token: str) -> httpx.Client:
    return httpx.Client(base_url=ctl.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
