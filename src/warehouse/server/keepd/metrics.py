"""Counters for ``/status`` and ``/metrics``, and the middleware that counts requests.

The Prometheus text format (version 0.0.4) is simple enough to write by
hand: ``# HELP`` and ``# TYPE`` lines, then ``name{label="value"} number``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CountingMiddleware", "Metrics", "VolumeGauge", "render_prometheus"]


@dataclass
class Metrics:
    requests: Counter[tuple[str, int]] = field(default_factory=Counter)
    bytes_in: int = 0
    bytes_out: int = 0
    blocks_stored: int = 0
    corrupt_reads: int = 0
    # Counted from the event loop and from worker threads alike.
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **amounts: int) -> None:
        with self.lock:
            for name, n in amounts.items():
                setattr(self, name, getattr(self, name) + n)

    def count_request(self, method: str, status: int, sent: int) -> None:
        with self.lock:
            self.requests[method, status] += 1
            self.bytes_out += sent

    def requests_by_method(self) -> dict[str, dict[str, int]]:
        with self.lock:
            out: dict[str, dict[str, int]] = {}
            for (method, status), n in sorted(self.requests.items()):
                out.setdefault(method, {})[str(status)] = n
            return out


@dataclass(frozen=True, slots=True)
class VolumeGauge:
    path: str
    free_bytes: int
    total_bytes: int


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_prometheus(m: Metrics, volumes: Sequence[VolumeGauge]) -> str:
    with m.lock:
        requests = sorted(m.requests.items())
        totals = [
            ("bytes_in", "Bytes of block data received.", m.bytes_in),
            ("bytes_out", "Bytes of response bodies sent.", m.bytes_out),
            ("blocks_stored", "New blocks written to a volume.", m.blocks_stored),
            ("corrupt_reads", "Stored copies whose MD5 did not match on read.", m.corrupt_reads),
        ]
    lines = [
        "# HELP wh_keepd_requests_total Requests answered, by method and status code.",
        "# TYPE wh_keepd_requests_total counter",
    ]
    for (method, code), n in requests:
        lines.append(f'wh_keepd_requests_total{{method="{_label(method)}",code="{code}"}} {n}')
    for name, help_text, value in totals:
        lines += [
            f"# HELP wh_keepd_{name}_total {help_text}",
            f"# TYPE wh_keepd_{name}_total counter",
            f"wh_keepd_{name}_total {value}",
        ]
    for name, help_text in (
        ("free", "Bytes free on the volume."),
        ("total", "Size of the volume's file system."),
    ):
        lines += [
            f"# HELP wh_keepd_volume_{name}_bytes {help_text}",
            f"# TYPE wh_keepd_volume_{name}_bytes gauge",
        ]
        for v in volumes:
            value = v.free_bytes if name == "free" else v.total_bytes
            lines.append(f'wh_keepd_volume_{name}_bytes{{volume="{_label(v.path)}"}} {value}')
    return "\n".join(lines) + "\n"


class CountingMiddleware:
    """Counts every HTTP answer by method and status, and the bytes sent."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0
        sent = 0

        async def counting_send(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            # An exception before any answer becomes a 500 further out.
            self.metrics.count_request(scope["method"], status or 500, sent)
