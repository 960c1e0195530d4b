"""The Dask executor: each step runs as a subprocess inside a task on a Dask worker.

Connects to a scheduler address, or starts a ``LocalCluster`` of worker
processes. A worker must see the same ``WH_HOME`` (a shared file system) or,
later, reach the controller. Workers that advertise the resources ``cpus``
and ``memory`` (``dask worker --resources "cpus=8 memory=32e9"``; the
LocalCluster started here does) get each step's request as task resources,
so Dask places it where it fits. The manager keeps up to ``queue_factor``
steps per worker thread submitted, so workers never wait on a round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import queue
import threading
import time
import uuid
from typing import Any

import distributed

from warehouse.clusters.placement import LabelledWorkers
from warehouse.errors import UsageError, WarehouseError
from warehouse.jobs.executors import Finished, Launch, RunKey, run_step, stop_steps
from warehouse.jobs.model import Resources

__all__ = ["DaskExecutor", "check_address", "check_scheduler"]

log = logging.getLogger("warehouse.jobs")

MAX_CHUNK = 32  # steps run by one Dask task at most
CONNECT_SECONDS = 10.0  # a scheduler that has not answered by then is not there

_dask: Any = distributed  # untyped


def _tasks(launches: list[Launch], sender: str, label: str = "") -> list[Finished]:
    try:
        worker = _dask.get_worker().address
    except ValueError:  # not in a worker (never in a real cluster)
        worker = ""
    if label:  # the step's host label, whose keep server its reads prefer
        launches = [dataclasses.replace(x, env={**x.env, "WH_HOST": label}) for x in launches]
    return [dataclasses.replace(run_step(launch, sender), worker=worker) for launch in launches]


def _tasks_labelled(launches: list[Launch], sender: str, hosts: dict[str, str]) -> list[Finished]:
    try:
        here = _dask.get_worker()
        label = hosts.get(here.address) or hosts.get(str(here.name), "")
    except ValueError:
        label = ""
    return _tasks(launches, sender, label)


async def _identity(address: str, timeout: float) -> Any:
    comm = await _dask.comm.connect(address, timeout=timeout)
    try:
        await comm.write({"op": "identity"})
        return await comm.read()
    finally:
        comm.abort()


def check_address(address: str) -> None:
    """Refuse a malformed scheduler address, or a host name that resolves to
    nothing, without connecting (``wh job submit`` checks it before the job is
    recorded)."""
    try:
        _dask.comm.parse_address(address)
        _dask.comm.resolve_address(address)
    except (ValueError, TypeError) as e:
        raise UsageError(f"bad Dask scheduler address {address!r}: {e}") from None
    except OSError as e:
        raise WarehouseError(f"no Dask scheduler at {address}: {e}") from None


def check_scheduler(address: str, timeout: float = CONNECT_SECONDS) -> None:
    """Refuse ``address`` unless a Dask scheduler answers there within ``timeout``.

    The client alone waits forever on a port that accepts and never answers
    in Dask's protocol (an HTTP server, say), and a malformed address ends in
    a traceback and a minute's wait while the half-made client closes."""
    check_address(address)
    try:
        who = asyncio.run(asyncio.wait_for(_identity(address, timeout), timeout))
    except (ValueError, TypeError) as e:
        raise UsageError(f"bad Dask scheduler address {address!r}: {e}") from None
    except (OSError, _dask.comm.CommClosedError) as e:
        why = str(e) or "no answer"
        raise WarehouseError(
            f"no Dask scheduler answers at {address} within {timeout:g} s ({why})"
        ) from None
    kind = who.get("type") if isinstance(who, dict) else None
    if kind != "Scheduler":
        raise WarehouseError(
            f"{address} is not a Dask scheduler (it answered as {kind or 'something else'})"
        )


async def _stop_here(keys: list[RunKey]) -> int:
    # A coroutine: client.run may then send it without waiting for the answer.
    return stop_steps(keys)


class DaskExecutor(LabelledWorkers):
    def __init__(
        self,
        address: str | None = None,
        *,
        workers: int | None = None,
        queue_factor: int = 64,
        worker_hosts: dict[str, str] | None = None,
    ) -> None:
        self._cluster: Any = None
        if address is None:
            n = workers or len(os.sched_getaffinity(0))
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            self._cluster = _dask.LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                # Even without a dashboard the scheduler serves its health
                # routes, on 8787 unless told: a second cluster on the machine
                # would then warn and move. Any free local port instead.
                dashboard_address="127.0.0.1:0",
                resources={"cpus": 1, "memory": total // n},
                memory_limit=0,
            )
            address = self._cluster.scheduler_address
        else:
            check_scheduler(address)
        self.address = address
        self.client: Any = _dask.Client(address, set_as_default=False, timeout=CONNECT_SECONDS)
        found = self.client.scheduler_info(n_workers=-1)["workers"]
        info = found.values()
        # Placement: each worker's host label, by its address or its name.
        labels = worker_hosts or {}
        self.worker_hosts: dict[str, str] = {
            a: labels.get(a) or labels.get(str(w.get("name")), "")
            for a, w in found.items()
            if labels.get(a) or labels.get(str(w.get("name")))
        }
        self._declared = {k for w in info for k in (w.get("resources") or {})}
        threads = sum(w["nthreads"] for w in info) or 1
        self._threads = threads
        cpus = [int((w.get("resources") or {}).get("cpus", w["nthreads"])) for w in info]
        mems = [
            int((w.get("resources") or {}).get("memory", w.get("memory_limit") or 0)) for w in info
        ]
        self.largest = Resources(max(cpus, default=1), max(mems, default=0) or 2**62)
        self.capacity = Resources(
            max(threads * queue_factor, 1), (sum(mems) or 2**62) * queue_factor
        )
        self._futures: dict[tuple[int, int], Any] = {}
        self._pending: list[Launch] = []
        # A chunk and its future once done, or a step stopped before it was sent.
        self._done: queue.SimpleQueue[tuple[list[Launch], Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._chunks: dict[str, list[Launch]] = {}  # by task key
        self._stopped: dict[str, set[tuple[int, int]]] = {}  # steps of a chunk told to stop
        self._stops: list[RunKey] = []  # to tell the workers at the next turn
        self._id = uuid.uuid4().hex  # names our stop requests among other managers

    def _resources(self, request: Resources) -> dict[str, float] | None:
        wanted = {"cpus": request.cpus, "memory": request.memory}
        chosen = {k: float(v) for k, v in wanted.items() if k in self._declared and v}
        return chosen or None

    def start(self, launch: Launch) -> None:
        # Gathered and sent in one client.map per turn: a submit per step
        # costs the manager more than the step costs the worker.
        self._pending.append(launch)

    def _send(self) -> None:
        pending, self._pending = self._pending, []
        # One group per job and resource request; a big group is cut into
        # chunks run by one task each, so tiny steps do not each pay a task's
        # round trip. Cancelling a chunk only touches steps of its own job.
        # With a host map, also one group per preferred host (docs/clusters.md).
        groups: dict[tuple[int, tuple[tuple[str, float], ...], tuple[str, ...]], list[Launch]] = {}
        for launch in pending:
            request = self._resources(launch.request) or {}
            prefer = self.prefer(launch)
            key = (launch.job, tuple(sorted(request.items())), prefer)
            groups.setdefault(key, []).append(launch)
        for (_, wanted, prefer), launches in groups.items():
            size = max(1, min(MAX_CHUNK, len(launches) // self._threads))
            chunks = [launches[i : i + size] for i in range(0, len(launches), size)]
            keys = [
                f"wh-steps-{c[0].job}-{c[0].step}-{len(c)}-{uuid.uuid4().hex[:8]}" for c in chunks
            ]
            labelled = bool(self.worker_hosts)
            futures = self.client.map(
                _tasks_labelled if labelled else _tasks,
                chunks,
                [self._id] * len(chunks),
                *([[self.worker_hosts] * len(chunks)] if labelled else []),
                key=keys,
                pure=False,
                resources=dict(wanted) or None,
                # A preference, not a rule: elsewhere when those workers are gone.
                workers=list(prefer) or None,
                allow_other_workers=bool(prefer),
            )
            for chunk, fut in zip(chunks, futures, strict=True):
                with self._lock:
                    self._chunks[fut.key] = chunk
                    for launch in chunk:
                        self._futures[(launch.job, launch.step)] = fut
                fut.add_done_callback(lambda f, chunk=chunk: self._chunk_done(chunk, f))

    def _chunk_done(self, chunk: list[Launch], fut: Any) -> None:
        self._done.put((chunk, fut))

    def poll(self, timeout: float) -> list[Finished]:
        if self.client.status in ("closing", "closed"):
            # The client gave up reconnecting to a scheduler that went away:
            # its tasks' futures never finish, so waiting would wait for ever.
            # The manager stops; its steps run again when one starts.
            raise WarehouseError(
                f"lost the Dask scheduler at {self.address}: "
                "start the manager again once it is back"
            )
        self._send_stops()
        if self._pending:
            self._send()
        try:
            items = [self._done.get(timeout=timeout) if timeout > 0 else self._done.get_nowait()]
        except queue.Empty:
            return []
        while True:
            try:
                items.append(self._done.get_nowait())
            except queue.Empty:
                break
        # One gather for every chunk that finished: a result fetched per step
        # is a round trip to the worker each (and a chunk's whole list again).
        finished = [fut for _, fut in items if not isinstance(fut, Finished)]
        finished = [fut for fut in finished if fut.status == "finished"]
        try:
            results = dict(zip(finished, self.client.gather(finished), strict=True))
        except Exception:  # e.g. a result lost with its worker: one by one
            results = {}
            for fut in finished:
                with contextlib.suppress(Exception):
                    results[fut] = fut.result()
        out: list[Finished] = []
        for chunk, done in items:
            if isinstance(done, Finished):  # stopped before it was sent
                out.append(done)
                continue
            with self._lock:
                for launch in chunk:
                    if self._futures.get((launch.job, launch.step)) is done:
                        del self._futures[(launch.job, launch.step)]
                self._chunks.pop(done.key, None)
                self._stopped.pop(done.key, None)
            if done in results:
                out.extend(results[done])
            else:
                out.extend(self._lost(launch, done) for launch in chunk)
        return out

    @staticmethod
    def _lost(launch: Launch, fut: Any) -> Finished:
        try:
            error = "cancelled" if fut.cancelled() else repr(fut.exception())
        except Exception as e:  # the task's outcome itself is gone
            error = repr(e)
        log = f"wh: the Dask task of this step did not finish: {error}\n".encode()
        now = time.time()
        return Finished(launch.job, launch.step, launch.attempt, -9, "dask", now, now, log, "")

    def kill(self, job: int, step: int) -> None:
        for launch in [x for x in self._pending if (x.job, x.step) == (job, step)]:
            self._pending.remove(launch)
            now = time.time()
            log = b"wh: the step was stopped before it was sent to Dask\n"
            stopped = Finished(job, step, launch.attempt, -9, "dask", now, now, log, "")
            self._done.put_nowait(([launch], stopped))
        with self._lock:
            fut: Any = self._futures.get((job, step))
            if fut is None:
                return
            chunk = self._chunks[fut.key]
            attempt = next(x.attempt for x in chunk if (x.job, x.step) == (job, step))
            self._stops.append((self._id, job, step, attempt))
            told = self._stopped.setdefault(fut.key, set())
            told.add((job, step))
            whole = len(told) == len(chunk)
        # A task cannot be interrupted: the worker kills the step's process
        # (stop_steps, sent at the next turn) and the task goes on to the rest
        # of its chunk. Only a chunk all of whose steps stop is cancelled.
        if whole:
            fut.cancel()

    def _send_stops(self) -> None:
        with self._lock:
            stops, self._stops = self._stops, []
        if not stops:
            return
        try:
            # A worker that is gone has no step of ours left to stop.
            self.client.run(_stop_here, stops, wait=False, on_error="ignore")
        except Exception:  # the scheduler itself: the steps finish and are ignored
            log.warning("could not tell the Dask workers to stop %d steps", len(stops))

    def running(self) -> int:
        with self._lock:
            return len(self._futures) + len(self._pending)

    def close(self) -> None:
        # As the local executor does: no step of ours goes on running.
        with self._lock:
            self._stops.extend(
                (self._id, x.job, x.step, x.attempt) for c in self._chunks.values() for x in c
            )
        self._send_stops()
        for fut in list(self._futures.values()):
            with contextlib.suppress(Exception):  # a client already closed
                fut.cancel()
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()
