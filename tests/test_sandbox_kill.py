"""A sandboxed step killed as its executor kills it (SIGKILL to bubblewrap's
process group: a cancel, or the lifeline once the manager is gone) leaves no
process behind, also when it runs as the steps' own user (setpriv drops the
kernel's parent-death signal, so --die-with-parent alone would not end it)."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
from pathlib import Path

import pytest

from waiting import processes, wait_for
from warehouse.jobs.sandbox import find_sandbox


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
        wait_for(lambda: len(processes(marker)) == 2, "both sleeps")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        wait_for(lambda: not processes(marker), "no process of the step left")
    finally:
        for pid in processes(marker):
            os.kill(pid, signal.SIGKILL)
        proc.kill()
        proc.wait()
