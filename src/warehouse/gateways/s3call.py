"""One S3 request as the operations see it: who signed it, the bucket and key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol
from urllib.parse import parse_qsl

from starlette.requests import Request

from warehouse import catalog
from warehouse.blocks.cache import BlockCache
from warehouse.gateways.s3objects import Bucket, ContentsCache, Listable, resolve_bucket
from warehouse.gateways.s3uploads import Uploads
from warehouse.server.controller.state import ControllerState

__all__ = ["Call", "Gateway"]


class Gateway(Protocol):
    """What the operations use of the gateway (``s3app.S3Gateway``)."""

    state: ControllerState
    cache: ContentsCache
    blocks: BlockCache  # blocks shared by small files (s3read.small_body)
    uploads: Uploads


@dataclass
class Call:
    gateway: Gateway
    request: Request
    user: catalog.User
    bucket: str
    key: str
    payload: str  # the payload hash signed: hex SHA-256 or UNSIGNED-PAYLOAD
    # The bucket's name record (None: no such name) if read with the
    # credential in this request; None: not read yet.
    named: tuple[catalog.NameRecord | None] | None = None

    @property
    def query(self) -> dict[str, str]:
        raw = self.request.scope.get("query_string", b"").decode("latin-1")
        return dict(parse_qsl(raw, keep_blank_values=True))

    def resolve(self) -> Bucket:
        """The bucket, if the caller may read it (else NoSuchBucket)."""
        return resolve_bucket(self.gateway.state, self.user, self.bucket, self.named)

    def contents(self, pdh: str) -> Listable:
        return self.gateway.cache.get(self.gateway.state, pdh, self.user.name)
