"""The shell prelude a sandboxed step's process runs before the step
(warehouse.jobs.prelude): the lifeline told, the control groups joined,
then the step itself in the same process, by vfork rather than a fork of
the manager."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from warehouse.jobs.prelude import before_exec, prelude, startable
from warehouse.limits.cgroups import StepGroup, detect, release, usable
from warehouse.limits.policy import Policy, decide


def _boot() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _start(argv: list[str]) -> tuple[int, int, bytes, bytes]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(timeout=60)
    return proc.pid, proc.returncode, out, err


def test_the_step_runs_as_the_same_process_and_its_status_is_its_own() -> None:
    pid, code, out, _ = _start(prelude(["/bin/sh", "-c", "echo $$; exit 7"], [], None, {}))
    assert code == 7
    assert int(out) == pid  # exec'd: the pid the lifeline and the executor know


def test_the_lifeline_is_told_the_pid_and_a_moment_the_manager_lived() -> None:
    read, write = os.pipe()
    try:
        before = _boot()
        pid, code, _, err = _start(prelude(["/bin/true"], [], (os.getpid(), write), {}))
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
        told = prelude(["/bin/true"], [], (os.getpid(), write), {})
        _, code, _, err = _start(["/bin/sh", "-c", '"$@"; exit $?', "parent", *told])
        assert code == 0, err
        with pytest.raises(BlockingIOError):
            os.read(read, 4096)
    finally:
        os.close(read)
        os.close(write)


def test_a_group_it_cannot_join_stops_it_before_the_step() -> None:
    step = ["/bin/sh", "-c", "echo ran"]
    _, code, out, err = _start(prelude(step, ["/nonexistent/cgroup.procs"], None, {}))
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
        _, code, out, err = _start(prelude(["/bin/cat", "/proc/self/cgroup"], files, None, {}))
        assert code == 0, err
        mine = {os.path.dirname(f) for f in files}
        seen = out.decode()
        for directory in mine:
            # Each hierarchy's line ends with the group's path below its mount.
            assert any(directory.endswith(line.split(":", 2)[2]) for line in seen.splitlines())
    finally:
        group.remove()
        release(host)


@pytest.mark.parametrize(
    "env",
    [
        {"A": "1"},
        # What the shell sets for what it runs, and names its scripts use.
        {"PWD": "/somewhere/else", "SHLVL": "7", "_": "/usr/bin/x", "_whm": "m", "_whpp": "p"},
        {"PWD": "", "IFS": "x", "OPTIND": "9", "PPID": "1", "A": "with spaces\nand a line"},
        {"PS1": "$ ", "PS4": "+", "HOME": "/h", "ENV": "/nonexistent/rc"},
        {"OPTIND": "not a number"},
    ],
)
def test_the_steps_environment_is_exactly_its_own(env: dict[str, str]) -> None:
    dump = [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]
    shell = not any(k.startswith("_wh") for k in env) and env.get("OPTIND", "0").isdigit()
    runs = [prelude(dump, [], None, env)] if shell else []
    if shutil.which("setpriv"):  # outside the sandbox: setpriv and a second shell
        argv, _ = before_exec(
            dump,
            program="python3",
            env=env,
            cwd="/",
            sandboxed=False,
            guard=None,
            lifeline=False,
            tell=None,
        )
        runs.append(argv)
    for argv in runs:
        path = {"PATH": os.environ.get("PATH", os.defpath)}
        proc = subprocess.run(argv, env={**env, **path}, capture_output=True, check=True)
        seen = json.loads(proc.stdout)
        seen.pop("LC_CTYPE", None)  # Python's own coercion of the C locale
        assert seen == {**env, **path}, argv


# A manager that starts one step outside the sandbox as the executor does,
# says its pid and dies at once.
_DIES = """import os, subprocess, sys
from warehouse.jobs.prelude import before_exec
argv, hook = before_exec(
    ["sleep", "300"], program="sleep", env={}, cwd="/", sandboxed=False,
    guard=None, lifeline=True, tell=None,
)
assert hook is None, "started by a fork"
quiet = subprocess.DEVNULL
proc = subprocess.Popen(argv, stdout=quiet, stderr=quiet, preexec_fn=hook, start_new_session=True)
print(proc.pid, flush=True)
while open(f"/proc/{proc.pid}/cmdline", "rb").read().split(b"\\0")[0] != b"sleep":
    pass  # until the step itself runs
os._exit(0)
"""


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return stat[stat.rindex(b")") + 2 :].split()[0].decode()


def test_a_step_outside_the_sandbox_is_stopped_when_its_manager_dies() -> None:
    """By the kernel (PR_SET_PDEATHSIG, asked by setpriv), as the Python hook
    did: the lifeline then kills its group."""
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv here: the Python hook asks for the signal")
    out = subprocess.run(
        [sys.executable, "-c", _DIES], capture_output=True, check=True, timeout=60
    ).stdout
    pid = int(out)
    try:
        deadline = time.monotonic() + 60  # a guard against a hang, not a bound
        while _state(pid) != "T":
            assert time.monotonic() < deadline, _state(pid)
            time.sleep(0.05)
    finally:
        os.kill(pid, signal.SIGKILL)


def test_a_program_that_surely_cannot_start_fails_as_exec_would(tmp_path: Path) -> None:
    """Before any process: a shell would run a file it cannot exec as a
    script of its own, and name the others its own way."""
    text = tmp_path / "notes"
    text.write_text("no interpreter line: not a program\n")
    text.chmod(0o755)
    plain = tmp_path / "plain.sh"
    plain.write_text("#!/bin/sh\nexit 0\n")
    lost = tmp_path / "lost.sh"
    lost.write_text("#!/nonexistent/interpreter\n")
    lost.chmod(0o755)
    with pytest.raises(OSError) as format_error:
        startable(str(text), None, "/")
    assert format_error.value.errno == errno.ENOEXEC
    with pytest.raises(PermissionError):
        startable(str(plain), None, "/")  # not executable
    with pytest.raises(FileNotFoundError, match="/nonexistent/interpreter"):
        startable(str(lost), None, "/")
    with pytest.raises(FileNotFoundError):
        startable("no-such-program-here", "/usr/bin:/bin", "/")
    plain.chmod(0o755)
    startable(str(plain), None, "/")
    startable("sh", "/usr/bin:/bin", "/")
    with pytest.raises(OSError):
        before_exec(
            [str(text)],
            program=str(text),
            env={},
            cwd="/",
            sandboxed=True,
            guard=None,
            lifeline=True,
            tell=None,
        )


def test_a_relative_program_is_found_from_the_steps_directory(tmp_path: Path) -> None:
    """As exec finds it: from the directory the step starts in, not the manager's."""
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "tool.sh"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    startable("bin/tool.sh", None, str(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(FileNotFoundError):
        startable("bin/tool.sh", None, str(elsewhere))
