"""Who is calling: tokens from the request, and the checkers that know them.

Two checkers: ``StaticTokenChecker`` (standalone: a set of admin tokens; any
other non-empty token is a plain user, as Arvados keepstore does without an
API server) and ``ControllerTokenChecker`` (asks the controller, caching the
answers so a busy server does not ask once per block).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import httpx

from warehouse.errors import WarehouseError
from warehouse.remote.tls import verify_for

__all__ = [
    "ControllerTokenChecker",
    "ControllerUnavailable",
    "Principal",
    "StaticTokenChecker",
    "TokenChecker",
    "TtlCache",
    "bearer_token",
]

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Principal:
    user: str
    admin: bool


class TokenChecker(Protocol):
    async def check(self, token: str) -> Principal | None:
        """The token's owner, or None for an unknown token (401)."""


class ControllerUnavailable(WarehouseError):
    """The controller could not be asked (the request gets 503)."""


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <t>`` (or ``OAuth2 <t>``) header."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() not in ("bearer", "oauth2") or not token:
        return None
    return token


class StaticTokenChecker:
    """Admin tokens from a list; every other non-empty token is a plain user."""

    def __init__(self, admin_tokens: Iterable[str]) -> None:
        self.admin_tokens = frozenset(t for t in admin_tokens if t)

    async def check(self, token: str) -> Principal | None:
        if not token:
            return None
        if token in self.admin_tokens:
            return Principal("admin", True)
        return Principal("user", False)


class TtlCache(Generic[K, V]):
    """A bounded LRU whose entries expire; ``clock`` is injectable for tests."""

    def __init__(self, max_entries: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self._clock = clock
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> tuple[bool, V | None]:
        """(found, value): a miss and an expired entry are both (False, None)."""
        item = self._items.get(key)
        if item is None:
            return False, None
        if item[0] <= self._clock():
            del self._items[key]
            return False, None
        self._items.move_to_end(key)
        return True, item[1]

    def put(self, key: K, value: V, ttl: float) -> None:
        self._items[key] = (self._clock() + ttl, value)
        self._items.move_to_end(key)
        while len(self._items) > self.max_entries:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


class ControllerTokenChecker:
    """Asks ``GET {controller}/api/v1/users/current``; answers are cached.

    A known token is cached for ``ttl`` seconds, an unknown one for
    ``negative_ttl`` (shorter, so a token created a moment ago works soon).
    """

    def __init__(
        self,
        controller: str,
        *,
        ttl: float = 60.0,
        negative_ttl: float = 10.0,
        max_entries: int = 10_000,
        timeout: float = 10.0,
    ) -> None:
        self.controller = controller.rstrip("/")
        self.ttl = ttl
        self.negative_ttl = negative_ttl
        self.timeout = timeout
        self._cache: TtlCache[str, Principal | None] = TtlCache(max_entries)
        self._client: httpx.AsyncClient | None = None

    async def check(self, token: str) -> Principal | None:
        if not token:
            return None
        found, principal = self._cache.get(token)
        if found:
            return principal
        principal = await self._ask(token)
        self._cache.put(token, principal, self.ttl if principal else self.negative_ttl)
        return principal

    async def _ask(self, token: str) -> Principal | None:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=self.timeout, verify=verify_for(self.controller)
            )
        url = f"{self.controller}/api/v1/users/current"
        try:
            r = await self._client.get(url, headers={"Authorization": f"Bearer {token}"})
        except httpx.HTTPError as e:
            raise ControllerUnavailable(f"cannot reach the controller at {url}: {e}") from e
        if r.status_code in (401, 403):
            return None
        if r.status_code != 200:
            raise ControllerUnavailable(f"the controller answered {r.status_code} at {url}")
        try:
            body = r.json()
            return Principal(str(body["name"]), body["admin"] is True)
        except (ValueError, KeyError, TypeError) as e:
            raise ControllerUnavailable(
                f"the controller's answer at {url} is not understood"
            ) from e

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
