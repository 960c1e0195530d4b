"""The step that runs one CommandLineTool invocation (stored as the function's entry).

The runner hands over everything cwltool decided as parameters: the command
line, its environment, stdin/stdout/stderr, the exit codes that count as
success, and the three paths the command line was written against (output,
temporary and staging directories, fixed so that the same invocation always
has the same parameters and so the same reuse key). The job's input holds
the staged files under ``stage/`` and the initial working directory under
``out/``. This step lays them out under its scratch directory, puts the
scratch paths in place of the fixed ones, runs the command in ``out`` and
reports everything left there as its output; the exit status goes into the
counter ``exit_code``.

It imports only the standard library and ``warehouse.step``: it runs as a
plain Python step on any executor.
"""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from warehouse import step

# Where each fixed path of the plan lies under the scratch directory.
_PLACES = {"out": "out", "tmp": "tmp", "stage": "stage"}


def _rewriter(fixed: dict[str, str], scratch: Path, *, back: bool = False) -> Any:
    real = {fixed[k]: str(scratch / v) for k, v in _PLACES.items() if fixed.get(k)}
    if back:  # the scratch paths a command wrote, as the runner knows them
        real = {v: k for k, v in real.items()}
    # Longest first, and only at a path boundary: /var/spool/cwl must not
    # rewrite /var/spool/cwlx.
    names = sorted(real, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(n) for n in names) + r"(?=/|$|[^\w.-])")

    def rewrite(text: str) -> str:
        return pattern.sub(lambda m: real[m.group(0)], text)

    return rewrite


def _lay_out(scratch: Path) -> None:
    """Write the job's input files where the plan expects them (writable copies)."""
    reader = step.reader()
    for rel in reader.files:
        top, _, rest = rel.partition("/")
        if top not in ("stage", "out") or not rest:
            continue
        target = scratch / top / rest
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as f:
            for chunk in reader.iter_file(rel):
                f.write(chunk)
    for d in step.input_manifest().empty_directories():
        top, _, rest = d.partition("/")
        if top in ("stage", "out") and rest:
            (scratch / top / rest).mkdir(parents=True, exist_ok=True)


def _status(code: int, plan: dict[str, Any]) -> bool:
    # As cwltool decides it: listed codes first, then 0 is success.
    if code in plan.get("success", []):
        return True
    if code in plan.get("temporary_fail", []) or code in plan.get("permanent_fail", []):
        return False
    return code == 0


def _chunks(f: BinaryIO) -> Iterator[bytes]:
    while chunk := f.read(1 << 20):
        yield chunk


def _inside(path: str, top: str) -> bool:
    real = os.path.realpath(path)
    return real == top or real.startswith(top + os.sep)


def _report(out: Path, scratch: Path) -> None:
    """Everything under ``out``, one stream per directory. Links are followed
    only within the scratch directory: one to a file elsewhere (/etc, another
    job's files) is not the tool's output (CWL: such a link is not retrieved)."""
    top = os.path.realpath(scratch)
    lines: list[str] = []
    for root, dirs, files in os.walk(out, followlinks=True):
        dirs[:] = sorted(d for d in dirs if _inside(os.path.join(root, d), top))
        files = [f for f in files if _inside(os.path.join(root, f), top)]
        rel = os.path.relpath(root, out)
        name = "." if rel == "." else "./" + rel
        writer = step.StreamWriter(name)
        for f in sorted(files):
            path = os.path.join(root, f)
            try:
                if not stat.S_ISREG(os.stat(path).st_mode):
                    continue  # a dangling link, a FIFO: nothing to store
            except OSError:
                continue
            with open(path, "rb") as src:
                writer.add_file(f, _chunks(src))
        if not files and not dirs and root != str(out):
            writer.add_file(".", [])  # an empty directory's marker, kept in the output
        line = writer.finish()
        if line:
            lines.append(line)
    if lines:
        step.output("".join(lines))


def _call(
    argv: list[str], cwd: Path, env: dict[str, str], io: tuple[Any, Any, Any], timelimit: int | None
) -> int:
    """Run the command; past ``timelimit`` seconds it is killed with all it started.

    A step leading its own process group (the local executor's) runs the
    command in that group, so that what kills the step's group (its
    manager's lifeline, once the manager is gone) kills the command too; a
    time limit then kills the group's other processes. Elsewhere the command
    gets a session of its own, killed whole."""
    own = os.getpgrp() == os.getpid()
    proc = subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=io[0], stdout=io[1], stderr=io[2], start_new_session=not own
    )
    try:
        return proc.wait(timeout=timelimit)
    except subprocess.TimeoutExpired:
        if own:
            _kill_the_others()
        else:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


def _kill_the_others() -> None:
    """SIGKILL every process of this step's group but itself, until none is left."""
    me, group = os.getpid(), os.getpgrp()
    while True:
        found = 0
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:  # pinned first: the pid read cannot be another's by the kill
                pin = os.pidfd_open(int(name))
            except OSError:
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rpartition(b")")[2].split()
                if fields[0] != b"Z" and int(fields[2]) == group:
                    signal.pidfd_send_signal(pin, signal.SIGKILL)
                    found += 1
            except (OSError, ValueError, IndexError):
                pass
            finally:
                os.close(pin)
        if not found:
            return
        time.sleep(0.01)  # killed ones are zombies, not members, once the kernel is done


def _open_in(path: str) -> Any:
    return open(path, "rb")  # the command's stdin, closed as the step exits


def _open_out(out: Path, name: str | None) -> Any:
    if not name:
        return None  # the step's own: the job's log
    path = out / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "wb")


def main() -> int:
    plan = step.params()
    scratch = step.scratch()
    for place in _PLACES.values():
        (scratch / place).mkdir(exist_ok=True)
    _lay_out(scratch)
    rewrite = _rewriter(plan["paths"], scratch)
    out = scratch / "out"
    argv = [rewrite(a) for a in plan["argv"]]
    env = {k: rewrite(v) for k, v in plan["env"].items()}
    env.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
    stdin = _open_in(rewrite(plan["stdin"])) if plan.get("stdin") else subprocess.DEVNULL
    stdout = _open_out(out, plan.get("stdout"))
    stderr = _open_out(out, plan.get("stderr"))
    print("wh cwl: running", " ".join(argv), flush=True)
    try:
        code = _call(argv, out, env, (stdin, stdout, stderr), plan.get("timelimit") or None)
    except OSError as e:
        print(f"wh cwl: the command could not be started: {e}", file=sys.stderr, flush=True)
        code = 127
    except subprocess.TimeoutExpired:
        print(f"wh cwl: ToolTimeLimit: killed after {plan['timelimit']} s", file=sys.stderr)
        return 1
    if not _status(code, plan):
        print(f"wh cwl: the command exited with status {code}", file=sys.stderr, flush=True)
        return 1
    listed = out / "cwl.output.json"
    if listed.is_file():
        # The paths it names are read by the runner, which knows the fixed ones.
        back = _rewriter(plan["paths"], scratch, back=True)
        listed.write_text(back(listed.read_text(encoding="utf-8")), encoding="utf-8")
    _report(out, scratch)
    step.counters(exit_code=code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
