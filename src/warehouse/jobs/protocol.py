"""The step protocol: the environment a step starts with and the result file it writes.

A step learns what to do from environment variables and reports back by
appending JSON lines to the file named by ``WH_RESULT``::

    {"op": "queue", "level": 1, "input": "./lane1"}
    {"op": "output", "manifest": "./lane1 <locator> 0:42:md5sum.txt\\n"}
    {"op": "intermediate", "manifest": "..."}
    {"op": "counters", "counters": {"records_in": 1200, "records_out": 87}}
    {"op": "reads", "input_bytes": 4096, "blocks": {"cache": 1, "local": 2},
     "block_bytes": {"cache": 1024, "local": 3072}}

Counters reported more than once are added up. Appending (``O_APPEND``,
one ``write`` per line) lets a shell step call ``wh step queue`` and
``wh step output`` as often as it likes. The manager
reads the file after the step exited 0; a step that failed reports nothing.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warehouse.blocks.sources import SOURCES as BLOCK_SOURCES
from warehouse.errors import UsageError

__all__ = [
    "ENV_VARS",
    "LOCATION_VARS",
    "MAX_INPUT_LENGTH",
    "MAX_LEVEL",
    "StepReport",
    "append_record",
    "check_level",
    "check_queue",
    "parse_report",
    "process_environment",
    "step_environment",
]

MAX_INPUT_LENGTH = 4096
# A level is stored in a 32-bit column (SQLite and PostgreSQL alike): a
# larger one from a step must fail that step, not the manager's write.
MAX_LEVEL = 2**31 - 1
MAX_COUNTERS = 64  # distinct counter names one step may report
# A step's blocks or bytes read from one source, at most: far beyond any
# real read, and its sum with others' still fits a 64-bit column.
MAX_READ_COUNT = 2**53
_COUNTER_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")

LOCATION_VARS = ("WH_HOME", "WH_URL", "WH_TOKEN")
# A controller's own secrets are not passed on to steps either.
_NOT_PASSED = (*LOCATION_VARS, "WH_DB_URL", "WH_KEEP_ADMIN_TOKEN")

ENV_VARS = (
    "WH_HOME",
    "WH_URL",
    "WH_TOKEN",
    "WH_JOB",
    "WH_STEP",
    "WH_ATTEMPT",
    "WH_LEVEL",
    "WH_STEP_INPUT",
    "WH_JOB_INPUT",
    "WH_PARAMS",
    "WH_FUNCTION_DIR",
    "WH_SCRATCH",
    "WH_RESULT",
    "TMPDIR",
)


@dataclass
class StepReport:
    outputs: list[str] = field(default_factory=list)
    intermediates: list[str] = field(default_factory=list)
    queued: list[tuple[int, str]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    input_bytes: int | None = None  # bytes of warehouse files read, if it said
    # Blocks and their bytes read per source (blocks.sources), if it said.
    blocks: dict[str, int] | None = None
    block_bytes: dict[str, int] | None = None


def step_environment(
    *,
    location: Mapping[str, str],
    job: int,
    step: int,
    attempt: int,
    level: int,
    step_input: str,
    job_input: str,
    params: str,
    function_dir: str,
) -> dict[str, str]:
    """Every protocol variable except the per-run scratch and result paths.

    ``location`` says where the warehouse is: ``WH_HOME``, or ``WH_URL`` and
    ``WH_TOKEN``; those of this process (and a controller's ``WH_DB_URL`` and
    ``WH_KEEP_ADMIN_TOKEN``) are not passed on.
    """
    return {
        **location,
        "WH_JOB": str(job),
        "WH_STEP": str(step),
        "WH_ATTEMPT": str(attempt),
        "WH_LEVEL": str(level),
        "WH_STEP_INPUT": step_input,
        "WH_JOB_INPUT": job_input,
        "WH_PARAMS": params,
        "WH_FUNCTION_DIR": function_dir,
    }


# (the process environment's raw bytes, what a step inherits of it), kept
# while the environment does not change: comparing costs a microsecond per
# step, decoding it again thirty (the manager's own time per step is ~500).
_inherited_from: tuple[dict[bytes, bytes], dict[str, str]] | None = None


def _inherited() -> dict[str, str]:
    # As the environment is at every launch, not once: a program (or a test)
    # that sets a variable after its first job gives it to later steps.
    global _inherited_from
    raw: dict[bytes, bytes] | None = getattr(os.environ, "_data", None)
    known = _inherited_from
    if raw is not None and known is not None and known[0] == raw:
        return dict(known[1])
    bindir = os.path.dirname(os.path.abspath(sys.executable))
    path = os.environ.get("PATH", "")
    env = {k: v for k, v in os.environ.items() if k not in _NOT_PASSED}
    env["PATH"] = f"{bindir}{os.pathsep}{path}" if path else bindir
    if raw is not None:
        _inherited_from = (dict(raw), env)
    return dict(env)


def process_environment(step_env: Mapping[str, str]) -> dict[str, str]:
    """A step's whole environment where it runs: this process's own as it is
    now (less the warehouse's location and secrets, with our ``wh`` first on
    PATH), then the step's protocol variables. Computed here, not by the
    manager, so a Dask worker on another machine gives its own PATH and HOME,
    and a launch carries only the few variables that differ."""
    env = _inherited()
    env.update(step_env)
    return env


def append_record(path: str | Path, record: dict[str, Any]) -> None:
    """Append one JSON line to the result file in a single write."""
    line = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def check_queue(level: int, text: str) -> None:
    """A step's request to queue a step, checked in the step (``WH_LEVEL`` is
    its own level), so a Python step calling queue(1.5), queue("1") or a
    level below its own gets one clear error at once, not a refused report
    later."""
    _check_queue(level, text)
    own = os.environ.get("WH_LEVEL", "")
    if own.isdigit():
        check_level(int(own), level)


def check_level(own: int, level: int) -> None:
    """Refuse a step at level ``own`` queueing one at a lower ``level``: that
    one would start while steps of ``own`` level run, against the rule that a
    step starts only once every step of a lower level has finished, and the
    steps of the levels above it would never see what it passes on."""
    if level < own:
        raise UsageError(
            f"a step at level {own} cannot queue a step at level {level}: a step queues "
            f"steps at its own level or higher (a step at level L starts only once every "
            f"step of a lower level has finished)"
        )


def _check_queue(level: int, text: str) -> None:
    if not isinstance(level, int) or isinstance(level, bool):
        raise UsageError(f"a step level is a whole number, not {level!r}")
    if not isinstance(text, str):
        raise UsageError(f"a step input is a string, not {text!r}")
    if not 0 <= level <= MAX_LEVEL:
        raise UsageError(f"a step level is 0 to {MAX_LEVEL}, not {level}")
    if len(text) > MAX_INPUT_LENGTH or "\n" in text or "\0" in text:
        raise UsageError(
            f"a step input is one line of at most {MAX_INPUT_LENGTH} characters, no NUL"
        )
    try:  # a lone surrogate (JSON "\ud800", or undecodable bytes in argv) is no text
        text.encode()
    except UnicodeEncodeError:
        raise UsageError(f"a step input is UTF-8 text, not {text!r}") from None


def parse_report(text: str) -> StepReport:
    """The records of a result file; raises UsageError naming the bad line."""
    report = StepReport()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            op = record["op"]
            if op == "queue":
                level, step_input = record["level"], record.get("input", "")
                if (
                    not isinstance(level, int)
                    or isinstance(level, bool)
                    or not isinstance(step_input, str)
                ):
                    raise TypeError("level must be a number and input a string")
                _check_queue(level, step_input)
                report.queued.append((level, step_input))
            elif op in ("output", "intermediate"):
                manifest = record["manifest"]
                if not isinstance(manifest, str):
                    raise TypeError("manifest must be a string")
                (report.outputs if op == "output" else report.intermediates).append(manifest)
            elif op == "counters":
                _add_counters(report.counters, record["counters"])
            elif op == "reads":
                given = record["input_bytes"]
                if not isinstance(given, int) or isinstance(given, bool) or given < 0:
                    raise TypeError("input_bytes must be a whole number 0 or more")
                report.input_bytes = (report.input_bytes or 0) + given
                if "blocks" in record or "block_bytes" in record:
                    report.blocks = _add_reads(report.blocks, record.get("blocks"), "blocks")
                    report.block_bytes = _add_reads(
                        report.block_bytes, record.get("block_bytes"), "block_bytes"
                    )
            else:
                raise ValueError(f"unknown op {op!r}")
        except (ValueError, KeyError, TypeError) as e:
            raise UsageError(f"result file line {n}: {e}") from None
    return report


def _add_reads(total: dict[str, int] | None, given: Any, what: str) -> dict[str, int]:
    """``given`` ({source: whole number}) added to ``total`` (every source)."""
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise TypeError(f"{what} must be an object")
    out = dict(total) if total is not None else dict.fromkeys(BLOCK_SOURCES, 0)
    for source, value in given.items():
        if source not in out:
            raise ValueError(
                f"{what}: unknown source {str(source)[:40]!r} (not {', '.join(BLOCK_SOURCES)})"
            )
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise TypeError(f"{what}: {source} must be a whole number 0 or more")
        out[source] += value
        if out[source] > MAX_READ_COUNT:
            raise ValueError(f"{what}: {source} is over {MAX_READ_COUNT}")
    return out


def _add_counters(total: dict[str, int], counters: Any) -> None:
    if not isinstance(counters, dict):
        raise TypeError("counters must be an object")
    for name, value in counters.items():
        if not _COUNTER_NAME.fullmatch(name):
            raise ValueError(f"counter name {name!r} is not [a-z][a-z0-9_]*, at most 64")
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"counter {name!r} must be an integer")
        total[name] = total.get(name, 0) + value
    if len(total) > MAX_COUNTERS:
        raise ValueError(f"more than {MAX_COUNTERS} counters")
