"""How a test waits (tests/README.md): for a condition, with a deadline that
guards against a hang and is no bound on speed; and the processes a test
waits on, found by a marker in their arguments no other process has."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path


def wait_for(
    check: Callable[[], object], what: str, timeout: float = 60, every: float = 0.05
) -> None:
    """Until ``check()`` is true; fails naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def processes(marker: str, program: str | None = None) -> list[int]:
    """The pids of the processes with ``marker`` among their arguments (and,
    given ``program``, running it: the base name of their first argument)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone
            continue
        if program is not None and argv[0].rsplit(b"/", 1)[-1] != program.encode():
            continue
        if marker.encode() in argv:
            found.append(int(proc.name))
    return found
