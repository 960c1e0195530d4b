"""The manager's changes written down: blocks stored, then rows committed.

A batch is one flush's changes, ``(job_rows, new_steps, step_states,
step_results, collections, blocks)``: the ``save_turn`` arguments and the
blocks of the manifests (logs, outputs) its rows name. Two stages, one
thread each: the storer stores (and flushes) a batch's blocks, then the
writer commits its rows; the next batch's blocks reach the disk while the
last one commits. Each takes every batch waiting for it at once: one flush,
one transaction for several turns when the disk is slower than the turns.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from warehouse.jobs import jobstore
from warehouse.jobs.jobhost import JobHost

__all__ = ["BatchWriter"]


class BatchWriter:
    def __init__(self, wh: JobHost) -> None:
        self.wh = wh
        self.storer = ThreadPoolExecutor(1, thread_name_prefix="wh-jobs-storer")
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="wh-jobs-writer")
        self._queued: list[tuple[tuple[Any, ...], Future[None]]] = []  # for the storer
        self._stored: list[tuple[tuple[Any, ...], Future[None]]] = []  # for the writer
        self._queued_lock = threading.Lock()

    def hand(self, batch: tuple[Any, ...]) -> Future[None]:
        """Queue ``batch``; the future is done once its rows are committed."""
        written: Future[None] = Future()
        with self._queued_lock:
            self._queued.append((batch, written))
        self.storer.submit(self._store_queued)
        return written

    def _store_queued(self) -> None:
        """The storer: the blocks of every batch waiting, durable before the writer
        may commit the rows naming them (logs and outputs)."""
        with self._queued_lock:
            taken, self._queued = self._queued, []
        if not taken:
            return  # taken with an earlier one
        try:
            store = self.wh.store
            for batch, _ in taken:
                for block in batch[-1]:
                    store.put(block)
            store.flush()
        except BaseException as e:
            for _, fut in taken:
                fut.set_exception(e)
            return
        with self._queued_lock:
            self._stored.extend(taken)
        self.writer.submit(self._write_stored)

    def _write_stored(self) -> None:
        """The writer: every stored batch waiting, in one transaction, in order."""
        with self._queued_lock:
            taken, self._stored = self._stored, []
        if not taken:
            return
        try:
            job_rows, new, states, results, made, _ = _merged([batch for batch, _ in taken])
            jobstore.save_turn(self.wh.engine, job_rows, new, states, results, collections=made)
        except BaseException as e:
            for _, fut in taken:
                fut.set_exception(e)
            return
        for _, fut in taken:
            fut.set_result(None)

    def shutdown(self) -> None:
        self.storer.shutdown()
        self.writer.shutdown()


def _merged(batches: list[tuple[Any, ...]]) -> tuple[Any, ...]:
    """Several turns' batches as one, in order: a later change of a row wins."""
    if len(batches) == 1:
        return batches[0]
    job_rows: dict[int, dict[str, Any]] = {}
    new: list[Any] = []
    states: list[Any] = []
    results: list[Any] = []
    made: list[Any] = []
    blocks: list[bytes] = []
    for rows, b_new, b_states, b_results, b_made, b_blocks in batches:
        for job_id, values in rows.items():
            job_rows.setdefault(job_id, {}).update(values)
        new.extend(b_new)
        states.extend(b_states)
        results.extend(b_results)
        made.extend(b_made)
        blocks.extend(b_blocks)
    return job_rows, new, states, results, made, blocks
