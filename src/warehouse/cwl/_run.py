"""One CWL run, as the ``cwl-runner`` conventions want it.

``run_cwl`` takes cwltool's own command line (so every ``cwl-runner``
option works: ``--outdir``, ``--basedir``, ``--quiet``…), runs it through
cwltool's ``main`` with our tool factory and executor, and prints the output
object as JSON with every file named in a collection (``keep:PDH/path``).
Exit status: 0 success, 1 the run failed, 2 a bad document or job file, 33
a requirement not supported. cwltool's errors become one ``Error:`` line.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable
from typing import IO, Any
from urllib.parse import unquote, urlparse

from warehouse.errors import UsageError, WarehouseError

__all__ = ["BAD_INPUT", "UNSUPPORTED", "RunOptions", "run_cwl"]

BAD_INPUT = 2
UNSUPPORTED = 33

# cwltool's first words for a document or job file it refused (it exits 1 for these too).
_REFUSED = (
    "Tool definition failed validation",
    "Tool definition file does not exist",
    "Input object failed validation",
    "I'm sorry, I couldn't load this CWL file",
    "CWL document required",
)
_REFUSED_INSIDE = ("Invalid job input record",)


class _Errors(logging.Handler):
    """Keeps cwltool's error messages (shown as one line at the end)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _below_error(record: logging.LogRecord) -> bool:
    return record.levelno < logging.ERROR


def _one_line(message: str) -> str:
    message = message.replace(", try again with --debug for more information", "")
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    text = " ".join(lines)
    return text if len(text) <= 500 else text[:497] + "..."


class RunOptions:
    def __init__(
        self,
        *,
        reuse: bool = True,
        executor: str | None = None,
        summary: bool | None = None,
        local_paths: bool = True,
        name_outputs: str | None = None,
    ) -> None:
        self.name_outputs = name_outputs  # --name-outputs PREFIX
        self.reuse = reuse
        self.executor = executor
        self.summary = summary  # the jobs ran and reused, on stderr (None: unless --quiet)
        self.local_paths = local_paths  # output objects keep the path in --outdir


def _visit(value: Any, fn: Callable[[dict[str, Any]], None]) -> None:
    if isinstance(value, dict):
        if value.get("class") in ("File", "Directory"):
            fn(value)
        for v in value.values():
            _visit(v, fn)
    elif isinstance(value, list):
        for v in value:
            _visit(v, fn)


def _job_file(path: str, bridge: Any) -> str | None:
    """A copy of job file ``path`` with ``keep:``/``wh:`` locations written out
    locally and relative ones made absolute; None when it names none."""
    from schema_salad.utils import yaml_no_ts

    with open(path, encoding="utf-8") as f:
        text = f.read()
    if "keep:" not in text and "wh:" not in text:
        return None
    try:
        doc = yaml_no_ts().load(text)
    except Exception as e:  # ruamel raises many kinds for bad YAML
        raise UsageError(f"{path}: bad YAML: {_one_line(str(e))}") from None
    base = os.path.dirname(os.path.abspath(path))
    doc = json.loads(json.dumps(doc, default=str))

    def fix(obj: dict[str, Any]) -> None:
        for key in ("location", "path"):
            value = obj.get(key)
            if not isinstance(value, str):
                continue
            if value.startswith(("keep:", "wh:")):
                obj.pop("path", None)
                obj["location"] = bridge.fetch(value.split(":", 1)[1])
                return
            if "://" not in value and not os.path.isabs(value):
                obj[key] = os.path.join(base, value)

    _visit(doc, fix)
    fd, name = tempfile.mkstemp(suffix=".json", prefix="wh-cwl-job-")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(doc, out)
    return name


def _local_files(value: Any) -> list[tuple[dict[str, Any], str]]:
    found: list[tuple[dict[str, Any], str]] = []

    def take(obj: dict[str, Any]) -> None:
        loc = obj.get("location", "")
        if isinstance(loc, str) and loc.startswith("file://"):
            found.append((obj, unquote(urlparse(loc).path)))

    _visit(value, take)
    return found


def _tops(found: list[tuple[dict[str, Any], str]]) -> list[tuple[str, bool]]:
    every = sorted({(p, o["class"] == "Directory") for o, p in found})
    return [(p, d) for p, d in every if not any(q != p and p.startswith(q + "/") for q, _ in every)]


def _each_output(output: Any, bridge: Any, outdir: str) -> dict[str, str]:
    """A collection for each output holding files (what --name-outputs names)."""
    from warehouse.cwl._bridge import output_collection

    made = {}
    if isinstance(output, dict):
        for name, value in output.items():
            found = _local_files(value)
            if found:
                made[name] = output_collection(bridge, outdir, _tops(found))
    return made


def _to_keep(output: Any, bridge: Any, outdir: str, *, paths: bool) -> str | None:
    """Name every file of the output object in one collection; its PDH.
    ``paths``: each keeps its ``path`` in ``outdir`` too (files written there)."""
    from warehouse.cwl._bridge import output_collection

    found = _local_files(output)
    if not found:
        return None
    pdh = output_collection(bridge, outdir, _tops(found))
    root = os.path.realpath(outdir)
    for obj, path in found:
        rel = os.path.relpath(os.path.realpath(path), root).replace(os.sep, "/")
        obj["location"] = f"keep:{pdh}/{rel}" if rel != "." else f"keep:{pdh}"
        if paths:
            obj["path"] = path
        else:
            obj.pop("path", None)
    return pdh


def run_cwl(
    argv: list[str],
    *,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    options: RunOptions | None = None,
) -> int:
    """Run ``argv`` (cwltool's options, the document, the job file); the exit status."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    options = options or RunOptions()
    try:
        return _run(argv, out, err, options)
    except WarehouseError as e:
        print(f"Error: {e}", file=err)
        return e.exit_code


def _run(argv: list[str], out: IO[str], err: IO[str], options: RunOptions) -> int:
    import cwltool.main
    from cwltool.argparser import arg_parser
    from cwltool.context import LoadingContext

    import warehouse
    from warehouse.cwl._bridge import Bridge
    from warehouse.cwl._record import check_prefix
    from warehouse.cwl._tool import Executor, make_tool
    from warehouse.cwl._whole import keep_object, served_output, settings
    from warehouse.embedded import EmbeddedWarehouse
    from warehouse.remote.warehouse import RemoteWarehouse

    parser = arg_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse has printed its usage line
        return BAD_INPUT if e.code else 0
    check_prefix(options.name_outputs)
    wh = warehouse.open()
    if not isinstance(wh, EmbeddedWarehouse | RemoteWarehouse):
        wh.close()
        raise UsageError("wh cwl runs on an embedded warehouse or through a controller")
    bridge = Bridge(wh, executor=options.executor, name_outputs=options.name_outputs)
    job_copy: str | None = None
    errors = _Errors()
    shown = logging.StreamHandler(err)
    shown.addFilter(_below_error)  # errors become the one Error: line below
    cwl_log = logging.getLogger("cwltool")
    cwl_log.addHandler(errors)
    try:
        document = (args.workflow or "").split("#", 1)[0]
        if document and "://" not in document and not os.path.exists(document):
            raise UsageError(f"no CWL document {document}")
        if args.job_order and os.path.isfile(args.job_order[0]):
            job_copy = _job_file(args.job_order[0], bridge)
            if job_copy is not None:
                if not args.basedir:
                    args.basedir = os.path.dirname(os.path.abspath(args.job_order[0]))
                args.job_order[0] = job_copy
        loading = LoadingContext()
        loading.construct_tool_object = make_tool
        printed = io.StringIO()
        # A summary written to a file is cwltool's to write: such a run is not reused whole.
        whole = None if args.write_summary else settings(args)
        executor = Executor(bridge, reuse=options.reuse, settings=whole)
        code = cwltool.main.main(
            args=args,
            stdout=printed,
            stderr=err,
            logger_handler=shown,
            executor=executor,
            loadingContext=loading,
        )
        if bridge.refused is not None:
            raise bridge.refused
        if code == 0 and bridge.record.run_id is None:
            # Nothing ran (--version, --validate, --print-dot, --print-deps...):
            # what cwltool printed is its answer, not an output object.
            out.write(printed.getvalue())
            return 0
        served = executor.served if code == 0 else None
        result = json.loads(printed.getvalue()) if code == 0 and printed.getvalue().strip() else {}
        kept = None  # the output object's collection
        files = None  # the collection of the files it names
        if served is not None:
            result = served_output(served, bridge, args.outdir, paths=options.local_paths)
            outputs, kept, files = served.outputs, served.kept, served.files
        else:
            outputs = _each_output(result, bridge, args.outdir) if code == 0 else {}
        if code == 0 and served is None:
            files = _to_keep(result, bridge, args.outdir, paths=options.local_paths)
            if whole is not None and bridge.remote is None:
                kept = keep_object(bridge, result)
        state = "complete" if code == 0 else "cancelled" if bridge.record.cancelled() else "failed"
        failed = [f.job.id for f in bridge.finished if f.exit_code is None]
        why = None
        if code != 0:
            first = _one_line(errors.messages[0]) if errors.messages else "the run failed"
            why = f"job {failed[0]} failed: {first}" if failed else first
        naming = bridge.record.finish(state, outputs, why, kept, files)
        if naming is not None and code == 0:
            errors.messages.insert(0, naming)
            code = 1
        elif code == 0 and (printed.getvalue().strip() or served is not None):
            json.dump(result, out, indent=4, ensure_ascii=False)
            out.write("\n")
        elif code == 0:
            out.write(printed.getvalue())
        ran = sum(1 for f in bridge.finished if not f.reused)
        summary = not args.quiet if options.summary is None else options.summary
        count = len(bridge.finished) if served is None else served.jobs
        if (count or served is not None) and summary:
            jobs = f"{count} job" + ("s" if count != 1 else "")
            idle = " (0 steps run)" if ran == 0 else ""
            whole_run = f": the whole run reused from run {served.run_id}" if served else ""
            print(f"wh cwl: {jobs}: {ran} ran, {count - ran} reused{idle}{whole_run}", file=err)
        if code != 0:
            message = errors.messages[0] if errors.messages else "the run failed"
            refused = message.startswith(_REFUSED) or any(m in message for m in _REFUSED_INSIDE)
            if code == 1 and refused:
                code = BAD_INPUT
            print(f"Error: {_one_line(message)}", file=err)
        return code
    finally:
        with contextlib.suppress(WarehouseError):  # the error said already comes first
            bridge.record.finish("failed", {}, "the runner stopped")  # unless finished already
        cwl_log.removeHandler(errors)
        cwl_log.removeHandler(shown)
        bridge.close()
        wh.close()
        if job_copy is not None:
            os.unlink(job_copy)
