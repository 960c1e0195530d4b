"""Close connections whose request headers do not arrive in time.

uvicorn times out idle kept-alive connections, but not a request whose
headers are still coming: every byte received resets nothing and arms
nothing, so a client dribbling a header line a byte at a time (or sending
half a line and nothing more) holds its connection for ever, and a few
thousand such connections hold the server. ASGI middleware cannot help: the
application is called only once the headers are complete. (Slow bodies are
``BodyTimeout``'s business.)

``header_timeout_protocol(seconds)`` is uvicorn's own HTTP protocol class
(httptools when installed, else h11: what ``http="auto"`` would pick) with a
deadline: from the moment a connection is made, or a new request's first
byte arrives, its headers must be complete within ``seconds``. Past that the
server answers 408 (when no earlier response on the connection is still
being sent) and closes the connection. Between requests, uvicorn's keep-alive
timeout applies as before.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["DEFAULT_HEADER_TIMEOUT", "header_timeout_protocol"]

DEFAULT_HEADER_TIMEOUT = 30.0

log = logging.getLogger("warehouse.server")

_BODY = b"the request headers took too long\n"
_TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"content-length: %d\r\n"
    b"connection: close\r\n\r\n%s" % (len(_BODY), _BODY)
)


class _HeaderDeadline:
    """The deadline, mixed into a uvicorn HTTP protocol class."""

    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    _header_timer: asyncio.TimerHandle | None = None
    # Attributes of uvicorn's protocols that the deadline reads.
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    cycle: Any
    client: tuple[str, int] | None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[misc]  # the protocol's, next in line
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        super().connection_lost(exc)  # type: ignore[misc]

    def _arm_header_deadline(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._headers_late)

    def _disarm_header_deadline(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined request behind one still being answered: its
            # response must not be cut in the middle; look again later.
            self._arm_header_deadline()
            return
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "?"
        log.warning("%s: request headers incomplete after %gs: closed", client, self.header_timeout)
        self.transport.write(_TIMED_OUT)
        self.transport.close()


class _H11Deadline(_HeaderDeadline, H11Protocol):
    # h11 has no callbacks: after each piece of data, the headers are still
    # to come while the peer's side is IDLE with bytes buffered.
    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        waiting = self.conn.their_state is h11.IDLE and bool(self.conn.trailing_data[0])
        if waiting:
            self._arm_header_deadline()
        else:
            self._disarm_header_deadline()


@functools.cache
def _httptools_deadline() -> type[_HeaderDeadline] | None:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools is not installed: uvicorn uses h11
        return None

    class _HttpToolsDeadline(_HeaderDeadline, HttpToolsProtocol):
        # httptools says when a request begins and when its headers are complete.
        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm_header_deadline()

        def on_headers_complete(self) -> None:
            self._disarm_header_deadline()
            super().on_headers_complete()

    return _HttpToolsDeadline


def header_timeout_protocol(seconds: float = DEFAULT_HEADER_TIMEOUT) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (as ``http="auto"`` picks it) with a header deadline."""
    base = _httptools_deadline() or _H11Deadline
    return type(base.__name__, (base,), {"header_timeout": float(seconds)})
