"""What a keep server asks its controller at start-up (blocking, before serving).

- ``GET /api/v1/cluster/keep-config`` (admin token) gives the blob signing
  key, the signature TTL and the trash lifetime;
- ``POST /api/v1/keep_services`` with ``{"url": …, "id": …}`` registers the
  server once its real port is known; the id (kept on its first volume) makes
  a restarted server replace its old row rather than add one.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from warehouse.errors import WarehouseError
from warehouse.remote.tls import verify_for

__all__ = ["ClusterKeepConfig", "ControllerError", "fetch_keep_config", "register_keep_service"]


class ControllerError(WarehouseError):
    """The controller could not be reached or gave an answer we cannot use."""


@dataclass(frozen=True, slots=True)
class ClusterKeepConfig:
    blob_signing_key: bytes
    signature_ttl: int
    trash_lifetime: float


# Bytes of a controller's answer a keep server reads at most.
_REPLY_LIMIT = 1 << 20


def _call(
    method: str, url: str, token: str, timeout: float, body: dict[str, str] | None = None
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with httpx.stream(
            method, url, headers=headers, timeout=timeout, json=body, verify=verify_for(url)
        ) as streamed:
            pieces: list[bytes] = []
            got = 0
            for piece in streamed.iter_bytes():
                got += len(piece)
                if got > _REPLY_LIMIT:  # its answers are a few hundred bytes
                    raise ControllerError(f"{method} {url} answered over {_REPLY_LIMIT} bytes")
                pieces.append(piece)
        gone = ("content-encoding", "content-length", "transfer-encoding")
        r = httpx.Response(
            streamed.status_code,
            headers=[(k, v) for k, v in streamed.headers.items() if k.lower() not in gone],
            content=b"".join(pieces),
        )
    except httpx.HTTPError as e:
        raise ControllerError(f"cannot reach the controller at {url}: {e}") from e
    if r.status_code >= 300:
        raise ControllerError(f"{method} {url} answered {r.status_code}: {r.text.strip()[:200]}")
    return r


def fetch_keep_config(controller: str, token: str, timeout: float = 30.0) -> ClusterKeepConfig:
    url = f"{controller.rstrip('/')}/api/v1/cluster/keep-config"
    r = _call("GET", url, token, timeout)
    try:
        body = r.json()
        key = body["blob_signing_key"]
        ttl = body["signature_ttl"]
        lifetime = body["trash_lifetime"]
        if not isinstance(key, str) or not key or type(ttl) is not int or ttl <= 0:
            raise TypeError
        # The key's bytes are its hex text as ASCII, not the decoded hex.
        return ClusterKeepConfig(key.encode(), ttl, float(lifetime))
    except (ValueError, KeyError, TypeError):
        raise ControllerError(f"{url} answered something other than a keep config") from None


def register_keep_service(
    controller: str, token: str, service_url: str, sid: str | None = None, timeout: float = 30.0
) -> None:
    """Register (or, with the server's own ``sid``, re-register) its address."""
    url = f"{controller.rstrip('/')}/api/v1/keep_services"
    body = {"url": service_url} if sid is None else {"url": service_url, "id": sid}
    _call("POST", url, token, timeout, body)
