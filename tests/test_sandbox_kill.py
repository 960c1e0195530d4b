"""A sandboxed step killed as its executor kills it (SIGKILL to bubblewrap's
process group: a cancel, or the lifeline once the manager is gone) leaves no
process behind, also when it runs as the steps' own user (setpriv drops the
kernel's parent-death signal, so --die-with-parent alone would not end it)."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest

from warehouse.jobs.sandbox import find_sandbox


def _running(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if marker.encode() in argv:
                found.append(int(name))
    return found


def _wait_for(check: object, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_killed_sandboxed_step_leaves_no_process(tmp_path: Path) -> None:
    sandbox = find_sandbox()
    if sandbox is None:
        pytest.skip("bubblewrap cannot make a sandbox here")
    work = tmp_path / "w"
    (work / "tmp").mkdir(parents=True)
    (work / "result").write_text("")
    sandbox.prepare_scratch(str(work / "tmp"), str(work / "result"))
    marker = f"{4000 + secrets.randbelow(1000)}.{secrets.randbelow(10**6):06d}"
    # The step and a process it started in the background.
    step = ["sh", "-c", f"sleep {marker} & exec sleep {marker}"]
    argv = sandbox.wrap(
        step,
        function_dir=str(work / "tmp"),
        scratch=str(work / "tmp"),
        result=str(work / "result"),
    )
    proc = subprocess.Popen(argv, cwd=work / "tmp", start_new_session=True)  # as the executor
    try:
        _wait_for(lambda: len(_running(marker)) == 2, "both sleeps")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        _wait_for(lambda: not _running(marker), "no process of the step left")
    finally:
        for pid in _running(marker):
            os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()
