"""Mappers, combiners and reducers: Python callables or executables.

- Python: ``MODULE:FUNCTION`` (imported from the job's ``code`` collection,
  else from what the warehouse's Python can import), or the callable itself.
  ``map(record)`` and ``combine(key, values)`` yield ``(key, value)`` pairs;
  ``reduce(key, values)`` yields output lines. Keys and values are ``str``
  (anything else is passed through ``str``); ``lines``, ``fasta`` and
  ``fastq`` records are ``str``, ``whole-file`` records ``bytes``.
- An executable: any other text, a command line (its first word a file of
  the code collection, or a command on PATH) that follows the Hadoop Streaming
  convention: records on stdin, ``key<TAB>value`` lines on stdout (a reducer
  gets sorted ``key<TAB>value`` lines and writes output lines).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from warehouse.errors import UsageError

__all__ = [
    "Executable",
    "Function",
    "MapReduceError",
    "line_batches",
    "load",
    "pair_line",
    "stream_blocks",
    "stream_through",
]

_PYTHON = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
_ENCODING = "utf-8"
_ERRORS = "surrogateescape"  # bytes that are not UTF-8 pass through unchanged
_BLOCK = 1 << 20  # bytes read from an executable at once


class MapReduceError(UsageError):
    """A mapper, combiner or reducer that broke the contract (fails its step)."""


@dataclass(frozen=True)
class Executable:
    argv: list[str]
    cwd: Path | None


Function = Callable[..., Iterable[Any]] | Executable


def load(spec: str | Callable[..., Iterable[Any]], code_dir: Path | None) -> Function:
    if callable(spec):
        return spec
    if _PYTHON.fullmatch(spec):
        module, _, name = spec.partition(":")
        if code_dir is not None and str(code_dir) not in sys.path:
            sys.path.insert(0, str(code_dir))
        try:
            found = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as e:
            raise MapReduceError(f"cannot load {spec}: {e}") from None
        if not callable(found):
            raise MapReduceError(f"{spec} is not callable")
        return found  # type: ignore[no-any-return]
    argv = shlex.split(spec)
    if not argv:
        raise MapReduceError("an empty command")
    if code_dir is not None and (code_dir / argv[0]).is_file():
        entry = code_dir / argv[0]
        entry.chmod(entry.stat().st_mode | 0o111)
        argv[0] = str(entry)
    return Executable(argv, code_dir)


def encode(value: Any) -> bytes:
    """``value`` as bytes (``str`` of it, as UTF-8, undecoded input bytes kept)."""
    if isinstance(value, bytes):
        return value
    text = str(value)
    try:
        return text.encode(_ENCODING, _ERRORS)
    except UnicodeEncodeError as e:  # a lone surrogate not from our decoding
        raise MapReduceError(
            f"{text[:200]!r} is not text that UTF-8 can hold ({e.reason})"
        ) from None


def pair_line(key: Any, value: Any) -> bytes:
    k, v = encode(key), encode(value)
    if b"\t" in k or b"\n" in k:
        raise MapReduceError(f"a key may hold no tab or newline: {k[:200]!r}")
    if b"\n" in v:
        raise MapReduceError(f"a value may hold no newline: {v[:200]!r}")
    return k + b"\t" + v + b"\n"


def decode(data: bytes) -> str:
    return data.decode(_ENCODING, _ERRORS)


def check_pair_line(line: bytes, who: str) -> bytes:
    if b"\t" not in line:
        shown = line.rstrip(b"\n")[:1000].decode(_ENCODING, "replace")
        raise MapReduceError(f"{who} wrote a line without a tab: {shown!r}")
    return line if line.endswith(b"\n") else line + b"\n"


def stream_blocks(
    exe: Executable, feed: Iterable[bytes], env: dict[str, str] | None = None
) -> Iterator[bytes]:
    """Run ``exe`` with ``feed`` on stdin (from a thread) and yield its stdout as it
    comes, in blocks (not cut at lines)."""
    proc = subprocess.Popen(
        exe.argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=exe.cwd,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdin is not None and proc.stdout is not None
    stdin, failure = proc.stdin, []
    stdout = cast(io.BufferedReader, proc.stdout)  # bufsize -1: buffered

    def write() -> None:
        try:
            for chunk in feed:
                stdin.write(chunk)
        except BrokenPipeError:
            pass  # it stopped reading; its exit status tells
        except BaseException as e:  # a bad line from our side: reported below
            failure.append(e)
        finally:
            with contextlib.suppress(BrokenPipeError):
                stdin.close()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        while block := stdout.read1(_BLOCK):
            yield block
    finally:
        stdout.close()
        writer.join()
        status = proc.wait()
    if failure:
        raise failure[0]
    if status != 0:
        raise MapReduceError(f"{shlex.join(exe.argv)} exited with status {status}")


def line_batches(blocks: Iterable[bytes]) -> Iterator[list[bytes]]:
    """Blocks of bytes as lists of whole lines, each ending with a newline (the
    last one given one if it has none)."""
    rest = b""
    for block in blocks:
        data = rest + block if rest else block
        cut = data.rfind(b"\n") + 1
        rest = data[cut:]
        if cut:
            parts = data[:cut].split(b"\n")
            parts.pop()  # empty: after the last newline
            yield [line + b"\n" for line in parts]
    if rest:
        yield [rest + b"\n"]


def stream_through(
    exe: Executable, feed: Iterable[bytes], env: dict[str, str] | None = None
) -> Iterator[bytes]:
    """Run ``exe`` with ``feed`` on stdin; yield its stdout lines (each ending with a newline)."""
    for batch in line_batches(stream_blocks(exe, feed, env)):
        yield from batch
