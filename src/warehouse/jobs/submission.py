"""Submitting a job: pin the function, compute the reuse key, reuse or queue.

The reuse key (DESIGN §5.3) is a SHA-256 over the function's collection PDH
and path, the input PDH and the canonical parameters. A job whose key matches
a complete job with a still-readable output is recorded complete at once,
with ``reused_from`` naming the job that really ran.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from warehouse.catalog.grants import readable_among
from warehouse.catalog.names import split_key
from warehouse.collection.records import load_manifests
from warehouse.errors import NotFoundError, UsageError, WarehouseError
from warehouse.jobs import jobstore
from warehouse.jobs.functions import FunctionVersion, pin_code, resolve
from warehouse.jobs.jobhost import SubmitHost
from warehouse.jobs.jobrecords import JobRecord
from warehouse.manifest import Manifest

__all__ = [
    "MAX_PARAMS_BYTES",
    "JobRequest",
    "Recorded",
    "canonical_params",
    "reuse_key",
    "submit",
    "submit_many",
]


# Called with the new jobs inside the transaction inserting them.
Recorded = Callable[[sa.Connection, list[JobRecord]], None]


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
MAX_PARAMS_BYTES = 120 << 10


def _all_readable(
    wh: SubmitHost, pdhs: Iterable[str], manifests: dict[str, Manifest] | None
) -> dict[str, bool]:
    """Whether each earlier output can still be read: its manifest and every block."""
    cache = manifests if manifests is not None else {}
    pdhs = list(pdhs)
    cache.update(load_manifests(wh.store, wh.engine, [p for p in pdhs if p not in cache]))
    out: dict[str, bool] = {}
    for pdh in pdhs:
        manifest = cache.get(pdh)
        try:
            out[pdh] = manifest is not None and all(
                loc.is_empty or wh.store.exists(loc) for loc in manifest.blocks()
            )
        except WarehouseError:
            out[pdh] = False
    return out


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
    # What a caller of the library may get wrong that the CLI's options rule out.
    if not isinstance(request.params, Mapping) or not all(
        isinstance(k, str) for k in request.params
    ):
        raise UsageError("params must be a mapping of names to JSON values")
    try:
        json.dumps(dict(request.params), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise UsageError(f"params must be JSON values: {e}") from None
    name = request.executor
    if name not in ("local", "dask", "slurm") and not name.startswith(("dask:", "slurm:")):
        # No manager would ever take the job: it would stay queued.
        raise UsageError(
            f"unknown executor {name!r} (local, dask, dask:ADDRESS, slurm or slurm:PARTITION)"
        )
    if request.cpus < 1 or request.memory < 0 or request.max_attempts < 1:
        raise UsageError("cpus and attempts must be at least 1, memory not negative")
    # The catalog keeps these in 32-bit columns (memory: 64-bit).
    small = (request.cpus, request.max_attempts, abs(request.priority))
    if max(small) > _MAX_INT or request.memory > _MAX_BIG:
        raise UsageError(
            f"cpus, attempts and priority must be within ±{_MAX_INT}, memory under 2**63 bytes"
        )


def _whole_input(wh: SubmitHost, given: str) -> None:
    """A job reads a whole collection: a path after the key would be dropped
    without a word (the job then ran on everything), so it is refused. Asked
    once the input resolved, so a name the submitter may not read fails as
    one that does not exist (a name may hold "/": the catalog splits)."""
    inside = split_key(wh.engine, given).path
    if inside:
        raise UsageError(
            f"input {given!r} names {inside!r} inside a collection: "
            "a job's input is a whole collection (a PDH or a name)"
        )


def _job_row(
    wh: SubmitHost, request: JobRequest, version: FunctionVersion | None, checked: set[str]
) -> dict[str, Any]:
    """A queued job's row (reuse not yet looked at); ``checked``: inputs known readable."""
    _check(request)
    version = version or resolve(wh, request.function)
    input_pdh = wh.resolve(request.input)
    _whole_input(wh, request.input)
    if input_pdh not in checked:
        wh.manifest(input_pdh)  # the input must be a known, readable collection
        checked.add(input_pdh)
    pinned = _pinned(wh, request.params)
    if version.spec == "builtin:mapreduce":
        from warehouse.mapreduce.spec import MapReduceSpec

        MapReduceSpec.from_params(pinned)  # refused now, not by its first step
    params = canonical_params(pinned)
    if len(params.encode()) > MAX_PARAMS_BYTES:
        # A step gets them in one environment variable, which the kernel
        # bounds (128 KiB): a bigger one could start no step of any job.
        raise UsageError(
            f"params: {len(params.encode())} bytes as JSON, at most {MAX_PARAMS_BYTES}: "
            "put big values in a collection and pass its key"
        )
    return {
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


def _submitter_reads(
    wh: SubmitHost, rows: list[dict[str, Any]], made_of: Mapping[str, Sequence[str]]
) -> None:
    """Every collection a job reads (its function's, its input, a ``code``
    parameter's) must be its submitter's to read, whoever submits for it:
    the API's host checks as it resolves, a workflow's driver or Regol in
    the background does not. Built-in and git functions are stored for the
    submitter from code it named, so are not asked about."""
    wanted: list[str] = []
    for row in rows:
        if not row["function"].startswith(("builtin:", "git:")):
            wanted.append(row["function_pdh"])
        wanted.append(row["input_pdh"])
        params = json.loads(row["params"])
        if isinstance(params.get("code"), str) and "code_commit" not in params:
            wanted.append(params["code"])
    # A collection recorded with these jobs (a workflow's combined input) is
    # not in the catalog yet: what it is made of is asked about instead.
    wanted = [p for w in wanted for p in made_of.get(w, (w,))]
    readable = readable_among(wh.engine, wh.user, wanted)
    for pdh in wanted:
        if pdh not in readable:
            raise NotFoundError(f"no collection {pdh}")


def submit(
    wh: SubmitHost, request: JobRequest, *, version: FunctionVersion | None = None
) -> JobRecord:
    """Queue the job, or record it complete at once from reuse.

    ``version``: the function already pinned (a workflow pins each once per run).
    """
    (record,) = submit_many(wh, [(request, version)])
    return record


def submit_many(
    wh: SubmitHost,
    requests: Sequence[tuple[JobRequest, FunctionVersion | None]],
    *,
    known: Iterable[str] = (),
    manifests: dict[str, Manifest] | None = None,
    then: Recorded | None = None,
    made_of: Mapping[str, Sequence[str]] | None = None,
) -> list[JobRecord]:
    """Submit many jobs in one transaction (a workflow's ready jobs), each as
    ``submit`` would, with each input and earlier output looked at once.

    ``known``: input PDHs the caller has just read or recorded (not read again).
    ``manifests``: a cache by PDH of the manifests read (filled in here).
    ``then``: called with the new jobs inside the transaction that inserts
    them, to record them elsewhere too (all of it is kept, or none).
    ``made_of``: collections ``then`` records, by the collections they are
    made of (the submitter must read those).
    """
    checked: set[str] = set(known)
    rows = [_job_row(wh, request, version, checked) for request, version in requests]
    _submitter_reads(wh, rows, made_of or {})
    keys = [r["reuse_key"] for r, (q, _) in zip(rows, requests, strict=True) if q.reuse]
    earlier = jobstore.find_reusable_many(wh.engine, keys) if keys else {}
    # An earlier job is handed over only if the submitter may read what it
    # made: else reuse would give away another user's output (and its log).
    made = {p for f in earlier.values() for p in (f.output_pdh, f.log_pdh) if p is not None}
    theirs = readable_among(wh.engine, wh.user, made) if made else set()
    readable: dict[str, bool] = {}
    outputs = {f.output_pdh for f in earlier.values() if f.output_pdh in theirs}
    if outputs:
        readable = _all_readable(wh, outputs, manifests)
    now = time.time()
    for row, (request, _) in zip(rows, requests, strict=True):
        found = earlier.get(row["reuse_key"]) if request.reuse else None
        if (
            found is None
            or not readable.get(found.output_pdh or "")
            or (found.log_pdh is not None and found.log_pdh not in theirs)
        ):
            continue
        row.update(
            state="complete",
            output_pdh=found.output_pdh,
            log_pdh=found.log_pdh,
            reused_from=found.reused_from or found.id,
            steps_done=found.steps_done,
            finished_at=now,
        )
    return jobstore.insert_jobs(wh.engine, rows, then=then)
