"""A bell rung when workflow runs may have changed, for requests waiting on one.

``GET /api/v1/workflows/{id}?since=V&wait=S`` (docs/workflows.md, "Following
a run") holds its answer until the run's version passes ``V``. The
controller's workflow thread rings this bell after a pass that changed a
run; a waiting request hears it on the server's event loop, holding no
thread meanwhile. A ring says only "look again": the waiter reads the run's
version from the catalog, and also looks by itself every little while (a
run written by another process rings nothing here).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

__all__ = ["Ear", "RunBell"]


class Ear:
    """One waiter's hearing: a ring while it was reading is kept for its next wait."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()

    async def wait(self, timeout: float) -> bool:
        """Until a ring (or one heard since the last wait) or ``timeout`` seconds."""
        try:
            await asyncio.wait_for(self.event.wait(), max(timeout, 0.0))
        except TimeoutError:
            return False
        self.event.clear()
        return True


class RunBell:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ears: set[Ear] = set()

    def ring(self) -> None:
        """From any thread: every waiter looks again."""
        with self._lock:
            ears = list(self._ears)
        for ear in ears:
            with contextlib.suppress(RuntimeError):  # its loop has closed: nobody waits
                ear.loop.call_soon_threadsafe(ear.event.set)

    @contextlib.contextmanager
    def listen(self) -> Iterator[Ear]:
        """Hear rings from now on (before the first read, so none is missed)."""
        ear = Ear()
        with self._lock:
            self._ears.add(ear)
        try:
            yield ear
        finally:
            with self._lock:
                self._ears.discard(ear)
