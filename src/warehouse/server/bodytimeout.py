"""Cut off request bodies that arrive too slowly (ASGI middleware).

uvicorn waits for a request body as long as the client keeps the connection
open, so a client could hold hundreds of partial 64 MiB PUTs open at no cost.
``BodyTimeout`` answers 408 and closes the connection when no body bytes
arrive for ``idle`` seconds, or when the body is not complete by ``idle +
length / min_rate`` seconds after the request began (a client trickling one
byte at a time is cut off as well). Once the body is complete, waiting for
the client (e.g. to notice it left) is not limited.
"""

from __future__ import annotations

import asyncio
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["DEFAULT_BODY_TIMEOUT", "MIN_BODY_RATE", "BodyTimeout"]

DEFAULT_BODY_TIMEOUT = 30.0
# Bytes a second a body must average: a 64 MiB block may take up to ~17 minutes.
MIN_BODY_RATE = 64 * 1024


class BodyTimeout:
    def __init__(
        self, app: ASGIApp, idle: float = DEFAULT_BODY_TIMEOUT, min_rate: float = MIN_BODY_RATE
    ) -> None:
        self.app = app
        self.idle = idle
        self.min_rate = min_rate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        length_text = headers.get(b"content-length", b"")
        length = int(length_text) if length_text.isdigit() else None
        start = time.monotonic()
        deadline = None if length is None else start + self.idle + length / self.min_rate
        done = False  # the whole body has arrived
        cut = False  # we answered 408
        started = False  # the app began its answer

        async def timed() -> Message:
            nonlocal done, cut
            if done:
                return await receive()
            if cut:
                return {"type": "http.disconnect"}
            wait = self.idle
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
            try:
                # asyncio.timeout, not wait_for: no task per piece of body.
                async with asyncio.timeout(max(wait, 0.0)):
                    message = await receive()
            except TimeoutError:
                cut = True
                if not started:
                    await _timed_out(send, self.idle)
                # The app sees the client leave; the connection is closed.
                return {"type": "http.disconnect"}
            if message["type"] != "http.request" or not message.get("more_body", False):
                done = True
            return message

        async def guarded(message: Message) -> None:
            nonlocal started
            if cut:
                return  # our 408 was the answer
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, timed, guarded)
        except Exception:
            if not cut:  # after a 408, the app's complaint about the lost client is moot
                raise


async def _timed_out(send: Send, idle: float) -> None:
    body = f"the request body came too slowly (body timeout {idle:g} s)\n".encode()
    await send(
        {
            "type": "http.response.start",
            "status": 408,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
