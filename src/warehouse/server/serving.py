"""Run an ASGI app with uvicorn on a socket bound here, so port 0 works.

Binding the socket ourselves tells us the real port before the first request,
which a server needs to announce or register itself. ``serve`` runs in the
foreground until SIGTERM or SIGINT and then shuts down gracefully (exit
status 0, not death by the signal); ``ServerThread`` runs an app in a thread
for tests and embedding. Given a certificate and key (``Tls``), both speak
HTTPS only. Request headers not complete within ``header_timeout`` seconds
of a connection (or of a request's first byte) get 408 and the connection is
closed (``warehouse.server.headertimeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType

import uvicorn
import uvloop
from starlette.types import ASGIApp

from warehouse.errors import UsageError
from warehouse.server.headertimeout import DEFAULT_HEADER_TIMEOUT, header_timeout_protocol

__all__ = ["ServerThread", "Tls", "bind_socket", "parse_listen", "serve"]

GRACEFUL_TIMEOUT = 10
# Longer than our clients keep an idle connection (remote.blockhttp.IDLE_SECONDS):
# when both sides time out alike, a request sent just as the server closes the
# connection meets a reset.
KEEPALIVE_SECONDS = 30


@dataclass(frozen=True)
class Tls:
    """A server certificate (PEM, with its chain) and its private key (PEM)."""

    cert: Path
    key: Path

    @classmethod
    def from_options(cls, cert: Path | None, key: Path | None) -> Tls | None:
        """From ``--tls-cert``/``--tls-key``: both or neither; checked by loading them."""
        if cert is None and key is None:
            return None
        if cert is None or key is None:
            raise UsageError("--tls-cert and --tls-key go together")
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as e:
            raise UsageError(f"cannot use the certificate {cert} with the key {key}: {e}") from None
        return cls(cert, key)

    def options(self) -> list[str]:
        """The same as command-line options (for child servers)."""
        return ["--tls-cert", str(self.cert), "--tls-key", str(self.key)]


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6addr]:PORT`` for IPv6) as a host and a port number."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise UsageError(f"bad listen address {text!r}: want HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock


class _Server(uvicorn.Server):
    # Run once the server stops accepting, before it waits for connections to
    # close: e.g. stop child servers whose idle connections (TLS ones above
    # all, which wait for the peer's close_notify) would hold the shutdown.
    before_shutdown: Callable[[], None] | None = None

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.before_shutdown is not None:
            await asyncio.to_thread(self.before_shutdown)
        if self.config.is_ssl:
            # Closing a TLS connection waits for the client's close_notify,
            # which an idle kept-alive client never sends: drop idle ones.
            for conn in list(self.server_state.connections):
                cycle = getattr(conn, "cycle", None)
                transport = getattr(conn, "transport", None)
                if transport is not None and (cycle is None or cycle.response_complete):
                    transport.abort()
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # uvicorn re-raises the signal after shutting down, which would make a
        # clean stop look like death by SIGTERM; we only want the shutdown.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self._on_signal) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    def _on_signal(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        self.should_exit = True


def _make_server(
    app: ASGIApp, tls: Tls | None = None, header_timeout: float = DEFAULT_HEADER_TIMEOUT
) -> _Server:
    config = uvicorn.Config(
        app,
        http=header_timeout_protocol(header_timeout),
        ssl_certfile=None if tls is None else str(tls.cert),
        ssl_keyfile=None if tls is None else str(tls.key),
        log_config=None,  # the caller configures logging; stdout stays ours
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=GRACEFUL_TIMEOUT,
        timeout_keep_alive=KEEPALIVE_SECONDS,
    )
    return _Server(config)


async def _run(
    server: _Server, sock: socket.socket, on_ready: Callable[[int], None] | None
) -> None:
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task  # start-up failed: let its error out
            raise RuntimeError("the server stopped during start-up")
        await asyncio.sleep(0.01)
    if on_ready is not None:
        try:
            # In a thread: on_ready may block (e.g. register with a controller).
            await asyncio.to_thread(on_ready, sock.getsockname()[1])
        except BaseException:
            server.should_exit = True
            await task
            raise
    await task


def _run_loop(main: Coroutine[None, None, None]) -> None:
    # uvloop, as uvicorn's own start-up would choose: asyncio's transports
    # copy a large body into a buffer and shift it down as it drains (two
    # copies of every 64 MiB block sent); uvloop's send from the body itself.
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


def serve(
    app: ASGIApp,
    host: str,
    port: int,
    on_ready: Callable[[int], None] | None = None,
    tls: Tls | None = None,
    before_shutdown: Callable[[], None] | None = None,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
) -> None:
    """Serve ``app`` until SIGTERM/SIGINT; ``on_ready(real_port)`` runs once it
    accepts, ``before_shutdown()`` once it is told to stop."""
    sock = bind_socket(host, port)
    server = _make_server(app, tls, header_timeout)
    server.before_shutdown = before_shutdown
    try:
        _run_loop(_run(server, sock, on_ready))
    finally:
        sock.close()


class ServerThread:
    """``app`` served on 127.0.0.1 (or ``host``) in a thread; a context manager."""

    def __init__(
        self,
        app: ASGIApp,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: Tls | None = None,
        header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    ) -> None:
        self.host = host
        self.tls = tls
        self._sock = bind_socket(host, port)
        self.port: int = self._sock.getsockname()[1]
        self._server = _make_server(app, tls, header_timeout)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name=f"server-{self.port}", daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'http' if self.tls is None else 'https'}://{host}:{self.port}"

    def _main(self) -> None:
        try:
            _run_loop(self._server.serve(sockets=[self._sock]))
        except BaseException as e:  # reported by start()
            self._error = e

    def start(self, timeout: float = 10.0) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started and self._thread.is_alive():
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server did not start within {timeout} s")
            time.sleep(0.01)
        if not self._server.started:
            raise RuntimeError(f"server did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(GRACEFUL_TIMEOUT + 5)
        self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
