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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from warehouse.errors import UsageError, WarehouseError
from warehouse.jobs import records
from warehouse.jobs.functions import FunctionVersion, pin_code, resolve
from warehouse.jobs.host import SubmitHost
from warehouse.jobs.values import JobRecord
from warehouse.manifest import Manifest

__all__ = [
    "JobRequest",
    "canonical_params",
    "parse_size",
    "reuse_key",
    "submit",
    "submit_many",
]


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


_MAX_INT, _MAX_BIG = 2**31 - 1, 2**63 - 1
_SIZE = re.compile(r"(\d+)\s*([kmgt]?)(i?b?)", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``4G``, ``512MiB``, ``1000000`` → bytes (K, M, G, T are powers of 1024)."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise UsageError(f"bad size {text!r} (like 512M or 4G)")
    power: int = " kmgt".index(m.group(2).lower() or " ")
    return int(m.group(1)) * 1024**power  # type: ignore[no-any-return]


def _readable(
    wh: SubmitHost, pdh: str | None, manifests: dict[str, Manifest] | None = None
) -> bool:
    if pdh is None:
        return False
    try:
        manifest = manifests.get(pdh) if manifests is not None else None
        if manifest is None:
            manifest = wh.manifest(pdh)
            if manifests is not None:
                manifests[pdh] = manifest
        return all(loc.is_empty or wh.store.exists(loc) for loc in manifest.blocks())
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


def _given_name(given: str, input_pdh: str) -> str | None:
    """What the input was submitted as, when that says more than its PDH (a name)."""
    return None if given.strip() == input_pdh else given.strip()


def _check(request: JobRequest) -> None:
    if request.cpus < 1 or request.memory < 0 or request.max_attempts < 1:
        raise UsageError("cpus and attempts must be at least 1, memory not negative")
    # The catalog keeps these in 32-bit columns (memory: 64-bit).
    small = (request.cpus, request.max_attempts, abs(request.priority))
    if max(small) > _MAX_INT or request.memory > _MAX_BIG:
        raise UsageError(
            f"cpus, attempts and priority must be within ±{_MAX_INT}, memory under 2**63 bytes"
        )


def submit(
    wh: SubmitHost, request: JobRequest, *, version: FunctionVersion | None = None
) -> JobRecord:
    """Queue the job, or record it complete at once from reuse.

    ``version``: the function already pinned (a workflow pins each once per run).
    """
    _check(request)
    if version is None:
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
        "input_name": _given_name(request.input, input_pdh),
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


def submit_many(
    wh: SubmitHost,
    requests: Sequence[tuple[JobRequest, FunctionVersion | None]],
    *,
    known: Iterable[str] = (),
    manifests: dict[str, Manifest] | None = None,
) -> list[JobRecord]:
    """Submit many jobs in one transaction (a workflow's ready jobs): the same
    checks and reuse as ``submit``, with each input and earlier output looked at once.

    ``known``: input PDHs the caller has just read or recorded (not read again).
    ``manifests``: a cache by PDH of the manifests read (filled in here).
    """
    checked: set[str] = set(known)
    readable: dict[str, bool] = {}
    rows: list[dict[str, Any]] = []
    for request, version in requests:
        _check(request)
        version = version or resolve(wh, request.function)
        input_pdh = wh.resolve(request.input)
        if input_pdh not in checked:
            wh.manifest(input_pdh)
            checked.add(input_pdh)
        params = canonical_params(_pinned(wh, request.params))
        rows.append(
            {
                "function": version.spec,
                "function_pdh": version.pdh,
                "function_path": version.path,
                "function_commit": version.commit,
                "input_pdh": input_pdh,
                "input_name": _given_name(request.input, input_pdh),
                "params": params,
                "cpus": request.cpus,
                "memory": request.memory,
                "max_attempts": request.max_attempts,
                "priority": request.priority,
                "executor": request.executor,
                "reuse_key": reuse_key(version.pdh, version.path, input_pdh, params),
                "submitted_by": wh.user,
                "state": "queued",
            }
        )
    keys = [r["reuse_key"] for r, (q, _) in zip(rows, requests, strict=True) if q.reuse]
    earlier = records.find_reusable_many(wh.engine, keys) if keys else {}
    now = time.time()
    for row, (request, _) in zip(rows, requests, strict=True):
        found = earlier.get(row["reuse_key"]) if request.reuse else None
        if found is None or found.output_pdh is None:
            continue
        if found.output_pdh not in readable:
            readable[found.output_pdh] = _readable(wh, found.output_pdh, manifests)
        if readable[found.output_pdh]:
            row.update(
                state="complete",
                output_pdh=found.output_pdh,
                log_pdh=found.log_pdh,
                reused_from=found.reused_from or found.id,
                steps_done=found.steps_done,
                finished_at=now,
            )
    return records.insert_jobs(wh.engine, rows)
