"""The parameters of builtin:mapreduce, checked (pure)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from warehouse.errors import UsageError
from warehouse.jobs.sizes import parse_size
from warehouse.mapreduce.formats import FORMATS

__all__ = ["DEFAULT_MEMORY", "DEFAULT_SPLIT", "MAX_REDUCERS", "PARTITIONERS", "MapReduceSpec"]

DEFAULT_SPLIT = 64 << 20
DEFAULT_MEMORY = 256 << 20
MAX_REDUCERS = 10_000
PARTITIONERS = ("hash", "range")

FunctionSpec = str | Callable[..., Iterable[Any]]


def _size(value: Any, what: str) -> int:
    size = value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(value, str):
        try:
            size = parse_size(value)
        except UsageError:
            size = None
    if size is None or size < 1:
        raise UsageError(f"mapreduce: {what} must be a positive size (bytes, or like 64M)")
    return size


@dataclass(frozen=True)
class MapReduceSpec:
    mapper: FunctionSpec
    reducer: FunctionSpec
    combiner: FunctionSpec | None = None
    reducers: int = 4
    input_format: str = "lines"
    split_size: int = DEFAULT_SPLIT
    sort_memory: int = DEFAULT_MEMORY  # bytes a step sorts in memory before spilling runs
    output_name: str = "part-{:05d}"  # reduce step r writes output_name.format(r)
    code: str | None = None  # the PDH holding the mapper's code, pinned at submission
    partitioner: str = "hash"  # or "range": sampled split points, a total order over parts

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> MapReduceSpec:
        known = {"mapper", "reducer", "combiner", "reducers", "input_format", "split_size"}
        known |= {"sort_memory", "code", "code_commit", "partitioner"}
        unknown = sorted(set(params) - known)
        if unknown:
            raise UsageError(f"mapreduce: unknown parameters {', '.join(unknown)}")
        for name in ("mapper", "reducer"):
            if not isinstance(params.get(name), str) or not params[name].strip():
                raise UsageError(f"mapreduce: the {name} parameter is needed")
        combiner = params.get("combiner")
        if combiner is not None and not isinstance(combiner, str):
            raise UsageError("mapreduce: combiner must be a string")
        reducers = params.get("reducers", 4)
        # bool is an int to Python: `reducers: true` is no count.
        if not isinstance(reducers, int) or isinstance(reducers, bool):
            raise UsageError(f"mapreduce: reducers must be 1 to {MAX_REDUCERS}")
        if not 1 <= reducers <= MAX_REDUCERS:
            raise UsageError(f"mapreduce: reducers must be 1 to {MAX_REDUCERS}")
        fmt = params.get("input_format", "lines")
        if fmt not in FORMATS:
            raise UsageError(f"mapreduce: input_format must be one of {', '.join(FORMATS)}")
        partitioner = params.get("partitioner", "hash")
        if partitioner not in PARTITIONERS:
            raise UsageError(f"mapreduce: partitioner must be one of {', '.join(PARTITIONERS)}")
        if partitioner == "range" and fmt == "whole-file":
            raise UsageError("mapreduce: partitioner range cannot sample whole-file records")
        return cls(
            mapper=params["mapper"],
            reducer=params["reducer"],
            combiner=combiner,
            reducers=reducers,
            input_format=fmt,
            split_size=_size(params.get("split_size", DEFAULT_SPLIT), "split_size"),
            sort_memory=_size(params.get("sort_memory", DEFAULT_MEMORY), "sort_memory"),
            code=params.get("code"),
            partitioner=partitioner,
        )
