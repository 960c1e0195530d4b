"""Reuse of a whole CWL run: the same run again is answered by the first.

The same tool on the same inputs is the same job; so the same documents on
the same inputs, run by the same runner, are the same run. Answering a re-run
job by job still has cwltool build every job and the warehouse look each
one up: most of a 500-way scatter's re-run. Instead, once cwltool has loaded
the documents and the job order, the run's key is worked out (``run_key``),
and a complete run of the same key answers it whole (``serve``): its output
object, its nodes (each reused), and no job submitted. What goes into the
key, and why, is in docs/cwl.md ("Reuse of a whole run").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from cwltool.context import RuntimeContext
from cwltool.process import Process
from cwltool.update import ORIGINAL_CWLVERSION
from cwltool.utils import CWLObjectType  # type: ignore[attr-defined]

from warehouse.cwl._bridge import Bridge
from warehouse.errors import WarehouseError

__all__ = ["OBJECT_FILE", "Served", "as_keep", "keep_object", "portable", "run_key", "serve"]

OBJECT_FILE = "cwl.output.json"
_FORMAT = "wh-cwl-run 1"  # raised when what the key holds changes
_HERE = Path(__file__).parent
# The runner's own code that shapes a job (its command line, the step program):
# changed, the same documents may make other jobs.
_RUNNER_FILES = ("_step.py", "_tool.py", "_bridge.py")
# cwltool options that do not change what a run makes (where its files go,
# what it prints, how many jobs at once); every other option is in the key.
_NOT_MADE = frozenset(
    {
        "workflow",
        "job_order",
        "outdir",
        "basedir",
        "quiet",
        "verbose",
        "debug",
        "enable_color",
        "log_dir",
        "timestamps",
        "tmpdir_prefix",
        "tmp_outdir_prefix",
        "parallel",
        "parallel_max",
        "cachedir",
        "rm_tmpdir",
        "rm_container",
        "move_outputs",
        "doc_cache",
        "no_warnings",
    }
)
_GENERATION = "http://commonwl.org/cwltool#generation"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_ANONYMOUS = re.compile(r"_:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def portable(tool: Any) -> Any:
    """The tool document as its content, not its place: cwltool's ids name
    the file's absolute URI (``file:///home/x/wf.cwl#step/run/f``) and an
    inline tool gets a random ``_:UUID``. Both would make the same tool moved
    or loaded again another function, and so another job. Every ``file://``
    URI is made relative to the directory of the file the tool is written in
    (its own id's, or for an inline tool its first input's or output's), and
    random ids one fixed text; the command line never holds either."""
    first: list[str] = []

    def look(value: Any) -> None:
        if first:
            return
        if isinstance(value, str) and value.startswith("file://"):
            first.append(value)
        elif isinstance(value, dict):
            for key in ("id", "inputs", "outputs"):
                look(value.get(key))
        elif isinstance(value, list):
            for v in value:
                look(v)

    look(tool)
    # Kept quoted: the relative texts stay URI references, as cwltool wrote them.
    base = os.path.dirname(first[0][len("file://") :].split("#", 1)[0]) if first else ""

    def fix(value: Any) -> Any:
        if isinstance(value, str):
            if value.startswith("file://") and base:
                path, hash_, fragment = value[len("file://") :].partition("#")
                return os.path.relpath(path, base) + hash_ + fragment
            return "_:anonymous" if _ANONYMOUS.fullmatch(value) else value
        if isinstance(value, dict):
            return {k: fix(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fix(v) for v in value]
        return value

    return fix(tool)


def _local(resolved: str) -> str:
    return resolved[len("file://") :] if resolved.startswith("file://") else resolved


def as_keep(value: Any, bridge: Bridge, *, every: bool = False) -> Any:
    """The job order with every local file named by its collection
    (``keep:PDH/path``). ``every``: keys in other vocabularies are kept (the
    key needs ``cwl:requirements`` given in a job order; the record does not)."""
    if isinstance(value, dict):
        out = {
            k: as_keep(v, bridge, every=every)
            for k, v in value.items()
            if not k.startswith("http") or (every and k != _GENERATION)
        }
        loc = value.get("location")
        local = isinstance(loc, str) and loc.startswith("file://")
        if value.get("class") in ("File", "Directory") and local:
            pdh, rel = bridge.locate(unquote(_local(str(loc))))
            out["location"] = f"keep:{pdh}/{rel}" if rel else f"keep:{pdh}"
            out.pop("path", None)
        return out
    if isinstance(value, list):
        return [as_keep(v, bridge, every=every) for v in value]
    return value


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """The cwltool options that may change what the run makes, with the
    values of the environment variables the tools are given."""
    found = {k: v for k, v in sorted(vars(args).items()) if k not in _NOT_MADE}
    names = os.environ if args.preserve_entire_environment else args.preserve_environment or []
    found["environment"] = {name: os.environ.get(name) for name in sorted(names)}
    return found


def _processes(process: Process) -> list[Process]:
    """The process and every one it runs (a workflow's steps, theirs…)."""
    found, todo = [], [process]
    while todo:
        p = todo.pop()
        found.append(p)
        for step in getattr(p, "steps", []):
            inner = getattr(step, "embedded_tool", None)
            if isinstance(inner, Process):
                todo.append(inner)
    return found


def _runs_every_time(process: Process) -> bool:
    """Whether a tool asks to run every time (``WorkReuse``, not plainly true)."""
    for r in list(process.requirements) + list(process.hints):
        if str(r.get("class", "")).endswith("WorkReuse") and r.get("enableReuse", True) is not True:
            return True
    return False


def _fetched(value: Any, *, local: bool) -> bool:
    """Whether ``value`` holds a File or Directory at a URL (not ``keep:``);
    ``local``: a local one (``file://``) counts too."""
    if isinstance(value, dict):
        loc = value.get("location")
        if isinstance(loc, str) and _URL.match(loc) and (local or not loc.startswith("file://")):
            return True
        return any(_fetched(v, local=local) for v in value.values())
    if isinstance(value, list):
        return any(_fetched(v, local=local) for v in value)
    return False


def run_key(
    process: Process,
    job_order: CWLObjectType,
    runtime_context: RuntimeContext,
    bridge: Bridge,
    options: dict[str, Any],
) -> str | None:
    """What makes this run the same run; None when it may not be reused whole
    (a tool asks to run every time). Puts the job's local files (each once)."""
    processes = _processes(process)
    if any(_runs_every_time(p) for p in processes):
        return None
    # The job order as the run binds it: defaults filled in, and the top
    # level's secondary files found beside its files (not in the job file).
    # Plain JSON values: cwltool deep-copies the job order, and a parsed one's
    # line and comment records made that most of a 500-way re-run's time.
    plain = json.loads(json.dumps(job_order, default=str))
    context = runtime_context.copy()
    context.toplevel = True
    try:
        bound = process._init_job(plain, context).job
    except Exception:  # bad input (cwltool raises many kinds): said by it as the run starts
        return None
    # A file named by a URL (http://...) is fetched when a job reads it: the
    # same URL may give other content, which the key cannot hold. A local
    # file a document names (a step's default, a staged file) is in the key
    # by its path only; put whole just for the key it could cost much.
    if _fetched(bound, local=False) or any(
        _fetched([p.tool, p.requirements, p.hints], local=True) for p in processes
    ):
        return None
    documents = sorted(
        json.dumps(
            [
                portable(p.tool),
                portable(p.requirements),  # with those from --overrides and the parents'
                portable(p.hints),
                p.metadata.get(ORIGINAL_CWLVERSION),
            ],
            sort_keys=True,
            default=str,
            ensure_ascii=False,
        )
        for p in processes
    )
    runner = [metadata.version("warehouse"), metadata.version("cwltool")]
    runner += [hashlib.sha256((_HERE / f).read_bytes()).hexdigest() for f in _RUNNER_FILES]
    text = json.dumps(
        [
            _FORMAT,
            runner,
            options,
            os.cpu_count(),  # cwltool caps a tool's cores at the machine's
            documents,
            as_keep(bound, bridge, every=True),
            portable(process.metadata.get("cwl:defaults")),
        ],
        sort_keys=True,
        default=str,
        ensure_ascii=False,
    )
    return hashlib.sha256(text.encode()).hexdigest()


def keep_object(bridge: Bridge, output: Any) -> str:
    """A collection holding the run's output object (files as ``keep:``, no
    local paths): what answers the same run again. Its PDH."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            local = value.get("class") in ("File", "Directory")
            return {k: strip(v) for k, v in value.items() if not (local and k == "path")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    with tempfile.TemporaryDirectory(prefix="wh-cwl-object-") as d:
        path = Path(d) / OBJECT_FILE
        path.write_text(json.dumps(strip(output), sort_keys=True, ensure_ascii=False) + "\n")
        with bridge.locked():
            return str(bridge.wh.put([path]).pdh)


@dataclass(frozen=True)
class Served:
    """A run answered whole by run ``run_id``: its ``jobs`` nodes, its output
    object (files as ``keep:``), kept in collection ``kept``, and its outputs
    (name -> PDH)."""

    run_id: int
    jobs: int
    output: dict[str, Any]
    kept: str
    outputs: dict[str, str]
    files: str | None = None  # the collection of the files the object names


def _in_keep(value: Any) -> Iterator[tuple[dict[str, Any], str]]:
    """Every object of ``value`` with a ``keep:`` location, and that location
    without its scheme (``PDH/path``)."""
    if isinstance(value, dict):
        loc = value.get("location")
        if isinstance(loc, str) and loc.startswith("keep:"):
            yield value, loc[len("keep:") :]
        for v in value.values():
            yield from _in_keep(v)
    elif isinstance(value, list):
        for v in value:
            yield from _in_keep(v)


def _keep_pdhs(value: Any) -> set[str]:
    return {where.split("/", 1)[0] for _, where in _in_keep(value)}


def serve(bridge: Bridge, key: str) -> Served | None:
    """Answer the run (recorded, with no node yet) by a complete run of the
    same key whose output collections are all still there; None if none is."""
    earlier = bridge.record.earlier(key)
    if earlier is None or earlier.output_object is None:
        return None
    try:
        with bridge.locked():
            text = bridge.wh.reader(earlier.output_object).read_file(OBJECT_FILE)
            output = json.loads(text)
            outputs = earlier.output_pdhs
            for pdh in _keep_pdhs(output) | set(outputs.values()):
                bridge.wh.manifest(pdh)  # gone (collected) or unreadable: not the answer
    except (WarehouseError, OSError, ValueError):
        return None
    if not isinstance(output, dict):
        return None
    jobs = bridge.record.answered_by(earlier)
    return Served(earlier.id, jobs, output, earlier.output_object, outputs, earlier.output_files)


def served_output(served: Served, bridge: Bridge, outdir: str, *, paths: bool) -> dict[str, Any]:
    """The output object of a served run; ``paths``: its files written into
    ``outdir`` too, each with its local ``path`` (as a run that ran gives)."""
    output: dict[str, Any] = json.loads(json.dumps(served.output))
    if not paths:
        return output
    root = os.path.abspath(outdir)
    for pdh in sorted(_keep_pdhs(output)):
        bridge.write_out(pdh, root)
    for obj, where in list(_in_keep(output)):
        if obj.get("class") in ("File", "Directory"):
            rel = where.partition("/")[2]
            obj["path"] = os.path.join(root, rel) if rel else root
    return output
