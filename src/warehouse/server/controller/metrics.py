"""``/metrics`` on the controller, through ``prometheus_client``.

Request latencies as a histogram by method, route template and status class;
jobs and steps by state, counted from the catalog at each scrape; and the
process's own metrics. Each app has its own registry, so several controllers
in one process (the tests) do not share counters.
"""

from __future__ import annotations

from collections.abc import Iterator

import sqlalchemy as sa
from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Scope

from warehouse.catalog.db import connect
from warehouse.catalog.schema import jobs, steps
from warehouse.server.observe import Exchange, Observer

__all__ = ["TEXT_FORMAT", "ControllerMetrics", "LatencyMiddleware", "metrics_router"]

TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"  # what generate_latest writes


class _CatalogCollector(Collector):
    """Jobs and steps by state, read from the catalog when scraped."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        for table, name, what in ((jobs, "jobs", "Jobs"), (steps, "steps", "Steps of jobs")):
            family = GaugeMetricFamily(
                f"wh_controller_{name}", f"{what} in the catalog, by state.", labels=["state"]
            )
            query = sa.select(table.c.state, sa.func.count()).group_by(table.c.state)
            with connect(self.engine) as conn:
                for state, n in conn.execute(query):
                    family.add_metric([str(state)], int(n))
            yield family


class ControllerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.latency = Histogram(
            "wh_controller_request_seconds",
            "Time to answer an HTTP request, by method, route and status code.",
            ["method", "route", "code"],
            registry=self.registry,
        )
        ProcessCollector(registry=self.registry)
        self._catalog: _CatalogCollector | None = None

    def watch_catalog(self, engine: sa.Engine) -> None:
        if self._catalog is None:
            self._catalog = _CatalogCollector(engine)
            self.registry.register(self._catalog)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class LatencyMiddleware(Observer):
    """Times every HTTP answer; the route is the matched template, so labels stay few."""

    def __init__(self, app: ASGIApp, metrics: ControllerMetrics) -> None:
        super().__init__(app)
        self.metrics = metrics

    def observed(self, scope: Scope, exchange: Exchange) -> None:
        template = getattr(scope.get("route"), "path", None) or "(unmatched)"
        self.metrics.latency.labels(scope["method"], template, str(exchange.code)).observe(
            exchange.seconds
        )


def metrics_router() -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/metrics")
    async def metrics(request: Request) -> Response:
        """Open to all, as keepd's is: counts and timings, nothing named."""
        found: ControllerMetrics = request.app.state.metrics
        found.watch_catalog(request.app.state.controller.engine)
        body = await run_in_threadpool(found.render)
        return Response(body, media_type=TEXT_FORMAT)

    return router
