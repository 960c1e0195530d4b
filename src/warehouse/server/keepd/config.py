"""Everything a keep server needs to run, gathered by the CLI or by a test."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import version

from warehouse.blocks.signing import DEFAULT_SIGNATURE_TTL
from warehouse.server.bodytimeout import DEFAULT_BODY_TIMEOUT
from warehouse.server.keepd.auth import TokenChecker
from warehouse.volumes.base import Volume

__all__ = ["KeepConfig"]


@dataclass
class KeepConfig:
    volumes: list[Volume]
    signing_key: bytes
    tokens: TokenChecker
    signature_ttl: int = DEFAULT_SIGNATURE_TTL
    # The server's own admin token: sent to other keep servers when pulling.
    service_token: str | None = None
    # Bytes to leave free on each volume; a volume with less room takes no writes.
    reserve_bytes: int = 0
    # How often trash past its lifetime and stale temporaries are removed.
    clean_interval: float = 300.0
    # A temporary file older than this is left over from a crash.
    stale_temporary_age: float = 6 * 3600.0
    pull_workers: int = 2
    pull_timeout: float = 60.0
    # A PUT body that sends nothing for this long is cut off (408).
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    version: str = field(default_factory=lambda: version("warehouse"))
    # The controller volume usage is sent to (None: standalone, not sent),
    # and how often (docs/usage.md, "Per volume").
    controller: str | None = None
    usage_interval: float = 60.0
