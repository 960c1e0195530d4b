"""ASGI middleware that watches each HTTP exchange go by and reports it once.

The access log, keepd's request counters and the controller's latency
histogram all want the same few facts about an answer: its status, the bytes
each way and how long it took. ``Observer`` collects them around the
application and hands them to ``observed`` when the exchange ends (also when
the application raised: the status is then 0, reported as 500).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["Exchange", "Observer"]


@dataclass
class Exchange:
    started: float  # time.monotonic() when the request reached this middleware
    status: int = 0
    received: int = 0  # request body bytes read by the application
    sent: int = 0  # response body bytes

    @property
    def code(self) -> int:
        """The status, 500 when the application failed before answering."""
        return self.status or 500

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started


class Observer:
    """Subclasses implement ``observed``; ``watching`` may skip a request cheaply."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def watching(self, scope: Scope) -> bool:
        return True

    def observed(self, scope: Scope, exchange: Exchange) -> None:
        raise NotImplementedError

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.watching(scope):
            await self.app(scope, receive, send)
            return
        seen = Exchange(time.monotonic())

        async def counting_receive() -> Message:
            message = await receive()
            seen.received += len(message.get("body", b""))
            return message

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen.status = message["status"]
            elif message["type"] == "http.response.body":
                seen.sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, counting_receive, counting_send)
        finally:
            self.observed(scope, seen)
