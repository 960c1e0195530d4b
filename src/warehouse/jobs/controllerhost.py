"""Jobs on a controller: the catalog and the keep servers as a job host, and the
manager running in a background thread.

``CatalogWarehouse`` is the warehouse operations over a catalog engine and a
block store (the controller's own ``KeepClient``, which signs its reads).
``ControllerHost`` adds what steps need: ``WH_URL`` and a token for the job's
submitter (made when the manager takes the job up, revoked when the job
ends, expiring after ``token_ttl`` at the latest), and it accepts a step's
fragment only if every block is signed for that token and stored on the keep
servers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import sqlalchemy as sa

from warehouse import catalog
from warehouse.base import BlockWrites, WarehouseBase
from warehouse.blocks.signing import DEFAULT_SIGNATURE_TTL, Check, check_signature
from warehouse.blocks.store import BlockStore
from warehouse.catalog.auth import JOB_TOKEN_LABEL, revoke_label, revoke_secret
from warehouse.catalog.db import connect
from warehouse.catalog.grants import name_level_for, require_read
from warehouse.clusters.placer import Placer
from warehouse.collection.records import load_manifest, store_manifest
from warehouse.errors import ForbiddenError, NotFoundError
from warehouse.gitcmd import DEFAULT_ALLOW
from warehouse.jobs.executors import Executor
from warehouse.jobs.jobrecords import JobRecord
from warehouse.jobs.manager import Landed, Manager
from warehouse.jobs.runmanager import make_waiting
from warehouse.jobs.sandbox import Sandbox
from warehouse.keys import Key
from warehouse.limits import Policy
from warehouse.manifest import Manifest
from warehouse.permissions import Level

__all__ = [
    "JOB_TOKEN_TTL",
    "CatalogWarehouse",
    "ControllerHost",
    "ManagerThread",
]

log = logging.getLogger("warehouse.jobs")

JOB_TOKEN_TTL = 7 * 24 * 3600


class CatalogWarehouse(WarehouseBase):
    """Collections and names straight on the catalog, blocks through ``keep()``."""

    def __init__(
        self,
        engine: sa.Engine,
        keep: Callable[[], BlockStore],
        user: str,
        git_roots: Sequence[str] = (),
        git_allow: Sequence[str] = DEFAULT_ALLOW,
        *,
        check_reads: bool = False,
    ) -> None:
        self.engine = engine
        self._keep = keep
        self.user = user
        # Acting for a user who asked the API (a job or a workflow to start):
        # every key resolved must be a collection that user may read
        # (docs/permissions.md). The manager's own host reads everything.
        self.check_reads = check_reads
        # On the controller's disk, only these hold repositories a user may name;
        # by URL, only these schemes and hosts, fetched with a clean environment.
        self.git_roots = tuple(git_roots)
        self.git_allow = tuple(git_allow)

    @property
    def store(self) -> BlockStore:  # type: ignore[override] # the keep servers now
        return self._keep()

    def _record(
        self, manifest: Manifest, file_md5s: Mapping[str, str] | None, writes: BlockWrites
    ) -> catalog.CollectionRecord:
        store = self.store
        for loc in manifest.blocks():
            if not loc.is_empty and not store.exists(loc.without_hints()):
                raise NotFoundError(f"block {loc.key} of the manifest is not stored")
        catalog.record_block_writes(self.engine, self.user, writes)
        return store_manifest(store, self.engine, manifest, self.user, file_md5s)

    def _collection(self, pdh: str) -> tuple[Manifest, dict[str, str] | None]:
        return load_manifest(self.store, self.engine, pdh, self.user)

    def _shown_name(self, name: str) -> catalog.NameRecord | None:
        # Acting for a user: a name it may not read is no name (a key starting
        # with it splits as one naming nothing, worded alike).
        record = super()._shown_name(name)
        if record is None or not self.check_reads:
            return record
        with connect(self.engine) as conn:
            level, _ = name_level_for(conn, self.user, False, name)
        return record if level >= Level.READ else None

    def resolve(self, key: str | Key) -> str:
        k = self.key(key)
        if self.check_reads and not k.is_pdh:
            # A name the user may not read answers as one that does not exist:
            # resolving it would word the refusal with its PDH.
            name = catalog.check_name(k.head)
            with connect(self.engine) as conn:
                level, exists = name_level_for(conn, self.user, False, name)
            if exists and level < Level.READ:
                raise NotFoundError(f"no name {name!r}")
        pdh = super().resolve(k)
        if self.check_reads:
            require_read(self.engine, self.user, False, pdh)
        return pdh

    def get_name(self, name: str) -> catalog.NameRecord:
        return catalog.get_name(self.engine, name)

    def set_name(
        self, name: str, pdh: str, *, expect: str | None, create: bool = False
    ) -> catalog.NameRecord:
        return catalog.set_name(
            self.engine, name, pdh, expect=expect, create=create, user=self.user
        )


class ControllerHost(CatalogWarehouse):
    """The job host of a controller: steps reach it at ``url`` with a job token."""

    def __init__(
        self,
        engine: sa.Engine,
        keep: Callable[[], BlockStore],
        *,
        user: str,
        url: str,
        signing_key: bytes,
        work_dir: Path,
        signature_ttl: int = DEFAULT_SIGNATURE_TTL,
        token_ttl: float = JOB_TOKEN_TTL,
    ) -> None:
        super().__init__(engine, keep, user)
        self.url = url
        self.signing_key = signing_key
        self.signature_ttl = signature_ttl
        self.token_ttl = token_ttl
        self.work_dir = work_dir
        self._tokens: dict[int, str] = {}

    def step_location(self, record: JobRecord) -> dict[str, str]:
        label = f"{JOB_TOKEN_LABEL}{record.id}"
        # One token per job: one a stopped controller made is revoked now.
        revoke_label(self.engine, record.submitted_by, label)
        token = catalog.create_token(
            self.engine, record.submitted_by, label=label, ttl=self.token_ttl
        )
        self._tokens[record.id] = token
        return {"WH_URL": self.url, "WH_TOKEN": token}

    def check_fragment(self, job: int, text: str) -> str:
        manifest = Manifest.parse(text)
        token = self._tokens.get(job, "")
        store = self.store
        for loc in manifest.blocks():
            if loc.is_empty:
                continue
            verdict = check_signature(loc, token, self.signing_key, self.signature_ttl)
            # LEGACY (size not signed) is enough here: the size is checked just below.
            if verdict not in (Check.OK, Check.LEGACY):
                raise ForbiddenError(f"block {loc.key} is not signed for the job's token")
            if not store.exists(loc.without_hints()):
                raise NotFoundError(f"block {loc.key} of the step's fragment is not stored")
        return manifest.format()

    def release(self, job: int) -> None:
        """The job ended (complete, failed or cancelled): its token stops working."""
        token = self._tokens.pop(job, None)
        if token is not None:
            revoke_secret(self.engine, token)


class ManagerThread:
    """The job manager in a background thread until ``stop``; restarted if it fails."""

    def __init__(
        self,
        host: ControllerHost,
        executor: str,
        *,
        cpus: int | None = None,
        sandbox: Sandbox | None = None,
        placer: Placer | None = None,
        per_user: int = 0,
        policy: Policy | None = None,
        on_landed: Callable[[list[Landed]], None] | None = None,
    ) -> None:
        self.host = host
        # Called from this thread with the jobs whose finished rows were just
        # written (a controller's workflow thread is woken by it).
        self.on_landed = on_landed
        self.executor_name = executor
        self.per_user = per_user  # running steps of one user at once (0: any)
        self.policy = policy  # each sandboxed step's limits (warehouse.limits)
        self.cpus = cpus
        self.sandbox = sandbox
        # Placement (docs/clusters.md): only with a host map naming workers.
        self.placer = placer
        self._workers = dict(placer.host_map.workers) if placer is not None else None
        self.executor: Executor | None = self._make_executor()
        self._stop = threading.Event()
        self._woken = threading.Event()  # jobs were submitted: refresh now (``wake``)
        self._thread = threading.Thread(target=self._run, name="wh-job-manager", daemon=True)

    def start(self) -> ManagerThread:
        self._thread.start()
        return self

    def wake(self) -> None:
        """Jobs were just submitted (from any thread): the manager looks for them
        now rather than at its next refresh (every 0.2 s)."""
        self._woken.set()

    def _idle(self, manager: Manager) -> bool:
        quiet = manager.sched.idle() and not manager.executor.running()
        # Nothing to do: no busy loop, but woken by new jobs or the stop.
        if self._woken.is_set() or (not self._stop.is_set() and quiet and self._woken.wait(0.1)):
            self._woken.clear()
            manager.refresh_soon()
        return self._stop.is_set()

    def _make_executor(self) -> Executor:
        """By the rule of every job manager (``make_waiting``): a Dask scheduler
        that does not answer is waited for ``dask_wait`` seconds, then the
        jobs waiting for it fail and the error is raised."""
        return make_waiting(
            self.host.engine,
            self.executor_name,
            cpus=self.cpus,
            sandbox=self.sandbox,
            owner=str(self.host.work_dir),
            worker_hosts=self._workers,
            policy=self.policy,
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.executor is None:
                try:
                    executor = self._make_executor()
                except Exception:
                    # Its jobs were failed; later ones are for a scheduler back up.
                    log.exception("the job manager's executor cannot be made; trying again")
                    self._stop.wait(1.0)
                    continue
                if self._stop.is_set():  # stopped while it waited: nothing left to run it
                    executor.close()
                    break
                self.executor = executor
            manager = Manager(self.host, self.executor, self.executor_name, placer=self.placer)
            manager.sched.per_user = self.per_user
            manager.on_landed = self.on_landed
            try:
                manager.run(self._idle)
            except Exception:
                log.exception("the job manager failed; starting it again")
                self.executor.close()
                self.executor = None
                self._stop.wait(1.0)
            finally:
                manager.close()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the loop; running steps are killed (a restart runs them again)."""
        self._stop.set()
        self._woken.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self.executor is not None:
            self.executor.close()
