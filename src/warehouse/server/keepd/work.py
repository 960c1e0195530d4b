"""Background work: the trash and pull lists GC sends, and the volume cleaner.

A list sent by GC replaces the previous one (GC sends its whole current
view each run); workers take items one at a time, so the queue length the
status page shows counts the items being worked on as well as those waiting.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Generic, TypeVar

import httpx
from starlette.concurrency import run_in_threadpool

from warehouse.blocks.locator import Locator
from warehouse.server.keepd.rules import PullItem, TrashItem
from warehouse.server.keepd.storage import VolumeSet

__all__ = ["WorkQueue", "clean_volumes", "pull_worker", "trash_worker"]

log = logging.getLogger("warehouse.keepd")
T = TypeVar("T")


class WorkQueue(Generic[T]):
    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._busy = 0
        self._ready = asyncio.Event()

    def replace(self, items: list[T]) -> None:
        self._items = deque(items)
        if self._items:
            self._ready.set()

    async def take(self) -> T:
        while not self._items:
            self._ready.clear()
            await self._ready.wait()
        self._busy += 1
        return self._items.popleft()

    def done(self) -> None:
        self._busy -= 1

    def __len__(self) -> int:
        return len(self._items) + self._busy


async def trash_worker(queue: WorkQueue[TrashItem], volumes: VolumeSet) -> None:
    while True:
        item = await queue.take()
        try:
            n = await run_in_threadpool(volumes.trash, item)
            log.info("trash %s (mtime %d): %d copies", item.locator, item.block_mtime, n)
        except Exception:
            log.exception("trashing %s failed", item.locator)
        finally:
            queue.done()


async def pull_one(
    item: PullItem, volumes: VolumeSet, client: httpx.AsyncClient, token: str | None
) -> bool:
    """Fetch a block from the first server that has a good copy and store it here."""
    loc = item.locator
    if loc.is_empty or await run_in_threadpool(volumes.stat, loc) is not None:
        return True
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    for server in item.servers:
        try:
            r = await client.get(f"{server}/{loc.key}", headers=headers)
        except httpx.HTTPError as e:
            log.warning("pull %s from %s: %s", loc, server, e)
            continue
        if r.status_code != 200:
            log.warning("pull %s from %s: status %d", loc, server, r.status_code)
            continue
        data = r.content
        if Locator.for_data(data).key != loc.key:
            log.warning("pull %s from %s: the data does not match the locator", loc, server)
            continue
        await run_in_threadpool(volumes.store, data)
        volumes.metrics.add(bytes_in=len(data))
        return True
    log.error("pull %s: no server in %s had a good copy", loc, list(item.servers))
    return False


async def pull_worker(
    queue: WorkQueue[PullItem], volumes: VolumeSet, client: httpx.AsyncClient, token: str | None
) -> None:
    while True:
        item = await queue.take()
        try:
            await pull_one(item, volumes, client, token)
        except Exception:
            log.exception("pulling %s failed", item.locator)
        finally:
            queue.done()


async def clean_volumes(volumes: VolumeSet, interval: float, stale_age: float) -> None:
    while True:
        try:
            await run_in_threadpool(volumes.clean, stale_age)
        except Exception:
            log.exception("cleaning the volumes failed")
        await asyncio.sleep(interval)
