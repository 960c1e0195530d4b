"""Counters for ``/status`` and ``/metrics``, and the middleware that counts requests.

The counters live here (``/status`` reads them as JSON too); ``/metrics``
exposes them through ``prometheus_client`` (text format 0.0.4), with the
process's own metrics (CPU, memory, open files) beside them.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Scope

from warehouse.blocks.diskcache import configured_dir, read_stats
from warehouse.server.observe import Exchange, Observer

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
    device: str = ""  # "major:minor" of the file system (volumes may share one)
    # Blocks and their bytes on the volume as of the last whole index (GC
    # asks for one each run); None before.
    stored_blocks: int | None = None
    stored_bytes: int | None = None
    # Requests sent to an object store, by kind (HEAD, GET, PUT, COPY,
    # DELETE, LIST), since the server started; none for a directory.
    requests: tuple[tuple[str, int], ...] = ()


class _KeepCollector(Collector):
    """The keep server's counters and volume gauges, read at each scrape."""

    def __init__(self, m: Metrics, volumes: Sequence[VolumeGauge]) -> None:
        self.m = m
        self.volumes = volumes

    def collect(self) -> Iterator[Metric]:
        m = self.m
        with m.lock:
            requests = sorted(m.requests.items())
            totals = [
                ("bytes_in", "Bytes of block data received.", m.bytes_in),
                ("bytes_out", "Bytes of response bodies sent.", m.bytes_out),
                ("blocks_stored", "New blocks written to a volume.", m.blocks_stored),
                (
                    "corrupt_reads",
                    "Stored copies whose MD5 did not match on read.",
                    m.corrupt_reads,
                ),
            ]
        family = CounterMetricFamily(
            "wh_keepd_requests",
            "Requests answered, by method and status code.",
            labels=["method", "code"],
        )
        for (method, code), n in requests:
            family.add_metric([method, str(code)], n)
        yield family
        for name, help_text, value in totals:
            yield CounterMetricFamily(f"wh_keepd_{name}", help_text, value=value)
        free = GaugeMetricFamily(
            "wh_keepd_volume_free_bytes", "Bytes free on the volume.", labels=["volume", "device"]
        )
        total = GaugeMetricFamily(
            "wh_keepd_volume_total_bytes",
            "Size of the volume's file system.",
            labels=["volume", "device"],
        )
        stored = GaugeMetricFamily(
            "wh_keepd_volume_stored_bytes",
            "Bytes of blocks on the volume, as of its last whole index.",
            labels=["volume"],
        )
        blocks = GaugeMetricFamily(
            "wh_keepd_volume_stored_blocks",
            "Blocks on the volume, as of its last whole index.",
            labels=["volume"],
        )
        asked = CounterMetricFamily(
            "wh_keepd_volume_requests",
            "Requests sent to the volume's object store, by kind.",
            labels=["volume", "kind"],
        )
        for v in self.volumes:
            free.add_metric([v.path, v.device], v.free_bytes)
            total.add_metric([v.path, v.device], v.total_bytes)
            if v.stored_bytes is not None:
                stored.add_metric([v.path], v.stored_bytes)
            if v.stored_blocks is not None:
                blocks.add_metric([v.path], v.stored_blocks)
            for kind, n in v.requests:
                asked.add_metric([v.path, kind], n)
        yield from (free, total, stored, blocks, asked)


class _NodeCacheCollector(Collector):
    """The node's disk block cache (docs/s3.md, "The cache"), as its state
    file counts it for every process of this node that reads through it:
    keepd runs one per node, so it is the node's exporter. Nothing when no
    cache was made here."""

    def collect(self) -> Iterator[Metric]:
        root = configured_dir()
        if not (root / "state").exists():
            return
        used, entries, hits, misses = read_stats(root)
        for name, text, value in (
            ("hits", "Blocks read from the node's disk cache.", hits),
            ("misses", "Blocks the node's disk cache did not hold (or held bad).", misses),
        ):
            yield _labelled(CounterMetricFamily, name, text, str(root), value)
        yield _labelled(GaugeMetricFamily, "bytes", "Bytes in the disk cache.", str(root), used)
        yield _labelled(
            GaugeMetricFamily, "entries", "Blocks in the disk cache.", str(root), entries
        )


def _labelled(
    kind: type[CounterMetricFamily] | type[GaugeMetricFamily],
    name: str,
    text: str,
    root: str,
    value: int,
) -> Metric:
    family = kind(f"wh_block_cache_{name}", text, labels=["dir"])
    family.add_metric([root], value)
    return family


def render_prometheus(m: Metrics, volumes: Sequence[VolumeGauge]) -> str:
    """The Prometheus text of the counters, the volumes, the node's disk
    cache and this process."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_KeepCollector(m, volumes))
    registry.register(_NodeCacheCollector())
    ProcessCollector(registry=registry)
    return generate_latest(registry).decode()


class CountingMiddleware(Observer):
    """Counts every HTTP answer by method and status, and the bytes sent."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        super().__init__(app)
        self.metrics = metrics

    def observed(self, scope: Scope, exchange: Exchange) -> None:
        self.metrics.count_request(scope["method"], exchange.code, exchange.sent)
