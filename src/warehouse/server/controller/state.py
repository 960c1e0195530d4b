"""What the controller holds while it runs: the catalog, keys, its own token."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from warehouse import catalog
from warehouse.blocks import Locator
from warehouse.blocks.nodecache import configured_caches
from warehouse.blocks.signing import DEFAULT_SIGNATURE_TTL, sign
from warehouse.blocks.volume import DEFAULT_TRASH_LIFETIME
from warehouse.clusters.placement import HostMap
from warehouse.errors import UsageError
from warehouse.gitcmd import DEFAULT_ALLOW
from warehouse.limits import Policy
from warehouse.remote.keepclient import KeepClient
from warehouse.remote.probe import Service
from warehouse.server.bodytimeout import DEFAULT_BODY_TIMEOUT

if TYPE_CHECKING:
    from warehouse.jobs.controllerhost import ManagerThread
    from warehouse.regol.auto import RegolRunner
    from warehouse.workflows.controllerdriving import WorkflowThread

__all__ = ["SYSTEM_USER", "ControllerConfig", "ControllerState", "SpoolShares", "private_paths"]

SYSTEM_USER = "system"

log = logging.getLogger("warehouse.controller")


@dataclass(frozen=True)
class ControllerConfig:
    db_url: str
    signature_ttl: int = DEFAULT_SIGNATURE_TTL
    trash_lifetime: float = DEFAULT_TRASH_LIFETIME
    replication: int = 2
    cluster: str = "local"
    # A request body over this is refused before it is read (manifests, JSON).
    max_body: int = 64 * 1024 * 1024
    # A manifest over this many bytes is refused (413) before it is parsed:
    # parsing takes ~25 bytes of memory per byte (docs/security.md).
    max_manifest: int = 16 * 1024 * 1024
    # A streamed put's body (POST /collections/text) over this is refused
    # (413): it is spooled to disk, and only a line of it held at once.
    max_spooled: int = 4 * 1024**3
    # Streamed puts checked or spooled at once, of all users: each holds six
    # scratch files and up to twice max_spooled of disk (503 past it).
    max_streamed_puts: int = 32
    # Where request bodies are spooled (unnamed files); None: the system's.
    scratch: Path | None = None
    # A request body that sends nothing for this many seconds is cut off (408).
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    # Normally kept in the catalog (made on first start); given here when keep
    # servers run standalone with a key file.
    signing_key: bytes | None = None
    # An admin token of the keep servers, for GC (index, trash, pull); when
    # None, GC uses $WH_KEEP_ADMIN_TOKEN, else the controller's own token.
    keep_admin_token: str | None = None
    # Seconds between the idle Regol runner's looks (docs/regol.md); 0: off.
    regol_interval: float = 0.0
    # Directories of this machine under which a git: function's repository
    # may be read (`wh serve --git-root`); none: only fetched ones (gitcmd).
    git_roots: tuple[str, ...] = ()
    # Schemes and hosts a git: function may be fetched from (`wh serve
    # --git-allow`; gitcmd.check_remote).
    git_allow: tuple[str, ...] = DEFAULT_ALLOW
    # Keep servers' and workers' host labels: steps prefer workers beside
    # their input (docs/clusters.md, "Placement"); None: no placement.
    host_map: HostMap | None = None
    # The most job steps one user may have running at once (`wh serve
    # --steps-per-user`); 0: no limit but the slots.
    steps_per_user: int = 0
    # Bytes of collections one user may hold (`wh serve --quota-bytes-per-user`;
    # controller/quota.py); 0: no quota.
    quota_bytes_per_user: int = 0
    # What each sandboxed step may use beyond what it asks (`wh serve
    # --step-processes`, `--step-scratch`, `--step-time`; docs/jobs.md).
    step_limits: Policy = field(default_factory=Policy)


class SpoolShares:
    """Bytes of streamed puts' bodies each user has spooled at once: their
    sum is bounded as one body is (``max_spooled``), so a user cannot fill
    the disk with many puts at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def take(self, user: str, size: int) -> bool:
        """Hold ``size`` more bytes for ``user``; False (nothing held) if over."""
        with self._lock:
            held = self._held.get(user, 0)
            if held + size > self.limit:
                return False
            self._held[user] = held + size
            return True

    def give(self, user: str, size: int) -> None:
        with self._lock:
            left = self._held.get(user, 0) - size
            if left > 0:
                self._held[user] = left
            else:
                self._held.pop(user, None)

    def held(self, user: str) -> int:
        with self._lock:
            return self._held.get(user, 0)


class Slots:
    """How many of a bounded number of things run at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Take a slot; False (none taken) if all are in use."""
        with self._lock:
            if self.used >= self.limit:
                return False
            self.used += 1
            return True

    def give(self) -> None:
        with self._lock:
            self.used -= 1


@dataclass
class ControllerState:
    config: ControllerConfig
    engine: sa.Engine
    signing_key: bytes
    # The controller's own admin token (for storing manifests on keep
    # servers); made at start-up, kept in memory only.
    system_token: str
    _keep: KeepClient | None = field(default=None, repr=False)
    _keep_ids: tuple[str, ...] = ()
    _keep_read: float = 0.0  # time.monotonic() when the servers were last read
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # The job manager's thread and executor, when this controller runs jobs.
    job_manager: ManagerThread | None = field(default=None, repr=False)
    # Regol runs by itself while the cluster is idle, when configured.
    regol_runner: RegolRunner | None = field(default=None, repr=False)
    # The thread driving workflow runs (started with the job manager).
    workflows: WorkflowThread | None = field(default=None, repr=False)
    # True while `wh serve` is still starting its keep servers and job manager:
    # /api/v1/health says "starting", and clients wait (docs/server.md).
    starting: bool = False
    # What each user's streamed puts have spooled at once (POST /collections/text).
    spooled: SpoolShares = field(init=False, repr=False)
    # Streamed puts running at once, of all users (bounded by max_streamed_puts).
    streamed_puts: Slots = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.spooled = SpoolShares(self.config.max_spooled)
        self.streamed_puts = Slots(self.config.max_streamed_puts)

    @classmethod
    def open(cls, config: ControllerConfig) -> ControllerState:
        engine = catalog.open_engine(config.db_url)
        catalog.upgrade(engine)
        try:
            catalog.get_user(engine, SYSTEM_USER)
        except Exception:
            try:
                catalog.add_user(engine, SYSTEM_USER, admin=True)
            except Exception:
                catalog.get_user(engine, SYSTEM_USER)  # made by a twin at once
        token = catalog.create_token(
            engine, SYSTEM_USER, label="controller", ttl=2 * config.signature_ttl
        )
        return cls(config, engine, config.signing_key or catalog.signing_key(engine), token)

    def services(self) -> list[Service]:
        return [Service(s.id, s.url) for s in catalog.list_keep_services(self.engine)]

    def keep(self, max_age: float = 0.0) -> KeepClient:
        """A block client over the keep servers registered now (rebuilt when
        they change); with ``max_age``, the one in use if the servers were
        read that many seconds ago or less (the S3 gateway's reads: one
        catalog read fewer a request)."""
        fresh = time.monotonic() - self._keep_read < max_age
        if fresh and self._keep is not None:
            return self._keep
        services = self.services()
        ids = tuple(s.id for s in services)
        with self._lock:
            self._keep_read = time.monotonic()
            if self._keep is None or ids != self._keep_ids:
                if self._keep is not None:
                    self._keep.close()
                self._keep = KeepClient(
                    services,
                    self.system_token,
                    replication=min(self.config.replication, len(services)) or 1,
                    cluster=self.config.cluster,
                    signer=self.sign,
                    # The manifests it reads for every get: read from disk again.
                    disk=configured_caches(),
                )
                self._keep_ids = ids
            return self._keep

    def sign(self, locator: Locator) -> Locator:
        """A read signature for the controller's own token."""
        return sign(locator, self.system_token, self.signing_key, self.config.signature_ttl)

    def start_jobs(
        self,
        url: str,
        work_dir: Path,
        executor: str = "local",
        cpus: int | None = None,
        *,
        unsafe_steps: bool = False,
        steps_user: str | None = None,
    ) -> ManagerThread:
        """Run the job manager in a thread; its steps reach this controller at ``url``.

        Local and Slurm steps run in the bubblewrap sandbox
        (``warehouse.jobs.sandbox``); without bubblewrap this refuses
        (UsageError) unless ``unsafe_steps``.
        """
        from warehouse.jobs.controllerhost import ControllerHost, ManagerThread
        from warehouse.jobs.sandbox import DEFAULT_STEPS_USER, find_sandbox

        sandbox = None
        if executor == "dask" and not unsafe_steps:
            raise UsageError(
                "--executor dask without a scheduler runs steps on this machine, "
                "unsandboxed: give --dask-scheduler (workers elsewhere), or --unsafe-steps"
            )
        if sandboxed_executor(executor):
            sandbox = find_sandbox(steps_user or DEFAULT_STEPS_USER)
            if sandbox is None and not unsafe_steps:
                raise UsageError(
                    "bubblewrap (bwrap) is not installed or cannot run here: "
                    f"{executor} job steps cannot be sandboxed; install it, or start with "
                    "--unsafe-steps (steps can then read the catalog and its signing key: "
                    "see docs/security.md)"
                )
            if sandbox is None:
                log.warning(
                    "UNSAFE: --unsafe-steps: %s job steps run unsandboxed as %s and can "
                    "read its catalog, signing key and volumes; any user who can submit "
                    "a job can become admin",
                    executor,
                    "this controller's own user"
                    if executor == "local"
                    else "the Slurm job's user (this controller's)",
                )
            elif sandbox.user is not None:
                name = sandbox.user.name
                log.info("%s job steps run sandboxed (bwrap) as user %s", executor, name)
            else:
                sandbox.check_hidden(private_paths(self.config.db_url, work_dir))
                log.info("%s job steps run sandboxed (bwrap)", executor)
        work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)

        host = ControllerHost(
            self.engine,
            self.keep,
            user=SYSTEM_USER,
            url=url,
            signing_key=self.signing_key,
            work_dir=work_dir,
            signature_ttl=self.config.signature_ttl,
        )
        placer = None
        if self.config.host_map is not None and self.config.host_map.active:
            from warehouse.clusters.placer import Placer
            from warehouse.collection.records import load_manifest

            placer = Placer(
                self.config.host_map,
                self.keep,
                lambda pdh: load_manifest(self.keep(), self.engine, pdh, None)[0],
            )
        per_user = self.config.steps_per_user
        self.job_manager = ManagerThread(
            host,
            executor,
            cpus=cpus,
            sandbox=sandbox,
            placer=placer,
            per_user=per_user,
            policy=self.config.step_limits,
            on_landed=self._jobs_landed,
        ).start()
        if self.config.regol_interval > 0:
            from warehouse.regol.auto import RegolRunner

            self.regol_runner = RegolRunner(
                self.engine,
                self.keep,
                executor,
                self.config.regol_interval,
                git_roots=self.config.git_roots,
                git_allow=self.config.git_allow,
            ).start()
        from warehouse.workflows.controllerdriving import WorkflowThread

        self.workflows = WorkflowThread(
            self.engine,
            self.keep,
            executor,
            git_roots=self.config.git_roots,
            git_allow=self.config.git_allow,
            on_submitted=self.job_manager.wake,
        ).start()
        return self.job_manager

    def _jobs_landed(self, rows: object) -> None:
        """Jobs finished: the workflow thread turns their runs now, not at its next pass."""
        workflows = self.workflows
        if workflows is not None:
            workflows.wake()

    def stop_jobs(self) -> None:
        if self.regol_runner is not None:
            self.regol_runner.stop()
            self.regol_runner = None
        if self.workflows is not None:
            self.workflows.stop()
            self.workflows = None
        if self.job_manager is not None:
            self.job_manager.stop()
            self.job_manager = None

    def close(self) -> None:
        self.stop_jobs()
        if self._keep is not None:
            self._keep.close()
        self.engine.dispose()


def private_paths(db_url: str, work_dir: Path, keep: Path | None = None) -> dict[str, str | Path]:
    """What no job step may read, by what it is: the controller's job
    directory, its catalog file (SQLite: it holds the signing key) and the
    volumes of the keep servers it starts."""
    private: dict[str, str | Path] = {"the job directory": work_dir}
    if keep is not None:
        private["the keep volumes"] = keep
    url = sa.engine.make_url(db_url)
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        private["the catalog"] = url.database
    return private


def sandboxed_executor(executor: str) -> bool:
    """Whether a controller runs this executor's steps in its sandbox: the
    local and Slurm ones (a Slurm node may share the controller's machine)."""
    return executor in ("local", "slurm") or executor.startswith("slurm:")
