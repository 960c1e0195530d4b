"""The shell prelude a sandboxed step's process runs before the step
(warehouse.jobs.prelude): the lifeline told, the control groups joined,
then the step itself in the same process, by vfork rather than a fork of
the manager."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from warehouse.jobs.prelude import before_exec, prelude
from warehouse.limits.cgroups import StepGroup, detect, release, usable
from warehouse.limits.policy import Policy, decide


def _boot() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _start(argv: list[str]) -> tuple[int, int, bytes, bytes]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=60)
    return proc.pid, proc.returncode, out, err


def test_the_step_runs_as_the_same_process_and_its_status_is_its_own() -> None:
    pid, code, out, _ = _start(prelude(["/bin/sh", "-c", "echo $$; exit 7"], [], None))
    assert code == 7
    assert int(out) == pid  # exec'd: the pid the lifeline and the executor know


def test_the_lifeline_is_told_the_pid_and_a_moment_the_manager_lived() -> None:
    read, write = os.pipe()
    try:
        before = _boot()
        pid, code, _, err = _start(prelude(["/bin/true"], [], (os.getpid(), write)))
        after = _boot()
        assert code == 0, err
        line = os.read(read, 4096)
    finally:
        os.close(read)
        os.close(write)
    words = line.split()
    assert line.endswith(b"\n") and line.count(b"\n") == 1, line
    assert words[0] == b"+%d" % pid and words[2] == b"?", line
    # The lifeline reads the moment as CLOCK_BOOTTIME seconds (compared with
    # process start ticks): /proc/uptime is that clock in hundredths.
    assert before - 0.011 <= float(words[1]) <= after, (before, line, after)
    # In the lifeline's own arithmetic, not a tick before the step started.
    tick = os.sysconf("SC_CLK_TCK")
    assert int(float(words[1]) * tick) >= int(before * tick)


def test_nothing_is_told_for_a_manager_that_is_not_the_parent() -> None:
    read, write = os.pipe()
    os.set_blocking(read, False)
    try:
        # The teller names this process, alive and holding the pipe, but the
        # step's parent is another (as when the manager's pid was reused).
        told = prelude(["/bin/true"], [], (os.getpid(), write))
        _, code, _, err = _start(["/bin/sh", "-c", '"$@"; exit $?', "parent", *told])
        assert code == 0, err
        with pytest.raises(BlockingIOError):
            os.read(read, 4096)
    finally:
        os.close(read)
        os.close(write)


def test_a_group_it_cannot_join_stops_it_before_the_step() -> None:
    step = ["/bin/sh", "-c", "echo ran"]
    _, code, out, err = _start(prelude(step, ["/nonexistent/cgroup.procs"], None))
    assert code == 126
    assert out == b""
    assert b"limits could not be set" in err


def test_the_step_is_in_its_control_groups() -> None:
    host = detect()
    if host.kind == "rlimit":
        if os.environ.get("CI"):
            pytest.fail("no writable control group with memory and pids controllers here")
        pytest.skip("no writable control group with memory and pids controllers here")
    host = usable(host)
    group = StepGroup(host, decide(1, 1 << 28, 1, 1 << 30, Policy()))
    try:
        files = group.procs_files()
        assert files
        _, code, out, err = _start(prelude(["/bin/cat", "/proc/self/cgroup"], files, None))
        assert code == 0, err
        mine = {os.path.dirname(f) for f in files}
        seen = out.decode()
        for directory in mine:
            # Each hierarchy's line ends with the group's path below its mount.
            assert any(directory.endswith(line.split(":", 2)[2]) for line in seen.splitlines())
    finally:
        group.remove()
        release(host)


def test_a_step_outside_the_sandbox_keeps_its_python_hook() -> None:
    """A shell cannot ask the kernel to stop the step with its manager's
    thread (PR_SET_PDEATHSIG): outside the sandbox the hook stays."""
    argv, hook = before_exec(["/bin/true"], sandboxed=False, guard=None, lifeline=True, tell=None)
    assert argv == ["/bin/true"] and hook is not None
    argv, hook = before_exec(["/bin/true"], sandboxed=True, guard=None, lifeline=True, tell=None)
    assert argv == ["/bin/true"] and hook is None
