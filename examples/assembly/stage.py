"""What every stage script does around the assembly code: read params and files, write files."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NoReturn

from warehouse import step


def params() -> dict[str, Any]:
    return step.params()


def k() -> int:
    import dbg

    try:
        return dbg.check_k(params().get("k", 31))
    except ValueError as e:
        fail(str(e))


def k_from(path: str) -> int:
    """k as an earlier stage fixed it (``k=auto`` is decided once, by preprocess)."""
    import dbg

    return dbg.check_k(json.loads(read(path))["k"])


def fail(message: str) -> NoReturn:
    """End the step with one line (the end of its log, as `wh job show` shows it), no traceback."""
    raise SystemExit(f"Error: {message}")


def files(under: str = "") -> list[str]:
    """The input's file paths (under a directory of a combined input), sorted."""
    prefix = under.rstrip("/") + "/" if under else ""
    return sorted(p for p in step.reader().files if p.startswith(prefix))


def read(path: str) -> bytes:
    return step.reader().read_file(path)


def auto(value: Any, default: int, name: str) -> int:
    """A length parameter: ``auto`` gives ``default``."""
    if value in (None, "auto"):
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        fail(f"{name} must be a whole number or auto, not {value!r}")
    return value


def switch(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        fail(f"{name} must be true or false, not {value!r}")
    return value


def write(
    outputs: Mapping[str, bytes | Iterable[bytes]], counters: Mapping[str, int] | None = None
) -> None:
    """Write the output files in name order (a file may be chunks, made as they are written)."""
    out = step.StreamWriter(".")
    for name in sorted(outputs):
        data = outputs[name]
        out.add_file(name, [data] if isinstance(data, bytes) else data)
    step.output(out.finish())
    if counters:
        step.counters(**counters)


def dumps(value: Any) -> bytes:
    return (json.dumps(value, indent=1, sort_keys=True) + "\n").encode()
