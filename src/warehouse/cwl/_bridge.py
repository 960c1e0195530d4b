"""The warehouse side of a CWL run: files in and out, and jobs submitted and waited for.

``Bridge`` is what the cwltool job objects call (``_tool``); it knows no
CWL. It turns local files into collections (put once, remembered by path),
builds a job's input as manifest text over already stored blocks, submits
the job through normal reuse, runs the job manager in this process while
the run lasts, and writes a job's output collection into a local directory
(remembering which collection each written file came from, so that a later
job reading it names the same blocks instead of putting them again).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warehouse.cwl._record import Recorder
from warehouse.embedded import EmbeddedWarehouse
from warehouse.errors import NotFoundError, UsageError, WarehouseError
from warehouse.jobs.functions import FunctionVersion
from warehouse.jobs.jobrecords import JobRecord
from warehouse.jobs.jobstore import get_job, list_steps, request_control
from warehouse.jobs.jobsview import RemoteJobs
from warehouse.jobs.manager import Landed, Manager
from warehouse.jobs.model import FINISHED
from warehouse.jobs.runmanager import ensure_manager, run_manager
from warehouse.jobs.submission import JobRequest, submit, submit_many
from warehouse.manifest import FileEntry, Manifest
from warehouse.remote.warehouse import RemoteWarehouse

__all__ = ["Bridge", "Finished", "Staged"]

STEP_ENTRY = "cwlstep.py"
_LOOK_EVERY = 0.5  # seconds between looks at a waited job and at the run's cancel
TOOL_FILE = "tool.cwl.json"


@dataclass(frozen=True)
class Staged:
    """One entry of a job's input: ``target`` (a path in the input collection)
    from a local file or directory ``source``, or a file holding ``text``."""

    target: str
    source: str | None = None
    text: str | None = None
    directory: bool = False


@dataclass(frozen=True)
class Finished:
    job: JobRecord
    exit_code: int | None  # None: the job failed

    @property
    def reused(self) -> bool:
        return self.job.reused_from is not None


@dataclass
class _Submission:
    """One job waiting to be submitted with others (``Bridge._submit``)."""

    request: JobRequest
    version: FunctionVersion
    node: str
    tool: str
    reads: list[str]
    record: JobRecord | None = None
    error: BaseException | None = None


class Bridge:
    def __init__(
        self,
        wh: EmbeddedWarehouse | RemoteWarehouse,
        *,
        executor: str | None = None,
        name_outputs: str | None = None,
    ) -> None:
        self.wh = wh
        # Through a controller its manager runs the steps (in its sandbox, with
        # its checks of what the user may read); embedded, one in this process.
        self.remote = RemoteJobs(wh) if isinstance(wh, RemoteWarehouse) else None
        self.executor = executor or ("local" if self.remote is None else None)
        self._lock = threading.RLock()  # one call into the warehouse at a time
        self.record = Recorder(wh, self._lock, name_outputs)
        self._parts: dict[str, list[str]] = {}  # a collection made here -> what it came from
        self.refused: WarehouseError | None = None  # bad input found once cwltool had loaded
        self._roots: dict[str, str] = {}  # local directory -> the collection it holds
        self._puts: dict[str, tuple[str, str]] = {}  # local path -> (pdh, path inside)
        self._functions: dict[str, FunctionVersion] = {}
        # A tool object (the same for every invocation of it) -> it and its function.
        self._tools: dict[int, tuple[Any, FunctionVersion]] = {}
        # Collections are immutable: each one's files and empty directories, read once.
        self._listings: dict[str, tuple[dict[str, FileEntry], list[str]]] = {}
        # Files written out here, by (device, inode): the collection and path
        # each holds, with its size and mtime, so that one moved elsewhere
        # (cwltool moves the outputs into --outdir) is known without a put.
        self._written: dict[tuple[int, int], tuple[str, str, int, int]] = {}
        # Jobs waited for, each woken when this process's manager has written it finished.
        self._landed: dict[int, threading.Event] = {}
        self._queue: list[_Submission] = []  # jobs to submit, embedded
        self._queue_cv = threading.Condition()
        self._submitting = False  # a thread is submitting a batch
        self._tmp = tempfile.TemporaryDirectory(prefix="wh-cwl-")
        self._new: list[JobRecord] = []
        self._closing = False
        self._manager: threading.Thread | None = None
        self._external = False  # another process runs the manager for this executor
        self.finished: list[Finished] = []
        self._made: list[str] = []
        self._said: set[str] = set()

    def locked(self) -> threading.RLock:
        """The lock held around every call into the warehouse (``with bridge.locked():``)."""
        return self._lock

    # -- files ---------------------------------------------------------------

    def locate(self, path: str) -> tuple[str, str]:
        """The collection and path inside it holding local file or directory ``path``."""
        real = os.path.realpath(path)
        probe = real
        while True:
            if probe in self._roots:
                rel = "" if probe == real else os.path.relpath(real, probe)
                return self._roots[probe], rel.replace(os.sep, "/")
            parent = os.path.dirname(probe)
            if parent == probe:
                break
            probe = parent
        with self._lock:
            moved = self._moved(real)
            if moved is not None:
                return moved
            if real not in self._puts:
                if not os.path.exists(real):
                    raise NotFoundError(f"input {path} does not exist")
                pdh = self.wh.put([Path(real)]).pdh
                self._puts[real] = (pdh, "" if os.path.isdir(real) else os.path.basename(real))
            return self._puts[real]

    def _moved(self, real: str) -> tuple[str, str] | None:
        """The collection and path of a file written out here and moved since
        (same inode, size and mtime), or None."""
        try:
            st = os.stat(real)
        except OSError:
            return None
        known = self._written.get((st.st_dev, st.st_ino))
        if known is None or (known[2], known[3]) != (st.st_size, st.st_mtime_ns):
            return None
        return known[0], known[1]

    def fetch(self, key: str) -> str:
        """A local path for ``PDH/path`` or ``NAME/path``, the collection written out once."""
        head, _, inside = key.partition("/")
        with self._lock:
            pdh = self.wh.resolve(head)
            root = os.path.join(self._tmp.name, "keep", pdh)
            if root not in self._roots.values() and not os.path.isdir(root):
                self.write_out(pdh, root)
        path = os.path.join(root, inside) if inside else root
        if not os.path.exists(path):
            raise NotFoundError(f"no file {inside!r} in collection {pdh} ({head})")
        return path

    def write_out(self, pdh: str, directory: str) -> None:
        """Write collection ``pdh`` into ``directory``; remembered as holding it."""
        with self._lock:
            reader = self.wh.reader(pdh, one_pass=True)
            if pdh not in self._listings:  # named again by the run's outputs: not read twice
                held = reader.manifest
                self._listings[pdh] = (held.files(), list(held.empty_directories()))
            os.makedirs(directory, exist_ok=True)
            for rel in reader.files:
                target = os.path.join(directory, rel)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as f:
                    for chunk in reader.iter_file(rel):
                        f.write(chunk)
                st = os.stat(target)
                self._written[(st.st_dev, st.st_ino)] = (pdh, rel, st.st_size, st.st_mtime_ns)
            for d in reader.manifest.empty_directories():
                os.makedirs(os.path.join(directory, d), exist_ok=True)
            self._roots[os.path.realpath(directory)] = pdh

    def collection(self, entries: Iterable[Staged]) -> str:
        """Record the collection holding every entry at its target; its PDH.

        Files already stored are named by their blocks (no data read or
        written); local files are put first; texts are put as files. It is
        recorded as combined from the collections its entries came from
        (each a part at the entry's path), which is how lineage reaches them."""
        files: dict[str, FileEntry] = {}
        empty: list[str] = []
        parts: list[tuple[str, str]] = []
        for e in entries:
            target = e.target.strip("/")
            if e.text is not None:
                pdh, rel = self._put_text(e.text)
            elif e.source is not None:
                pdh, rel = self.locate(e.source)
            else:  # a directory made empty, its entries staged one by one
                empty.append(target)
                continue
            parts.append((target, pdh))
            held, held_empty = self._listing(pdh)
            if not e.directory:
                found = held.get(rel)
                if found is None:
                    raise NotFoundError(f"no file {rel!r} in collection {pdh}")
                files[target] = FileEntry(target, found.size, found.pieces)
                continue
            prefix = f"{rel}/" if rel else ""
            inside = [(p, f) for p, f in held.items() if p.startswith(prefix)]
            for p, f in inside:
                files[f"{target}/{p[len(prefix) :]}"] = FileEntry(
                    f"{target}/{p[len(prefix) :]}", f.size, f.pieces
                )
            empty.extend(f"{target}/{d[len(prefix) :]}" for d in held_empty if d.startswith(prefix))
            if not inside:
                empty.append(target)
        keep = [d for d in empty if not any(p.startswith(d + "/") for p in files)]
        manifest = Manifest.from_files(files.values(), sorted(set(keep))).normalized()
        with self._lock:
            made = self.wh.put_manifest(manifest).pdh
            parts = [(d, p) for d, p in parts if p != made]  # a job's output given back whole
            self._parts[made] = [p for _, p in parts]
            if parts:
                self.record.parts(made, parts)
            return made

    def _listing(self, pdh: str) -> tuple[dict[str, FileEntry], list[str]]:
        with self._lock:
            if pdh not in self._listings:
                manifest = self.wh.manifest(pdh)
                self._listings[pdh] = (manifest.files(), list(manifest.empty_directories()))
            return self._listings[pdh]

    def _put_text(self, text: str) -> tuple[str, str]:
        with self._lock:
            d = tempfile.mkdtemp(dir=self._tmp.name)
            path = os.path.join(d, "text")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            return self.locate(path)

    # -- jobs ----------------------------------------------------------------

    def function(
        self, tool: Any, step_source: Path, prepare: Callable[[Any], Any] = lambda t: t
    ) -> FunctionVersion:
        """The tool document (as ``prepare`` makes it) and the step program,
        stored as one collection; worked out once per tool object."""
        with self._lock:
            known = self._tools.get(id(tool))
            if known is not None and known[0] is tool:
                return known[1]
        text = json.dumps(prepare(tool), sort_keys=True, default=str, ensure_ascii=False)
        with self._lock:
            self._tools[id(tool)] = (tool, self._function(text, step_source))
            return self._tools[id(tool)][1]

    def _function(self, text: str, step_source: Path) -> FunctionVersion:
        with self._lock:
            if text not in self._functions:
                d = Path(tempfile.mkdtemp(dir=self._tmp.name))
                (d / STEP_ENTRY).write_bytes(step_source.read_bytes())
                (d / TOOL_FILE).write_text(text + "\n", encoding="utf-8")
                pdh = self.wh.put([d / STEP_ENTRY, d / TOOL_FILE]).pdh
                self._functions[text] = FunctionVersion(f"{pdh}/{STEP_ENTRY}", pdh, STEP_ENTRY)
            return self._functions[text]

    def run(
        self,
        version: FunctionVersion,
        input_pdh: str,
        params: dict[str, Any],
        *,
        cpus: int = 1,
        reuse: bool = True,
        node: str = "",
        tool: str = "",
    ) -> Finished:
        """Submit the job (or reuse an earlier one) and wait until it is finished;
        ``node`` names it in the run's record, ``tool`` the tool it runs."""
        request = JobRequest(
            function=version.spec,
            input=input_pdh,
            params=params,
            reuse=reuse,
            cpus=max(1, min(cpus, os.cpu_count() or 1)),  # more would wait for ever
            max_attempts=1,  # a CWL tool's failure is its own answer, not a flaky step
            executor=self.executor or "local",  # through a controller: its own, below
        )
        reads = self._parts.get(input_pdh, [])
        if self.remote is not None:
            with self._lock:
                record = self.remote.submit(request, executor=self.executor)
                self.record.submitted(node, tool, record, reads)
        else:
            record = self._submit(_Submission(request, version, node, tool, reads))
        landed = self._landed.get(record.id)
        delay = 0.01
        looked = time.monotonic()
        while record.state not in FINISHED:
            if landed is not None and self._manager is not None and not self._external:
                # This process's manager says when; a look every half second
                # still sees it start (its node shows it) and a cancel asked.
                if landed.wait(_LOOK_EVERY):
                    landed = None  # written finished: the look below sees it
            else:
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
            if self._external:
                ensure_manager(self.local.home, str(self.executor))
            if time.monotonic() - looked > _LOOK_EVERY:  # wh workflow cancel asked?
                looked = time.monotonic()
                if self.record.cancelled():
                    with self._lock, contextlib.suppress(WarehouseError):  # finished meanwhile
                        if self.remote is not None:
                            self.remote.control(record.id, "cancel")
                        else:
                            request_control(self.local.engine, record.id, "cancel")
            with self._lock:
                seen, record = record.state, self._get(record.id)
                if record.state != seen and record.state not in FINISHED:
                    self.record.progress(node, record)  # its node shows it running
        finished = Finished(record, self._exit_code(record) if record.state == "complete" else None)
        with self._lock:
            self._landed.pop(record.id, None)
            self.finished.append(finished)
            self.record.finished(node, record)
        return finished

    def _submit(self, entry: _Submission) -> JobRecord:
        """Submit ``entry`` with the others waiting meanwhile: their jobs in one
        transaction, their nodes in another (a group commit: the first thread
        waiting submits for all, the others wait for it). Embedded only."""
        with self._queue_cv:
            self._queue.append(entry)
            while self._submitting and entry.record is None and entry.error is None:
                self._queue_cv.wait()
            batch: list[_Submission] = []
            if entry.record is None and entry.error is None:
                self._submitting = True
                batch, self._queue = self._queue, []
        if batch:
            try:
                self._submit_batch(batch)
            except BaseException as e:  # each job's thread says it
                for left in batch:
                    if left.record is None and left.error is None:
                        left.error = e
            finally:
                with self._queue_cv:
                    self._submitting = False
                    self._queue_cv.notify_all()
        if entry.error is not None:
            raise entry.error
        assert entry.record is not None
        return entry.record

    def _submit_batch(self, batch: list[_Submission]) -> None:
        with self._lock:
            try:
                records = submit_many(self.local, [(e.request, e.version) for e in batch])
            except WarehouseError:
                if len(batch) == 1:
                    raise
                records = []  # one job's refusal is its own: each alone
                for e in batch:
                    try:
                        e.record = submit(self.local, e.request, version=e.version)
                    except WarehouseError as refused:
                        e.error = refused
            for e, record in zip(batch, records, strict=False):
                e.record = record
            done = [(e, e.record) for e in batch if e.record is not None]
            new = [record for _, record in done if record.state not in FINISHED]
            for record in new:
                self._landed[record.id] = threading.Event()
            if new:
                self._new.extend(new)
                self._start_manager()
            self.record.submitted_many([(e.node, e.tool, r, e.reads) for e, r in done])

    @property
    def local(self) -> EmbeddedWarehouse:
        assert isinstance(self.wh, EmbeddedWarehouse)
        return self.wh

    def _get(self, job_id: int) -> JobRecord:
        if self.remote is not None:
            return self.remote.get(job_id)
        return get_job(self.local.engine, job_id)

    def _exit_code(self, record: JobRecord) -> int:
        with self._lock:
            job_id = record.reused_from or record.id
            if self.remote is not None:
                steps = self.remote.steps(job_id)
            else:
                steps = list_steps(self.local.engine, job_id)
        for s in steps:
            if s.counters:
                return int(json.loads(s.counters).get("exit_code", 0))
        return 0

    def _start_manager(self) -> None:
        if self._manager is not None:
            return
        self._manager = threading.Thread(
            target=self._run_manager, name="wh-cwl-manager", daemon=True
        )
        self._manager.start()

    def _run_manager(self) -> None:
        def stop(m: Manager) -> bool:
            with self._lock:
                new, self._new = self._new, []
            if new:
                m.take_up(new)  # now, not at the manager's next look at the catalog
            elif m.sched.idle() and not m.executor.running() and not m.landing():
                time.sleep(0.02)  # nothing to wait on: do not spin
            return self._closing

        def landed(jobs: list[Landed]) -> None:
            with self._lock:
                for job in jobs:
                    event = self._landed.get(int(job["id"]))
                    if event is not None:
                        event.set()

        try:
            if not run_manager(self.local, str(self.executor), stop=stop, on_landed=landed):
                self._external = True  # the waiting loop keeps that one alive
                ensure_manager(self.local.home, str(self.executor))
        except WarehouseError:
            self._external = True

    def first(self, key: str) -> bool:
        """Whether ``key`` comes up for the first time in this run (to say a thing once)."""
        with self._lock:
            seen = key in self._said
            self._said.add(key)
            return not seen

    def made(self, directory: str) -> None:
        """A directory of this run's, removed at ``close`` (its outputs moved out by then)."""
        with self._lock:
            self._made.append(directory)

    def close(self) -> None:
        self._closing = True
        if self._manager is not None:
            self._manager.join()
        self._tmp.cleanup()
        for d in self._made:
            shutil.rmtree(d, ignore_errors=True)


def output_collection(bridge: Bridge, outdir: str, paths: Sequence[tuple[str, bool]]) -> str:
    """One collection of the run's outputs (local ``(path, is_directory)``),
    each at its path under ``outdir``; bytes already stored are not read."""
    root = os.path.realpath(outdir)
    entries = []
    for path, is_dir in paths:
        real = os.path.realpath(path)
        rel = os.path.relpath(real, root)
        if rel.startswith(".."):
            raise UsageError(f"output {path} lies outside the output directory {outdir}")
        entries.append(Staged(rel.replace(os.sep, "/"), source=real, directory=is_dir))
    return bridge.collection(entries)
