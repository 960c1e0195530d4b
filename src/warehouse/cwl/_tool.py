"""cwltool extended so that each CommandLineTool invocation is a warehouse job.

The hooks are cwltool's own: ``LoadingContext.construct_tool_object``
(``make_tool``) gives our ``CommandLineTool``, whose ``make_job_runner``
gives ``WarehouseJob`` and whose ``make_path_mapper`` names staging
directories by position rather than at random; ``Executor`` (a
``MultithreadedJobExecutor``) sets the run up. cwltool still loads,
validates, evaluates expressions, scatters and runs workflows and
ExpressionTools; only the running of a command changes.

The command line is written against fixed paths (``OUTDIR``, ``TMPDIR``,
``STAGEDIR``), as for a container: the same tool on the same inputs then
gives the same parameters, hence the same job and its reuse. The step puts
its scratch directory in their place (``_step``).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, MutableMapping, MutableSequence
from pathlib import Path
from typing import Any, cast

from cwltool import process as cwltool_process
from cwltool.command_line_tool import CommandLineTool
from cwltool.context import LoadingContext, RuntimeContext
from cwltool.errors import WorkflowException
from cwltool.executors import MultithreadedJobExecutor
from cwltool.job import JobBase
from cwltool.pathmapper import MapperEnt, PathMapper
from cwltool.process import Process, shortname
from cwltool.utils import CWLObjectType  # type: ignore[attr-defined]
from cwltool.workflow import default_make_tool

from warehouse.cwl._bridge import Bridge, Staged
from warehouse.cwl._record import check_prefix, document_files
from warehouse.cwl._whole import Served, as_keep, portable, run_key, serve
from warehouse.errors import WarehouseError

__all__ = ["OUTDIR", "STAGEDIR", "TMPDIR", "Executor", "WarehouseJob", "make_tool"]

OUTDIR = "/var/spool/cwl"
TMPDIR = "/var/tmp/cwl"
STAGEDIR = "/var/lib/cwl"
STEP_SOURCE = Path(__file__).with_name("_step.py")

log = logging.getLogger("cwltool")


class StablePathMapper(PathMapper):
    """cwltool's mapper with each input's directory named by its position
    (``stg0``, ``stg1``…) instead of a random name: the command line of the
    same invocation is then the same text."""

    def setup(self, referenced_files: MutableSequence[Any], basedir: str) -> None:
        for i, fob in enumerate(referenced_files):
            stagedir = (
                os.path.join(self.stagedir, f"stg{i}") if self.separateDirs else self.stagedir
            )
            self.visit(fob, stagedir, basedir, copy=bool(fob.get("writable", False)), staged=True)


class WarehouseTool(CommandLineTool):
    def _init_job(self, joborder: CWLObjectType, runtime_context: RuntimeContext) -> Any:
        builder = super()._init_job(joborder, runtime_context)
        builder.wh_tool = self.tool  # type: ignore[attr-defined]  # the job's function
        return builder

    def make_job_runner(self, runtimeContext: RuntimeContext) -> type[JobBase]:
        return WarehouseJob

    def make_path_mapper(
        self,
        reffiles: MutableSequence[Any],
        stagedir: str,
        runtimeContext: RuntimeContext,
        separateDirs: bool,
    ) -> PathMapper:
        return StablePathMapper(reffiles, runtimeContext.basedir, stagedir, separateDirs)


def make_tool(toolpath_object: MutableMapping[str, Any], loadingContext: LoadingContext) -> Process:
    if isinstance(toolpath_object, Mapping) and toolpath_object.get("class") == "CommandLineTool":
        return WarehouseTool(cast(Any, toolpath_object), loadingContext)
    return default_make_tool(cast(Any, toolpath_object), loadingContext)


def _short_id(uri: str) -> str:
    """A tool's id as the run's node shows it: its file's name and fragment."""
    return uri.rsplit("/", 1)[-1] if uri.startswith("file://") else uri


def _local_path(resolved: str) -> str:
    return resolved[len("file://") :] if resolved.startswith("file://") else resolved


class WarehouseJob(JobBase):
    """One invocation: its files staged as a collection, its command a job."""

    def _required_env(self) -> dict[str, str]:
        # PATH is the step's own: the same job wherever it runs.
        return {"HOME": self.builder.outdir, "TMPDIR": self.builder.tmpdir}

    def _target(self, virtual: str) -> str:
        for fixed, place in ((self.builder.stagedir, "stage"), (self.builder.outdir, "out")):
            if virtual == fixed or virtual.startswith(fixed + "/"):
                return place + virtual[len(fixed) :]
        raise WorkflowException(
            f"cannot stage a file at {virtual}: outside the working directories"
        )

    def _entries(self) -> list[Staged]:
        entries: list[Staged] = []
        mappers = [self.pathmapper] + ([self.generatemapper] if self.generatemapper else [])
        for mapper in mappers:
            for _, ent in mapper.items():
                entries.extend(self._entry(ent))
        return entries

    def _entry(self, ent: MapperEnt) -> list[Staged]:
        if not ent.staged:
            return []  # inside a directory staged whole
        target = self._target(ent.target)
        if ent.type in ("CreateFile", "CreateWritableFile"):
            return [Staged(target, text=ent.resolved)]
        if ent.type in ("File", "WritableFile"):
            return [Staged(target, source=_local_path(ent.resolved))]
        if ent.type in ("Directory", "WritableDirectory"):
            if ent.resolved.startswith("_:"):
                return [Staged(target, directory=True)]  # a literal: its entries come one by one
            return [Staged(target, source=_local_path(ent.resolved), directory=True)]
        return []

    def _plan(self) -> dict[str, Any]:
        env = {k: v for k, v in self.environment.items() if k != "PATH" or k in self._env_req()}
        return {
            "argv": [str(a) for a in self.command_line],
            "env": env,
            "stdin": self.stdin,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "timelimit": self.timelimit or 0,  # ToolTimeLimit; 0: none
            "success": list(self.successCodes),
            "temporary_fail": list(self.temporaryFailCodes),
            "permanent_fail": list(self.permanentFailCodes),
            "paths": {
                "out": self.builder.outdir,
                "tmp": self.builder.tmpdir,
                "stage": self.builder.stagedir,
            },
        }

    def _env_req(self) -> set[str]:
        req, _ = self.get_requirement("EnvVarRequirement")
        if not req:
            return set()
        defs = cast(Any, req).get("envDef", [])
        return {d["envName"] for d in defs} if isinstance(defs, list) else set(defs)

    def run(
        self, runtimeContext: RuntimeContext, tmpdir_lock: threading.Lock | None = None
    ) -> None:
        bridge: Bridge = runtimeContext.wh_bridge  # type: ignore[attr-defined]
        # The host's side of the fixed output directory: a new one for each
        # invocation (the run's own may be shared by the jobs of a scatter).
        self.outdir = runtimeContext.create_outdir()
        bridge.made(self.outdir)
        # One of the run's output directories, as cwltool's own jobs' are: the
        # outputs are moved from it into --outdir, not copied (and so keep the
        # inode by which the bridge knows their collection).
        runtimeContext.wh_output_dirs.add(self.outdir)  # type: ignore[attr-defined]
        docker, _ = self.get_requirement("DockerRequirement")
        if docker is not None and bridge.first("docker"):
            log.warning(
                "wh cwl: no container engine is used: tools with DockerRequirement "
                "run on the host, as cwltool --no-container runs them"
            )
        self._setup(runtimeContext)
        outputs: CWLObjectType = {}
        status = "permanentFail"
        try:
            tool = getattr(self.builder, "wh_tool", None)
            version = bridge.function(tool, STEP_SOURCE, prepare=portable)
            input_pdh = bridge.collection(self._entries())
            cores = int(self.builder.resources.get("cores", 1) or 1)
            reuse: bool = runtimeContext.wh_reuse  # type: ignore[attr-defined]
            work_reuse, _ = self.get_requirement("WorkReuse")
            if work_reuse is not None and work_reuse.get("enableReuse") is False:
                reuse = False  # the tool asks to run every time
            done = bridge.run(
                version,
                input_pdh,
                self._plan(),
                cpus=cores,
                reuse=reuse,
                node=self.name,
                tool=_short_id(str((tool or {}).get("id", self.name))),
            )
            job = done.job
            how = f"reused job {job.reused_from}" if done.reused else "ran"
            log.info("[job %s] warehouse job %d: %s (%s)", self.name, job.id, job.state, how)
            if done.exit_code is not None and job.output_pdh is not None:
                bridge.write_out(job.output_pdh, self.outdir)
                outputs = self.collect_outputs(self.outdir, done.exit_code)
                status = "success"
            else:
                log.error(
                    "[job %s] warehouse job %d %s: %s",
                    self.name,
                    job.id,
                    job.state,
                    (job.error or "").strip(),
                )
        except (WorkflowException, WarehouseError, OSError) as e:
            log.error("[job %s] %s", self.name, e)
        assert runtimeContext.workflow_eval_lock is not None
        with runtimeContext.workflow_eval_lock:
            if self.output_callback:
                self.output_callback(outputs, status)


# Tool invocations in flight per core: a job's cores are held by the job
# manager, which starts its step when they are free; the runner only waits.
# Holding them here too would leave the cores idle while each job is put
# together, submitted and collected.
IN_FLIGHT_PER_CORE = 8


class Executor(MultithreadedJobExecutor):
    """cwltool's multithreaded executor, with the run set up for warehouse jobs.

    More invocations are in flight than there are cores (``IN_FLIGHT_PER_CORE``):
    the job manager runs as many steps at once as the cores hold. One that
    asks for more cores than the machine has is still refused, as cwltool's
    executor refuses it."""

    def __init__(
        self, bridge: Bridge, *, reuse: bool = True, settings: dict[str, Any] | None = None
    ) -> None:
        super().__init__()
        self.bridge = bridge
        self.reuse = reuse
        # cwltool's options that may change what a run makes (_whole.settings);
        # None: the run is not reused whole.
        self.settings = settings
        self.served: Served | None = None  # the run answered whole by an earlier one
        self.cores = self.max_cores  # the machine's, as cwltool counts them
        self.max_cores = self.cores * IN_FLIGHT_PER_CORE

    def run_job(self, job: Any, runtime_context: RuntimeContext) -> None:
        # Called from the one thread walking the workflow only.
        if isinstance(job, JobBase) and job.builder.resources.get("cores", 0) > self.cores:
            self.max_cores = self.cores
            try:
                super().run_job(job, runtime_context)
            finally:
                self.max_cores = self.cores * IN_FLIGHT_PER_CORE
            return
        super().run_job(job, runtime_context)

    def execute(
        self,
        process: Process,
        job_order_object: CWLObjectType,
        runtime_context: RuntimeContext,
        logger: logging.Logger = log,
    ) -> Any:
        # The fixed paths of a container, for every tool (see the module's text).
        runtime_context.use_container = True
        runtime_context.default_container = "warehouse-step"
        runtime_context.docker_outdir = OUTDIR
        runtime_context.docker_tmpdir = TMPDIR
        runtime_context.docker_stagedir = STAGEDIR
        runtime_context.wh_bridge = self.bridge  # type: ignore[attr-defined]
        runtime_context.wh_reuse = self.reuse  # type: ignore[attr-defined]
        runtime_context.wh_output_dirs = self.output_dirs  # type: ignore[attr-defined]
        # cwltool numbers job names (sort, sort_2…) across every run of the
        # process; a run's nodes are named from its own first job again.
        cwltool_process._names.clear()
        key = None
        if self.settings is not None and self.bridge.remote is None:  # embedded only
            key = run_key(process, job_order_object, runtime_context, self.bridge, self.settings)
        self._record(process, job_order_object, key)
        if key is not None and self.reuse:
            self.served = serve(self.bridge, key)
            if self.served is not None:
                return {}, "success"  # the output object is the earlier run's (_run)
        return super().execute(process, job_order_object, runtime_context, logger)

    def _record(self, process: Process, job_order: CWLObjectType, key: str | None) -> None:
        """The run as a workflow run, once the documents are loaded and valid."""
        bridge = self.bridge
        outputs = [shortname(str(o["id"])) for o in process.tool.get("outputs", [])]
        try:
            check_prefix(bridge.record.name_outputs, outputs)
        except WarehouseError as e:
            bridge.refused = e  # said as bad input once cwltool returns
            raise WorkflowException(str(e)) from None
        ids: list[str] = []
        process.visit(lambda t: ids.append(str(t.get("id", ""))))
        main = str(process.tool.get("id", ""))
        name = _short_id(main).split("#", 1)[0] or "cwl"
        bridge.record.start(document_files(ids), as_keep(job_order, bridge), name, key)
