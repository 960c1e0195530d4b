"""Submitting a job: pin the function, compute the reuse key, reuse or queue.

The reuse key (DESIGN §5.3) is a SHA-256 over the function's collection PDH
and path, the input PDH and the canonical parameters. A job whose key matches
a complete job with a still-readable output is recorded complete at once,
with ``reused_from`` naming the job that really ran.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from warehouse.errors import UsageError, WarehouseError
from warehouse.jobs import records
from warehouse.jobs.functions import pin_code, resolve
from warehouse.jobs.host import SubmitHost
from warehouse.jobs.values import JobRecord

__all__ = ["JobRequest", "canonical_params", "parse_size", "reuse_key", "submit"]


@dataclass(frozen=True)
class JobRequest:
    function: str
    input: str  # a key or name
    params: Mapping[str, Any]
    reuse: bool = True
    priority: int = 0
    cpus: int = 1
    memory: int = 0
    max_attempts: int = 3
    executor: str = "local"


def canonical_params(params: Mapping[str, Any]) -> str:
    return json.dumps(dict(params), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def reuse_key(function_pdh: str, function_path: str, input_pdh: str, params: str) -> str:
    text = json.dumps([function_pdh, function_path, input_pdh, params], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


_SIZE = re.compile(r"(\d+)\s*([kmgt]?)(i?b?)", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``4G``, ``512MiB``, ``1000000`` → bytes (K, M, G, T are powers of 1024)."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise UsageError(f"bad size {text!r} (like 512M or 4G)")
    power: int = " kmgt".index(m.group(2).lower() or " ")
    return int(m.group(1)) * 1024**power  # type: ignore[no-any-return]


def _readable(wh: SubmitHost, pdh: str | None) -> bool:
    if pdh is None:
        return False
    try:
        return all(loc.is_empty or wh.store.exists(loc) for loc in wh.manifest(pdh).blocks())
    except WarehouseError:
        return False


def _pinned(wh: SubmitHost, params: Mapping[str, Any]) -> Mapping[str, Any]:
    """A ``code`` parameter (the collection a function's code is in, e.g. the mapper
    of builtin:mapreduce) is pinned like the function: to a PDH, and a commit."""
    code = params.get("code")
    if not isinstance(code, str):
        return params
    pdh, commit = pin_code(wh, code)
    return {**params, "code": pdh, **({"code_commit": commit} if commit else {})}


def submit(wh: SubmitHost, request: JobRequest) -> JobRecord:
    if request.cpus < 1 or request.memory < 0 or request.max_attempts < 1:
        raise UsageError("cpus and attempts must be at least 1, memory not negative")
    version = resolve(wh, request.function)
    input_pdh = wh.resolve(request.input)
    wh.manifest(input_pdh)  # the input must be a known, readable collection
    params = canonical_params(_pinned(wh, request.params))
    key = reuse_key(version.pdh, version.path, input_pdh, params)
    values: dict[str, Any] = {
        "function": version.spec,
        "function_pdh": version.pdh,
        "function_path": version.path,
        "function_commit": version.commit,
        "input_pdh": input_pdh,
        "params": params,
        "cpus": request.cpus,
        "memory": request.memory,
        "max_attempts": request.max_attempts,
        "priority": request.priority,
        "executor": request.executor,
        "reuse_key": key,
        "submitted_by": wh.user,
        "state": "queued",
    }
    earlier = records.find_reusable(wh.engine, key) if request.reuse else None
    if earlier is not None and _readable(wh, earlier.output_pdh):
        values.update(
            state="complete",
            output_pdh=earlier.output_pdh,
            log_pdh=earlier.log_pdh,
            reused_from=earlier.reused_from or earlier.id,
            steps_done=earlier.steps_done,
        )
        values["finished_at"] = time.time()
    return records.insert_job(wh.engine, values)
