"""A keep server's volume usage, sent to its controller now and then and at
a clean stop (docs/usage.md, "Per volume"): the controller writes the rows
to the catalog's ``volume_usage``, so they outlive both processes.

There is no heartbeat to ride on (a keep server registers once), so this is
its own request: ``POST /api/v1/usage/volumes`` with the server's admin
token, every ``interval`` seconds. Rows the controller did not take are
kept and sent again with the next, up to a bound; a server killed without
a clean stop loses what it counted since its last report.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import Any

import httpx
from starlette.concurrency import run_in_threadpool

from warehouse.server.keepd.storage import VolumeSet

__all__ = ["UsageReporter"]

log = logging.getLogger("warehouse.keepd")

# Rows kept while the controller cannot be reached (a row per volume per report).
_MAX_PENDING = 10_000
_BATCH = 1000  # rows per request: the controller takes at most this many


class UsageReporter:
    def __init__(
        self, volumes: VolumeSet, client: httpx.AsyncClient, controller: str, token: str
    ) -> None:
        self.volumes = volumes
        self.client = client
        self.url = f"{controller.rstrip('/')}/api/v1/usage/volumes"
        self.token = token
        self.pending: list[dict[str, Any]] = []
        # Counting runs in a worker thread and files its rows itself, so
        # rows taken are never dropped by an await that was given up.
        self._counting = threading.Lock()
        self._stopping = asyncio.Event()

    def _count(self) -> None:
        with self._counting:
            self.pending.extend(self.volumes.usage_rows())
            if len(self.pending) > _MAX_PENDING:
                dropped = len(self.pending) - _MAX_PENDING
                log.warning("volume usage: %d unsent rows dropped", dropped)
                del self.pending[:dropped]

    async def send(self) -> bool:
        """Count now and send every row not yet taken; True if all were."""
        await run_in_threadpool(self._count)
        headers = {"Authorization": f"Bearer {self.token}"}
        while self.pending:
            batch = self.pending[:_BATCH]
            try:
                r = await self.client.post(self.url, json={"rows": batch}, headers=headers)
            except httpx.HTTPError as e:
                log.warning("volume usage: cannot reach %s: %s", self.url, e)
                return False
            if r.status_code >= 300:
                log.warning("volume usage: %s answered %d", self.url, r.status_code)
                return False
            del self.pending[: len(batch)]
        return True

    async def run(self, interval: float) -> None:
        """Send every ``interval`` seconds until ``stop``, then once more.

        Never cancelled in the middle of a report: a report the controller
        took, cut off before its answer, would be sent again and counted twice.
        """
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), interval)
            try:
                await self.send()
            except Exception:
                log.exception("volume usage: counting failed")

    def stop(self) -> None:
        self._stopping.set()
