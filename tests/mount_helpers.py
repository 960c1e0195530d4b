"""What the mount tests need: FUSE (/dev/fuse, fusermount3) and pyfuse3, and
``wh mount`` run as a real process that is always unmounted afterwards.

Where FUSE or pyfuse3 is missing the tests are skipped, except in CI (``CI``
set), where `make test` installs them and a missing one fails the run.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from conftest import WH_BIN

# Generous: the machine may be slow and busy; no test relies on speed.
DEADLINE = 60.0


def fuse_or_skip() -> None:
    """Skip the module (fail it under CI) where a mount cannot be made."""
    problem = ""
    if importlib.util.find_spec("pyfuse3") is None:
        problem = "pyfuse3 is not installed (`make install` installs the [mount] extra)"
    elif not os.path.exists("/dev/fuse"):
        problem = "no /dev/fuse"
    elif shutil.which("fusermount3") is None:
        problem = "no fusermount3 (`make install-fuse` installs Debian's fuse3)"
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"mount tests: {problem}; CI must run them", pytrace=False)
        pytest.skip(problem, allow_module_level=True)


def wait_for(what: str, condition: Callable[[], bool], deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"waited {deadline:g} s for {what}")
        time.sleep(0.05)


def _unmount(where: Path) -> None:
    """A last resort where the process did not unmount: lazily, so a test
    never leaves a mount behind even if the server hangs."""
    if os.path.ismount(where):
        subprocess.run(["fusermount3", "-u", "-z", str(where)], check=False, timeout=DEADLINE)


@contextmanager
def mounted(where: Path, env: dict[str, str], *options: str) -> Iterator[subprocess.Popen[str]]:
    """``wh mount WHERE`` in ``env``, yielded once the mount answers; on
    leaving it is asked to stop (SIGINT), then unmounted and killed if it did not."""
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [WH_BIN, "mount", str(where), *options],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for("the mount", lambda: os.path.ismount(where) or proc.poll() is not None)
        if proc.poll() is not None:
            raise AssertionError(f"wh mount exited {proc.returncode}: {proc.communicate()}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            with suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=DEADLINE)
        _unmount(where)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=DEADLINE)
        proc.communicate()
