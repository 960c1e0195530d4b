"""Starting a workflow run: check the file, then record the run or find it again.

``start_run`` checks the file and its inputs, stores it as a collection,
pins every function once, and records the run with all of its nodes; the
same file with the same inputs and prefix finds the unfinished run it made
before (the resume). ``load_workflow`` reads a run's workflow back (kept
parsed for a while, so the driver of a run just started does not parse it
again). ``driver`` then carries the run out.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warehouse import catalog
from warehouse.blocks import EMPTY_LOCATOR, Locator
from warehouse.catalog.records import require_collection
from warehouse.catalog.values import NAME_LIMIT, check_name
from warehouse.collection.records import load_manifests
from warehouse.errors import NotFoundError, UsageError, WarehouseError
from warehouse.jobs.functions import FunctionVersion, resolve
from warehouse.manifest import Manifest, escape_name
from warehouse.workflows import runstore
from warehouse.workflows.combine import combine
from warehouse.workflows.plan import job_input
from warehouse.workflows.runhost import RunHost
from warehouse.workflows.runrecords import RunRecord
from warehouse.workflows.spec import (
    Ref,
    Workflow,
    bind_inputs,
    collection_inputs,
    output_name,
    parse_workflow,
)

__all__ = ["StartResult", "load_workflow", "start_run"]


@dataclass(frozen=True)
class StartResult:
    run: RunRecord
    resumed: bool  # an unfinished run of the same file, inputs and prefix was found


def _store_file(host: RunHost, text: str, filename: str) -> str:
    """The workflow file as a one-file collection (nothing written if it is stored)."""
    data = text.encode("utf-8")
    locator = Locator(hashlib.md5(data).hexdigest(), len(data)) if data else EMPTY_LOCATOR
    manifest = Manifest.parse(f". {locator} 0:{len(data)}:{escape_name(filename)}\n")
    try:
        catalog.get_collection(host.engine, manifest.pdh)
        if not data or host.store.exists(locator):
            return manifest.pdh
    except NotFoundError:
        pass
    if data:
        host.store.put(data)
        host.store.flush()
    return host.save_manifest(manifest).pdh


def _pin(host: RunHost, spec: str) -> FunctionVersion:
    return resolve(host, spec)


def _check_prefix(prefix: str | None, wf: Workflow) -> None:
    if prefix is None:
        return
    try:
        check_name(prefix)
        for output in wf.outputs:
            name = output_name(prefix, output)
            if len(name) > NAME_LIMIT:  # said plainly: the name is not the option given
                raise UsageError(
                    f"output {output!r} would be named {name[:20]}…{name[-20:]}, "
                    f"{len(name)} characters: PREFIX.OUTPUT holds at most {NAME_LIMIT}"
                )
            check_name(name)
    except UsageError as e:
        raise UsageError(f"--name-outputs: {e}") from None


def start_run(
    host: RunHost,
    text: str,
    filename: str,
    given: Mapping[str, Any],
    *,
    name_outputs: str | None = None,
    base_dir: Path | None = None,
) -> StartResult:
    """Check the file, then find the unfinished run it made before or record a new one."""
    filename = Path(filename).name or "workflow.yml"
    wf = parse_workflow(text, filename)
    _check_prefix(name_outputs, wf)
    values = bind_inputs(wf, given)
    for name in sorted(collection_inputs(wf)):
        try:
            values[name] = _existing(host, str(values[name]))
        except WarehouseError as e:
            raise wf.error(f"inputs.{name}", f"{values[name]!r}: {e}") from None
    _check_literal_inputs(host, wf)
    _check_known_combined(host, wf, values)
    file_pdh = _store_file(host, text, filename)
    _remember(file_pdh, wf)
    key_text = json.dumps([file_pdh, values, name_outputs], sort_keys=True, default=str)
    run_key = hashlib.sha256(key_text.encode()).hexdigest()
    earlier = runstore.find_resumable(host.engine, run_key, host.user)
    if earlier is not None:
        return StartResult(earlier, True)
    pins: dict[str, list[str | None]] = {}
    for job in wf.jobs.values():
        if job.function not in pins:
            try:
                version = _pin(host, _resolvable(job.function, base_dir))
            except WarehouseError as e:
                raise wf.error(f"jobs.{job.name}.function", str(e)) from None
            pins[job.function] = [version.pdh, version.path, version.commit, version.spec]
    run = runstore.insert_run(
        host.engine,
        {
            "workflow": wf.name,
            "file_pdh": file_pdh,
            "inputs": json.dumps(values, sort_keys=True),
            "pins": json.dumps(pins, sort_keys=True),
            "state": "queued",
            "owner": host.user,
            "name_outputs": name_outputs,
            "run_key": run_key,
        },
        [
            {"node": j.name, "function": j.function, "depends_on": list(j.depends_on)}
            for j in wf.jobs.values()
        ],
    )
    return StartResult(run, False)


def _existing(host: RunHost, key: str) -> str:
    """The PDH ``key`` names now, refused unless the catalog holds that collection
    (a PDH nothing stored would only fail the run once its job is submitted)."""
    pdh = host.resolve(key)
    # Resolving drops a path: refused. Split once resolved, so a name the user
    # may not read fails as one that does not exist, not as holding a path.
    if catalog.split_key(host.engine, key).path:
        raise UsageError("a job reads a whole collection: this names a path inside one")
    require_collection(host.engine, pdh)
    return pdh


def _check_literal_inputs(host: RunHost, wf: Workflow) -> None:
    """Every name or PDH written as a job's input must name a collection now; it is
    still resolved when the job is submitted (docs/workflows.md)."""
    seen: set[str] = set()
    for job in wf.jobs.values():
        parts = job.input.items() if isinstance(job.input, dict) else [("", job.input)]
        for d, part in parts:
            if isinstance(part, Ref) or part in seen:
                continue
            try:
                _existing(host, part)
            except WarehouseError as e:
                key = f"jobs.{job.name}.input" + (f".{d}" if d else "")
                raise wf.error(key, f"{part!r}: {e}") from None
            seen.add(part)


def _check_known_combined(host: RunHost, wf: Workflow, values: Mapping[str, Any]) -> None:
    """A combined input whose parts are all known now (inputs, names, PDHs; no
    job's output) is put together once here: two parts giving one path would
    otherwise only fail the run when its job is submitted."""
    for job in wf.jobs.values():
        if not isinstance(job.input, dict) or any(
            isinstance(p, Ref) and p.name in wf.jobs for p in job.input.values()
        ):
            continue
        parts = job_input(job, values, {})
        assert isinstance(parts, list)
        pdhs = [(d, host.resolve(k)) for d, k in parts]
        manifests = load_manifests(host.store, host.engine, {p for _, p in pdhs})
        try:
            combine([(d, manifests[p] if p in manifests else host.manifest(p)) for d, p in pdhs])
        except WarehouseError as e:
            raise wf.error(f"jobs.{job.name}.input", str(e)) from None


def _resolvable(spec: str, base_dir: Path | None) -> str:
    """A git function with a relative repository path, made absolute against ``base_dir``."""
    if base_dir is None or not spec.startswith("git:"):
        return spec
    repo, at, rest = spec.removeprefix("git:").rpartition("@")
    if repo.startswith(("./", "../")):
        return f"git:{(base_dir / repo).resolve()}{at}{rest}"
    return spec


# Workflows parsed lately, by file PDH (the file is its content, so this cannot go
# stale): the driver of a run just started does not parse a big file again.
_PARSED: dict[str, Workflow] = {}
_PARSED_KEPT = 8


_PARSED_LOCK = threading.Lock()  # a controller's driver thread and its API share it


def _remember(file_pdh: str, wf: Workflow) -> None:
    with _PARSED_LOCK:
        _PARSED.pop(file_pdh, None)
        _PARSED[file_pdh] = wf
        while len(_PARSED) > _PARSED_KEPT:
            del _PARSED[next(iter(_PARSED))]


def load_workflow(host: RunHost, run: RunRecord) -> Workflow:
    """The run's workflow, read back from its stored file."""
    with _PARSED_LOCK:
        wf = _PARSED.get(run.file_pdh)
    if wf is None:
        reader = host.reader(run.file_pdh)
        (filename,) = reader.files
        wf = parse_workflow(reader.read_file(filename).decode("utf-8"), filename)
        _remember(run.file_pdh, wf)
    return wf
