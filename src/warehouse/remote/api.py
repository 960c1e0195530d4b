"""A small client for the controller's JSON API; HTTP errors become library errors."""

from __future__ import annotations

from typing import Any

import httpx

from warehouse.errors import (
    ConflictError,
    CorruptDataError,
    ForbiddenError,
    NotFoundError,
    UsageError,
    WarehouseError,
)
from warehouse.remote.blockhttp import IDLE_SECONDS
from warehouse.remote.tls import verify_for

__all__ = ["ApiClient", "AuthError"]


class AuthError(ForbiddenError):
    """No token, or one the controller does not know (HTTP 401)."""


_ERRORS: dict[int, type[WarehouseError]] = {
    400: UsageError,
    401: AuthError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: UsageError,
    502: CorruptDataError,
}


_BROKEN = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)


class ApiClient:
    def __init__(self, url: str, token: str, *, timeout: float = 300.0) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.url + "/api/v1",
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(timeout, connect=10.0),
            limits=httpx.Limits(keepalive_expiry=IDLE_SECONDS),
            verify=verify_for(self.url),
        )

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, path: str, **kw: Any) -> Any:
        # A GET changes nothing, so a connection that broke under it (a kept-
        # alive one the server closed) earns it one more try; not a timeout or
        # a refused connection, and not other methods, which may have taken effect.
        tries = 2 if method == "GET" else 1
        for attempt in range(tries):
            try:
                resp = self.http.request(method, path, **kw)
                break
            except _BROKEN as e:
                if attempt + 1 == tries:
                    raise WarehouseError(
                        f"cannot reach the controller at {self.url}: {e}"
                    ) from None
            except httpx.TransportError as e:
                raise WarehouseError(f"cannot reach the controller at {self.url}: {e}") from None
        if resp.status_code >= 400:
            try:
                message = resp.json().get("error", resp.text)
            except ValueError:
                message = resp.text
            raise _ERRORS.get(resp.status_code, WarehouseError)(message)
        return None if resp.status_code == 204 else resp.json()

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params=params or None)

    def post(self, path: str, body: Any) -> Any:
        return self.call("POST", path, json=body)

    def put(self, path: str, body: Any) -> Any:
        return self.call("PUT", path, json=body)
